"""rotate_mix's forward kernel: one program per edge, every degree block in registers.

Shapes and math: :mod:`mdband.kernels.rotate_mix`. The program walks the degree blocks
b = 0..L (static), with the three band rows of a block as the slot axis (SLOT_LANES = 4, slot
3 empty) and the 2l+1 columns as the lane axis (COL_LANES); storage entries are addressed only
through ``storage.kernel_tables``. With the mixer it accumulates the edge's output rows of all
blocks in a (SLOT_LANES, OUT_LANES, C) tile (output lane t ↔ l_out = t + |m| of slot s's m) and
stores them once; without it each block's rows are xl · rad. :func:`rotated_block` (x[src] in
the edge's frame) is the backward kernels' too. Exact fp32 / fp64 FMAs, band and dense
storages in the same order (bitwise equal).
"""

from __future__ import annotations

from mdband.kernels import _common as cm

if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    block_tables, entry_index = cm.block_tables, cm.entry_index
    SUM = cm.SUM

    @triton.jit
    def rotated_block(
        x_ptr,
        rot_ptr,
        node,
        edge,
        block,
        tables,
        cc,
        cmask,
        strides,
        COL_LANES: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        LAYOUT: tl.constexpr,
    ):
        """Rotate degree block ``block`` of x[node] into the frame of ``edge``.

        Returns xl (SLOT_LANES, BC), the block's x columns xb (COL_LANES, BC), with the block's
        reduced rows rs (clamped to ≥ 0) and their (SLOT_LANES, BC) mask rm, the entry mask m2 and
        the entries' storage indices (ia, ib). ``tables``: the column, row and entry tables'
        pointers; ``strides``: x's three and the rotation's three.
        """
        col_t, row_t, ea_t, eb_t = tables
        sx0, sx1, sx2, sr0, sra, srb = strides
        col, jm, rows, sv, m2, tix = block_tables(col_t, row_t, block, COL_LANES, SLOT_LANES)
        rs = tl.maximum(rows, 0).to(tl.int64)
        rm = sv[:, None] & cmask[None, :]
        xb = tl.load(
            x_ptr + node * sx0 + col.to(tl.int64)[:, None] * sx1 + cc[None, :] * sx2,
            mask=jm[:, None] & cmask[None, :],
            other=0.0,
        )
        ia, ib = entry_index(ea_t, eb_t, tix, m2, LAYOUT)
        coef = tl.load(rot_ptr + edge * sr0 + (ia * sra + ib * srb), mask=m2, other=0.0)
        xl = tl.reduce(coef[:, :, None] * xb[None, :, :], 1, SUM)
        return xl, xb, rs, rm, m2, ia, ib

    @triton.jit
    def rotate_mix_fwd_kernel(
        # pointers: inputs, output; the storage's and the mixer's kernel tables
        x_ptr,
        src_ptr,
        rot_ptr,
        mixer_ptr,
        basis_ptr,
        radial_ptr,
        y_ptr,
        col_table_ptr,
        row_table_ptr,
        entry_a_ptr,
        entry_b_ptr,
        mixer_index_ptr,
        out_row_ptr,
        # sizes
        n_channels,
        # strides
        stride_x_node,
        stride_x_row,
        stride_x_chan,
        stride_rot_edge,
        stride_rot_a,
        stride_rot_b,
        stride_mixer_edge,
        stride_mixer_entry,
        stride_mixer_rank,
        stride_basis_rank,
        stride_basis_chan,
        stride_radial_edge,
        stride_radial_row,
        stride_radial_chan,
        stride_y_edge,
        stride_y_row,
        stride_y_chan,
        # meta-parameters
        N_BLOCKS: tl.constexpr,
        COL_LANES: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        OUT_LANES: tl.constexpr,
        RANK: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        LAYOUT: tl.constexpr,
        MIXER: tl.constexpr,
    ):
        """Write the edge message y[e] of edge e = program_id(0).

        Rotates x[src_e] into the edge's frame, degree block by degree block, and mixes it (MIXER)
        or multiplies it by the radial rows.
        """
        e = tl.program_id(0).to(tl.int64)
        cc = tl.arange(0, BLOCK_CHANNELS)
        cmask = cc < n_channels
        ss = tl.arange(0, SLOT_LANES)
        tt = tl.arange(0, OUT_LANES)
        node = tl.load(src_ptr + e).to(tl.int64)
        tables = (col_table_ptr, row_table_ptr, entry_a_ptr, entry_b_ptr)
        strides = (
            stride_x_node,
            stride_x_row,
            stride_x_chan,
            stride_rot_edge,
            stride_rot_a,
            stride_rot_b,
        )
        y3 = tl.full((SLOT_LANES, OUT_LANES, BLOCK_CHANNELS), 0.0, y_ptr.dtype.element_ty)
        for b in tl.static_range(N_BLOCKS):
            xl, xb, rs, rm, m2, ia, ib = rotated_block(
                x_ptr,
                rot_ptr,
                node,
                e,
                b,
                tables,
                cc,
                cmask,
                strides,
                COL_LANES,
                SLOT_LANES,
                LAYOUT,
            )
            if MIXER:
                kt = tl.load(
                    mixer_index_ptr + (b * SLOT_LANES + ss)[:, None] * OUT_LANES + tt[None, :]
                ).to(tl.int64)
                km = kt >= 0
                for q in tl.static_range(RANK):
                    kv = tl.load(
                        mixer_ptr
                        + e * stride_mixer_edge
                        + kt * stride_mixer_entry
                        + q * stride_mixer_rank,
                        mask=km,
                        other=0.0,
                    )
                    bq = tl.load(
                        basis_ptr + q * stride_basis_rank + cc * stride_basis_chan,
                        mask=cmask,
                        other=0.0,
                    )
                    y3 += kv[:, :, None] * (bq[None, :] * xl)[:, None, :]
            else:
                rd = tl.load(
                    radial_ptr
                    + e * stride_radial_edge
                    + rs[:, None] * stride_radial_row
                    + cc[None, :] * stride_radial_chan,
                    mask=rm,
                    other=0.0,
                )
                tl.store(
                    y_ptr
                    + e * stride_y_edge
                    + rs[:, None] * stride_y_row
                    + cc[None, :] * stride_y_chan,
                    xl * rd,
                    mask=rm,
                )
        if MIXER:
            orow = tl.load(out_row_ptr + ss[:, None] * OUT_LANES + tt[None, :]).to(tl.int64)
            om = orow >= 0
            tl.store(
                y_ptr
                + e * stride_y_edge
                + orow[:, :, None] * stride_y_row
                + cc[None, None, :] * stride_y_chan,
                y3,
                mask=om[:, :, None] & cmask[None, None, :],
            )
