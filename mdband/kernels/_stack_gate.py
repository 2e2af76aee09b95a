"""The gate kernels of so2_mix_layer (:mod:`mdband.kernels.so2_stack`): the ieee path's forward
and the backward of every path.

Shapes as there (F focus streams, E edges, L = ``lmax``, Dm = 3L+1 rows, C channels): x, h, y,
gy, gh (F, E, Dm, C) contiguous; wg (C, F·L·C), the gate logits of degree l the columns
``f·L·C + (l−1)·C + c``. A gated layer's activation: ``y₀ = x₀ + silu(h₀)``,
``y_r = x_r + h_r·g_{l(r)}`` with ``g = sigmoid(h₀·Wg)``; rows 1..3L are three runs of L rows
(m = 0, −1, +1), so run r of an edge is L·C contiguous floats, as are its gates.

Backward, two kernels (``BWD["kernel"]``), both recomputing the logits from h₀ (no logit
buffer) with tf32x3 tensor-core dots (relative error ≈ 2⁻²¹):

* ``"degree"``: one degree at a time, two (BE × C)·(C × C) dots per degree, the logit
  cotangent folded into row 0 degree by degree.
* ``"all"``: every degree in one tile: the L·C logits of an edge block by one (BE × C)·(C × NP)
  dot, their cotangent back into row 0 by one (BE × NP)·(NP × C) dot, NP = L·C rounded up to a
  power of two (columns past L·C masked to zero: a third more dot work at L = 3, C = 64, none
  at L = 2, C = 32); the three runs of rows are loaded as (BE × NP) tiles.

Both read gy and h and write gh once: 3·Dm·C·4 bytes per edge (7.7 kB at L = 3, C = 64), plus
the gate weights (C·L·C·4 bytes) per program from L2; 4·L·C² FLOP per edge in the dots.
"""

from __future__ import annotations

from mdband.kernels import _common as cm

#: the backward gate kernel ("degree" or "all") and overrides of its launch (edges per program
#: BE and warps; None: BWD_SHAPES, else the gate launch of
#: :func:`mdband.kernels._stack_launch.gate_config`). H200, 2026-12-03 (``benchmarks/gpu_warps.py
#: --gate``, 647,154 edges, the gate alone): "degree" at L = 3, C = 64 2.19 ms (BE 32, 8 warps)
#: → 1.97 (BE 64, 4 warps; not faster in the model: BWD_SHAPES), L = 2, C = 32 0.62 (BE 16,
#: 2 warps, its best); "all" 3.2 and 0.61 at best (at L = 3 its (BE × 256) tiles spill
#: registers): "degree" stays
BWD = {"kernel": "degree", "BE": None, "warps": None}
BWD_KERNELS = ("degree", "all")
#: per-(L, C) launches of the backward gate kernel that replace the gate launch: none. The
#: sweep's best at L = 3, C = 64 (BE 64, 4 warps) timed the same in the model's call as the
#: gate launch (BE 32, 8 warps): 1.91 against 1.90 ms per launch (vs_deepmd.py profiles)
BWD_SHAPES: dict[tuple[int, int], dict] = {}

if cm.TRITON_AVAILABLE:
    triton, tl = cm.triton, cm.tl

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
    def _gate_bwd_kernel(
        gy_ptr, h_ptr, wg_ptr, gh_ptr, E, SG,
        L: tl.constexpr, C: tl.constexpr, BE: tl.constexpr,
    ):  # fmt: skip
        """gh = act'(h)ᵀ gy, one degree at a time (``BWD["kernel"] = "degree"``)."""
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
                tl.store(gh_ptr + off, gyr * gate, mask=em)
            glg = gg * gate * (1.0 - gate)
            gh0 = tl.dot(glg, tl.trans(wl), gh0, input_precision="tf32x3")
        tl.store(gh_ptr + base, gh0, mask=em)

    @triton.jit
    def _gate_bwd_all_kernel(
        gy_ptr, h_ptr, wg_ptr, gh_ptr, E, SG,
        L: tl.constexpr, C: tl.constexpr, NP: tl.constexpr, BE: tl.constexpr,
    ):  # fmt: skip
        """gh = act'(h)ᵀ gy, every degree in one (BE × NP) tile (``BWD["kernel"] = "all"``)."""
        DM: tl.constexpr = 3 * L + 1
        f, em, idx, c, base = _edge_rows(E, BE, DM, C)
        row = idx * (DM * C)
        k = tl.arange(0, NP)
        km = (k < L * C)[None, :]
        h0 = tl.load(h_ptr + base, mask=em, other=0.0)
        gh0 = tl.load(gy_ptr + base, mask=em, other=0.0) * _silu_grad(h0)
        wg = tl.load(wg_ptr + c[:, None] * SG + f * (L * C) + k[None, :], mask=km, other=0.0)
        gate = tl.sigmoid(tl.dot(h0, wg, input_precision="tf32x3"))
        gg = tl.zeros((BE, NP), tl.float32)
        for r in range(3):
            off = row + (1 + r * L) * C + k[None, :]
            gyr = tl.load(gy_ptr + off, mask=em & km, other=0.0)
            gg += gyr * tl.load(h_ptr + off, mask=em & km, other=0.0)
            tl.store(gh_ptr + off, gyr * gate, mask=em & km)
        glg = gg * gate * (1.0 - gate)  # zero in the masked columns
        gh0 = tl.dot(glg, tl.trans(wg), gh0, input_precision="tf32x3")
        tl.store(gh_ptr + base, gh0, mask=em)


def bwd_launch(L: int, C: int, gate: dict) -> tuple[str, int, int]:
    """(kernel, BE, warps) of the backward gate kernel; ``gate`` the shape's gate launch."""
    kernel = BWD["kernel"]
    if kernel not in BWD_KERNELS:
        raise ValueError(f"so2_mix_layer: gate backward kernel must be one of {BWD_KERNELS}, "
                         f"got {kernel!r}")  # fmt: skip
    shape = BWD_SHAPES.get((L, C), {})
    BE = BWD["BE"] or shape.get("BE") or gate["BE"]
    return kernel, BE, BWD["warps"] or shape.get("warps") or gate["bwd_warps"]


def gate_fwd(x, h, lg, y, L: int, BE: int, warps: int):
    """Launch the ieee path's gate forward into y (inside a triton_op)."""
    F, E, _, C = x.shape
    cm.wrap(_gate_fwd_kernel)[(triton.cdiv(E, BE), F)](x, h, lg, y, E, L=L, C=C, BE=BE,
                                                        num_warps=warps)  # fmt: skip


def gate_bwd(gy, h, wg, gh, L: int, gate: dict):
    """Launch the backward gate kernel of :data:`BWD` into gh (inside a triton_op)."""
    F, E, _, C = gy.shape
    kernel, BE, warps = bwd_launch(L, C, gate)
    grid = (triton.cdiv(E, BE), F)
    if kernel == "all":
        NP = triton.next_power_of_2(L * C)
        cm.wrap(_gate_bwd_all_kernel)[grid](gy, h, wg, gh, E, wg.shape[1], L=L, C=C, NP=NP,
                                            BE=BE, num_warps=warps, num_stages=1)  # fmt: skip
        return
    cm.wrap(_gate_bwd_kernel)[grid](gy, h, wg, gh, E, wg.shape[1], L=L, C=C, BE=BE,
                                    num_warps=warps, num_stages=1)  # fmt: skip
