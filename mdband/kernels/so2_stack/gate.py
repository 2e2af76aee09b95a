"""The gate kernels of so2_mix_layer: the ieee path's forward and the backward of every path.

Shapes as in :mod:`mdband.kernels.so2_stack` (F focus streams, E edges, L = ``lmax``, Dm = 3L+1
rows, C channels): x, h, y, gy, gh (F, E, Dm, C) contiguous; wg (C, F·L·C), the gate logits of
degree l the columns ``f·L·C + (l−1)·C + c``. A gated layer's activation: ``y₀ = x₀ + silu(h₀)``,
``y_r = x_r + h_r·g_{l(r)}`` with ``g = sigmoid(h₀·Wg)``; rows 1..3L are three runs of L rows
(m = 0, −1, +1), so run r of an edge is L·C contiguous floats, as are its gates.

Backward: one degree at a time, the logits recomputed from h₀ (no logit buffer) by tf32x3
tensor-core dots (relative error ≈ 2⁻²¹), two (BE × C)·(C × C) dots per degree, the logit
cotangent folded into row 0 degree by degree; launched per the tuning table's gate launch of
(L, C) (BENCHMARKS.md "2026-12-03 (second session)"). A kernel with every degree in one
(BE × 256) tile (commit 68ca275) was no faster (it spills at L = 3) and is gone. With SPLIT it
writes gh as the fp16 parts and per-row scales the pre-split product reads (:mod:`.presplit`).

It reads gy and h and writes gh once: 3·Dm·C·4 bytes per edge (7.7 kB at L = 3, C = 64), plus
the gate weights (C·L·C·4 bytes) per program from L2; 4·L·C² FLOP per edge in the dots.
"""

from __future__ import annotations

from mdband.kernels import _common as cm

if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    from mdband.kernels.so2_stack.split_dots import split_x

    @triton.jit
    def gate_tile(
        gate_weight_ptr, focus, degree, c, stride_row, LMAX: tl.constexpr, CHANNELS: tl.constexpr
    ):
        """Gate weights of ``degree`` of ``focus``: (C_in, C_out), row stride F·L·C."""
        return tl.load(
            gate_weight_ptr
            + (
                c[:, None] * stride_row
                + (focus * (LMAX * CHANNELS) + (degree - 1) * CHANNELS)
                + c[None, :]
            )
        )

    @triton.jit
    def _edge_rows(n_edges, BLOCK_EDGES: tl.constexpr, ROWS: tl.constexpr, CHANNELS: tl.constexpr):
        """Return the program's focus f, edge mask, flat edge indices, channels and row-0 offsets.

        The focus f, its edges' mask and flat indices f·E + e (both (BE, 1)), the channels c and the
        offsets of the edges' row 0 (BE, C).
        """
        f = tl.program_id(1).to(tl.int64)
        e = tl.program_id(0).to(tl.int64) * BLOCK_EDGES + tl.arange(0, BLOCK_EDGES)
        idx = (f * n_edges + e)[:, None]
        c = tl.arange(0, CHANNELS)
        return f, (e < n_edges)[:, None], idx, c, idx * (ROWS * CHANNELS) + c[None, :]

    @triton.jit
    def _silu_grad(h0):
        s0 = tl.sigmoid(h0)
        return s0 * (1.0 + h0 * (1.0 - s0))

    @triton.jit
    def so2_gate_fwd_kernel(
        x_ptr,
        h_ptr,
        logits_ptr,
        y_ptr,
        n_edges,
        LMAX: tl.constexpr,
        CHANNELS: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
    ):
        """Compute y = x + act(h) given the gate logits (F, E, L·C)."""
        L: tl.constexpr = LMAX
        C: tl.constexpr = CHANNELS
        DM: tl.constexpr = 3 * L + 1
        f, em, idx, c, base = _edge_rows(n_edges, BLOCK_EDGES, DM, C)
        gbase = idx * (L * C) + c[None, :]
        h0 = tl.load(h_ptr + base, mask=em, other=0.0)
        x0 = tl.load(x_ptr + base, mask=em, other=0.0)
        tl.store(y_ptr + base, x0 + h0 * tl.sigmoid(h0), mask=em)
        for lo in range(1, L + 1):
            gate = tl.sigmoid(tl.load(logits_ptr + gbase + (lo - 1) * C, mask=em, other=0.0))
            for r in range(3):
                off = base + (lo + r * L) * C
                hr = tl.load(h_ptr + off, mask=em, other=0.0)
                xr = tl.load(x_ptr + off, mask=em, other=0.0)
                tl.store(y_ptr + off, xr + hr * gate, mask=em)

    @triton.jit
    def _store_row(gh_ptr, gh_lo_ptr, inv_ptr, off, row, value, em, SPLIT: tl.constexpr):
        """Store row ``row`` of gh (BE, C) at ``off``.

        fp32, or (SPLIT) its fp16 parts and scale (:class:`.presplit.SplitRows`; ``row`` the (BE, 1)
        flat row index f·E·Dm + e·Dm + r).
        """
        if SPLIT:
            hi, lo, inv = split_x(value, 1)  # fp16x3's split of an x tile
            tl.store(gh_ptr + off, hi, mask=em)
            tl.store(gh_lo_ptr + off, lo, mask=em)
            tl.store(inv_ptr + row, inv[:, None], mask=em)
        else:
            tl.store(gh_ptr + off, value, mask=em)

    @triton.jit
    def so2_gate_bwd_kernel(
        gy_ptr,
        h_ptr,
        gate_weight_ptr,
        gh_ptr,
        gh_lo_ptr,
        inv_ptr,
        n_edges,
        stride_gate_weight_row,
        LMAX: tl.constexpr,
        CHANNELS: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        SPLIT: tl.constexpr,
    ):
        """Compute gh = act'(h)ᵀ gy, one degree at a time.

        SPLIT: gh as fp16 parts, :func:`_store_row`.
        """
        L: tl.constexpr = LMAX
        C: tl.constexpr = CHANNELS
        DM: tl.constexpr = 3 * L + 1
        f, em, idx, c, base = _edge_rows(n_edges, BLOCK_EDGES, DM, C)
        h0 = tl.load(h_ptr + base, mask=em, other=0.0)
        gh0 = tl.load(gy_ptr + base, mask=em, other=0.0) * _silu_grad(h0)
        for lo in range(1, L + 1):
            wl = gate_tile(gate_weight_ptr, f, lo, c, stride_gate_weight_row, L, C)
            gate = tl.sigmoid(tl.dot(h0, wl, input_precision="tf32x3"))
            gg = tl.zeros((BLOCK_EDGES, C), tl.float32)
            for r in range(3):
                off = base + (lo + r * L) * C
                gyr = tl.load(gy_ptr + off, mask=em, other=0.0)
                gg += gyr * tl.load(h_ptr + off, mask=em, other=0.0)
                row = idx * DM + (lo + r * L)
                _store_row(gh_ptr, gh_lo_ptr, inv_ptr, off, row, gyr * gate, em, SPLIT)
            glg = gg * gate * (1.0 - gate)
            gh0 = tl.dot(glg, tl.trans(wl), gh0, input_precision="tf32x3")
        _store_row(gh_ptr, gh_lo_ptr, inv_ptr, base, idx * DM, gh0, em, SPLIT)
