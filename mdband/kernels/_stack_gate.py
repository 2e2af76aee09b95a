"""The gate kernels of so2_mix_layer (:mod:`mdband.kernels.so2_stack`): the ieee path's forward
and the backward of every path.

Shapes as there (F focus streams, E edges, L = ``lmax``, Dm = 3L+1 rows, C channels): x, h, y,
gy, gh (F, E, Dm, C) contiguous; wg (C, F·L·C), the gate logits of degree l the columns
``f·L·C + (l−1)·C + c``. A gated layer's activation: ``y₀ = x₀ + silu(h₀)``,
``y_r = x_r + h_r·g_{l(r)}`` with ``g = sigmoid(h₀·Wg)``; rows 1..3L are three runs of L rows
(m = 0, −1, +1), so run r of an edge is L·C contiguous floats, as are its gates.

Backward: one degree at a time, the logits recomputed from h₀ (no logit buffer) by tf32x3
tensor-core dots (relative error ≈ 2⁻²¹), two (BE × C)·(C × C) dots per degree, the logit
cotangent folded into row 0 degree by degree; launched per
:func:`~mdband.kernels._stack_launch.gate_config` (BE, bwd_warps). Measured on an H200
(2026-12-03, ``benchmarks/gpu_warps.py --gate``, 647,154 edges, the gate alone): L = 3, C = 64
2.19 ms at the default launch (32 edges, 8 warps), 1.97 at 64 edges and 4 warps (1.91 against
1.90 ms per launch in the model's call: no change kept); L = 2, C = 32 0.62 ms (16 edges, 2
warps, its best). A kernel with every degree in one (BE × 256) tile (commit 68ca275) was no
faster (3.2 and 0.61 ms at best; it spills at L = 3) and is gone.

It reads gy and h and writes gh once: 3·Dm·C·4 bytes per edge (7.7 kB at L = 3, C = 64), plus
the gate weights (C·L·C·4 bytes) per program from L2; 4·L·C² FLOP per edge in the dots.
"""

from __future__ import annotations

from mdband.kernels import _common as cm
from mdband.kernels import _split_dots as sd

if cm.TRITON_AVAILABLE:
    triton, tl = cm.triton, cm.tl
    split_x = sd.split_x

    @triton.jit
    def gate_tile(wg_ptr, f, lo, c, SG, L: tl.constexpr, C: tl.constexpr):
        """Gate weights of degree lo of focus f: (C_in, C_out), wg row stride SG = F·L·C."""
        return tl.load(wg_ptr + (c[:, None] * SG + (f * (L * C) + (lo - 1) * C) + c[None, :]))

    @triton.jit
    def _edge_rows(E, BE: tl.constexpr, DM: tl.constexpr, C: tl.constexpr):
        """This program's focus f, its edges' mask and flat indices f·E + e (both (BE, 1)), the
        channels c and the offsets of the edges' row 0 (BE, C)."""
        f = tl.program_id(1).to(tl.int64)
        e = tl.program_id(0).to(tl.int64) * BE + tl.arange(0, BE)
        idx = (f * E + e)[:, None]
        c = tl.arange(0, C)
        return f, (e < E)[:, None], idx, c, idx * (DM * C) + c[None, :]

    @triton.jit
    def _silu_grad(h0):
        s0 = tl.sigmoid(h0)
        return s0 * (1.0 + h0 * (1.0 - s0))

    @triton.jit
    def _gate_fwd_kernel(
        x_ptr, h_ptr, lg_ptr, y_ptr, E,
        L: tl.constexpr, C: tl.constexpr, BE: tl.constexpr,
    ):  # fmt: skip
        """y = x + act(h) given the gate logits lg (F, E, L·C)."""
        DM: tl.constexpr = 3 * L + 1
        f, em, idx, c, base = _edge_rows(E, BE, DM, C)
        gbase = idx * (L * C) + c[None, :]
        h0 = tl.load(h_ptr + base, mask=em, other=0.0)
        x0 = tl.load(x_ptr + base, mask=em, other=0.0)
        tl.store(y_ptr + base, x0 + h0 * tl.sigmoid(h0), mask=em)
        for lo in range(1, L + 1):
            gate = tl.sigmoid(tl.load(lg_ptr + gbase + (lo - 1) * C, mask=em, other=0.0))
            for r in range(3):
                off = base + (lo + r * L) * C
                hr = tl.load(h_ptr + off, mask=em, other=0.0)
                xr = tl.load(x_ptr + off, mask=em, other=0.0)
                tl.store(y_ptr + off, xr + hr * gate, mask=em)

    @triton.jit
    def _store_row(gh_ptr, ghl_ptr, inv_ptr, off, row, v, em, SPLIT: tl.constexpr):
        """Row ``row`` of gh (BE, C) at ``off``: fp32, or (SPLIT) its fp16 parts and scale
        (:class:`mdband.kernels._presplit_linear.SplitRows`; ``row`` the (BE, 1) flat row
        index f·E·Dm + e·Dm + r)."""
        if SPLIT:
            hi, lo, inv = split_x(v, 1)  # fp16x3's split of an x tile
            tl.store(gh_ptr + off, hi, mask=em)
            tl.store(ghl_ptr + off, lo, mask=em)
            tl.store(inv_ptr + row, inv[:, None], mask=em)
        else:
            tl.store(gh_ptr + off, v, mask=em)

    @triton.jit
    def _gate_bwd_kernel(
        gy_ptr, h_ptr, wg_ptr, gh_ptr, ghl_ptr, inv_ptr, E, SG,
        L: tl.constexpr, C: tl.constexpr, BE: tl.constexpr, SPLIT: tl.constexpr,
    ):  # fmt: skip
        """gh = act'(h)ᵀ gy, one degree at a time (SPLIT: gh as fp16 parts, :func:`_store_row`)."""
        DM: tl.constexpr = 3 * L + 1
        f, em, idx, c, base = _edge_rows(E, BE, DM, C)
        h0 = tl.load(h_ptr + base, mask=em, other=0.0)
        gh0 = tl.load(gy_ptr + base, mask=em, other=0.0) * _silu_grad(h0)
        for lo in range(1, L + 1):
            wl = gate_tile(wg_ptr, f, lo, c, SG, L, C)
            gate = tl.sigmoid(tl.dot(h0, wl, input_precision="tf32x3"))
            gg = tl.zeros((BE, C), tl.float32)
            for r in range(3):
                off = base + (lo + r * L) * C
                gyr = tl.load(gy_ptr + off, mask=em, other=0.0)
                gg += gyr * tl.load(h_ptr + off, mask=em, other=0.0)
                _store_row(gh_ptr, ghl_ptr, inv_ptr, off, idx * DM + (lo + r * L), gyr * gate, em,
                           SPLIT)  # fmt: skip
            glg = gg * gate * (1.0 - gate)
            gh0 = tl.dot(glg, tl.trans(wl), gh0, input_precision="tf32x3")
        _store_row(gh_ptr, ghl_ptr, inv_ptr, base, idx * DM, gh0, em, SPLIT)


def gate_fwd(x, h, lg, y, L: int, BE: int, warps: int):
    """Launch the ieee path's gate forward into y (inside a triton_op)."""
    F, E, _, C = x.shape
    cm.wrap(_gate_fwd_kernel)[(triton.cdiv(E, BE), F)](x, h, lg, y, E, L=L, C=C, BE=BE,
                                                        num_warps=warps)  # fmt: skip


def gate_bwd(gy, h, wg, gh, L: int, BE: int, warps: int):
    """Launch the backward gate kernel into gh (inside a triton_op): an fp32 tensor like gy, or
    a :class:`mdband.kernels._presplit_linear.SplitRows` for the pre-split linear kernel."""
    F, E, _, C = gy.shape
    split = isinstance(gh, tuple)
    outs = tuple(gh) if split else (gh, gh, gh)
    cm.wrap(_gate_bwd_kernel)[(triton.cdiv(E, BE), F)](gy, h, wg, *outs, E, wg.shape[1], L=L,
                                                        C=C, BE=BE, SPLIT=split, num_warps=warps,
                                                        num_stages=1)  # fmt: skip
