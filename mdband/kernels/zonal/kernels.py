"""zonal_embed's kernels: one program per destination node over its CSR segment.

Forward (every degree block, one edge at a time) and backward ("walk": one edge at a time, exact
FMAs; "dot": BLOCK_EDGES edges per step as tf32x3 tl.dot products). Shapes and math:
:mod:`mdband.kernels.zonal`.
"""

from __future__ import annotations

from mdband.kernels import _common as cm

if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    entry_index, node_segment = cm.entry_index, cm.node_segment
    SUM = cm.SUM

    @triton.jit
    def _zonal_block(
        col_table_ptr,
        entry_a_ptr,
        entry_b_ptr,
        block,
        COL_LANES: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        LAYOUT: tl.constexpr,
    ):
        """Load degree block ``block``'s packed columns and the storage indices of its m = 0 row.

        Returns the packed columns col (COL_LANES,), their mask jm and the storage indices (ia, ib)
        of its m = 0 row (slot 0) of the rotation storage.
        """
        jj = tl.arange(0, COL_LANES)
        col = tl.load(col_table_ptr + block * COL_LANES + jj)
        jm = col >= 0
        ia, ib = entry_index(
            entry_a_ptr, entry_b_ptr, (block * SLOT_LANES) * COL_LANES + jj, jm, LAYOUT
        )
        return col, jm, ia, ib

    @triton.jit
    def zonal_fwd_kernel(
        # pointers: inputs, the CSR by destination, output; the storage's kernel tables
        rot_ptr,
        radial_ptr,
        perm_ptr,
        offsets_ptr,
        node_scale_ptr,
        out_ptr,
        col_table_ptr,
        entry_a_ptr,
        entry_b_ptr,
        # sizes
        n_channels,
        # strides
        stride_rot_edge,
        stride_rot_a,
        stride_rot_b,
        stride_radial_edge,
        stride_radial_deg,
        stride_radial_chan,
        stride_out_node,
        stride_out_row,
        stride_out_chan,
        # meta-parameters
        N_BLOCKS: tl.constexpr,
        COL_LANES: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        LAYOUT: tl.constexpr,
    ):
        """Compute out[n] of destination node n = program_id(0).

        Walks the node's segment one edge at a time, every degree block.
        """
        n, beg, end, cc, cmask = node_segment(offsets_ptr, n_channels, BLOCK_CHANNELS)
        jj = tl.arange(0, COL_LANES)
        sn = tl.load(node_scale_ptr + n)
        dt = out_ptr.dtype.element_ty
        col = tl.load(col_table_ptr + jj)  # block 0 (degree 0) is not embedded
        jm = col >= 0
        tl.store(
            out_ptr
            + n * stride_out_node
            + col.to(tl.int64)[:, None] * stride_out_row
            + cc[None, :] * stride_out_chan,
            tl.full((COL_LANES, BLOCK_CHANNELS), 0.0, dt),
            mask=jm[:, None] & cmask[None, :],
        )
        for b in tl.static_range(1, N_BLOCKS):
            col, jm, ia, ib = _zonal_block(
                col_table_ptr, entry_a_ptr, entry_b_ptr, b, COL_LANES, SLOT_LANES, LAYOUT
            )
            off = ia * stride_rot_a + ib * stride_rot_b
            acc = tl.full((COL_LANES, BLOCK_CHANNELS), 0.0, dt)
            for i in range(beg, end):
                e = tl.load(perm_ptr + i).to(tl.int64)
                yv = tl.load(rot_ptr + e * stride_rot_edge + off, mask=jm, other=0.0)
                rv = tl.load(
                    radial_ptr
                    + e * stride_radial_edge
                    + b * stride_radial_deg
                    + cc * stride_radial_chan,
                    mask=cmask,
                    other=0.0,
                )
                acc += yv[:, None] * rv[None, :]
            tl.store(
                out_ptr
                + n * stride_out_node
                + col.to(tl.int64)[:, None] * stride_out_row
                + cc[None, :] * stride_out_chan,
                acc * sn,
                mask=jm[:, None] & cmask[None, :],
            )

    @triton.jit
    def zonal_walk_bwd_kernel(
        # pointers: inputs, the CSR by destination, outputs; the storage's kernel tables
        gout_ptr,
        rot_ptr,
        radial_ptr,
        perm_ptr,
        offsets_ptr,
        node_scale_ptr,
        grot_ptr,
        gradial_ptr,
        gscale_ptr,
        col_table_ptr,
        entry_a_ptr,
        entry_b_ptr,
        # sizes
        n_channels,
        # strides
        stride_gout_node,
        stride_gout_row,
        stride_gout_chan,
        stride_rot_edge,
        stride_rot_a,
        stride_rot_b,
        stride_radial_edge,
        stride_radial_deg,
        stride_radial_chan,
        stride_grot_edge,
        stride_grot_a,
        stride_grot_b,
        stride_gradial_edge,
        stride_gradial_deg,
        stride_gradial_chan,
        # meta-parameters
        N_BLOCKS: tl.constexpr,
        COL_LANES: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        LAYOUT: tl.constexpr,
    ):
        """Run the "walk" backward of destination node n = program_id(0), one edge at a time.

        Exact FMAs; writes the radial and storage cotangents of n's edges and the node scale's
        cotangent gs[n].
        """
        n, beg, end, cc, cmask = node_segment(offsets_ptr, n_channels, BLOCK_CHANNELS)
        sn = tl.load(node_scale_ptr + n)
        dt = gradial_ptr.dtype.element_ty
        gsacc = sn * 0.0
        for i in range(beg, end):
            e = tl.load(perm_ptr + i).to(tl.int64)
            tl.store(
                gradial_ptr + e * stride_gradial_edge + cc * stride_gradial_chan,
                tl.full((BLOCK_CHANNELS,), 0.0, dt),
                mask=cmask,
            )
            for b in tl.static_range(1, N_BLOCKS):
                col, jm, ia, ib = _zonal_block(
                    col_table_ptr, entry_a_ptr, entry_b_ptr, b, COL_LANES, SLOT_LANES, LAYOUT
                )
                off = ia * stride_rot_a + ib * stride_rot_b
                goff = ia * stride_grot_a + ib * stride_grot_b
                g = tl.load(
                    gout_ptr
                    + n * stride_gout_node
                    + col.to(tl.int64)[:, None] * stride_gout_row
                    + cc[None, :] * stride_gout_chan,
                    mask=jm[:, None] & cmask[None, :],
                    other=0.0,
                )
                yv = tl.load(rot_ptr + e * stride_rot_edge + off, mask=jm, other=0.0)
                rv = tl.load(
                    radial_ptr
                    + e * stride_radial_edge
                    + b * stride_radial_deg
                    + cc * stride_radial_chan,
                    mask=cmask,
                    other=0.0,
                )
                u = tl.reduce(yv[:, None] * g, 0, SUM)
                tl.store(
                    gradial_ptr
                    + e * stride_gradial_edge
                    + b * stride_gradial_deg
                    + cc * stride_gradial_chan,
                    u * sn,
                    mask=cmask,
                )
                gy = tl.reduce(g * rv[None, :], 1, SUM)
                tl.store(grot_ptr + e * stride_grot_edge + goff, gy * sn, mask=jm)
                gsacc += tl.reduce(u * rv, 0, SUM)
        tl.store(gscale_ptr + n, gsacc)

    @triton.jit
    def zonal_dot_bwd_kernel(
        # pointers: inputs, the CSR by destination, outputs; the storage's kernel tables
        gout_ptr,
        rot_ptr,
        radial_ptr,
        perm_ptr,
        offsets_ptr,
        node_scale_ptr,
        grot_ptr,
        gradial_ptr,
        gscale_ptr,
        col_table_ptr,
        entry_a_ptr,
        entry_b_ptr,
        # sizes
        n_channels,
        # strides
        stride_gout_node,
        stride_gout_row,
        stride_gout_chan,
        stride_rot_edge,
        stride_rot_a,
        stride_rot_b,
        stride_radial_edge,
        stride_radial_deg,
        stride_radial_chan,
        stride_grot_edge,
        stride_grot_a,
        stride_grot_b,
        stride_gradial_edge,
        stride_gradial_deg,
        stride_gradial_chan,
        # meta-parameters
        N_BLOCKS: tl.constexpr,
        COL_LANES: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        DOT_COLS: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        LAYOUT: tl.constexpr,
    ):
        """Run the backward of one node, its segment's edges BLOCK_EDGES at a time.

        Per degree block, the radial cotangent u = Y·g (BE, DOT_COLS)·(DOT_COLS, BC) and the
        storage's Y cotangent rad·gᵀ as tf32x3 dots (DOT_COLS ≥ 16 padded columns, BC ≥ 16
        channels).
        """
        n, beg, end, cc, cmask = node_segment(offsets_ptr, n_channels, BLOCK_CHANNELS)
        sn = tl.load(node_scale_ptr + n)
        dt = gradial_ptr.dtype.element_ty
        jj = tl.arange(0, DOT_COLS)
        gsacc = sn * 0.0
        for i0 in range(beg, end, BLOCK_EDGES):
            ii = i0 + tl.arange(0, BLOCK_EDGES)
            em = ii < end
            e = tl.load(perm_ptr + ii, mask=em, other=0).to(tl.int64)
            rm = em[:, None] & cmask[None, :]
            tl.store(
                gradial_ptr + e[:, None] * stride_gradial_edge + cc[None, :] * stride_gradial_chan,
                tl.zeros((BLOCK_EDGES, BLOCK_CHANNELS), dt),
                rm,
            )
            for b in tl.static_range(1, N_BLOCKS):
                col = tl.load(col_table_ptr + b * COL_LANES + jj, mask=jj < COL_LANES, other=-1)
                jm = col >= 0
                ia, ib = entry_index(
                    entry_a_ptr, entry_b_ptr, (b * SLOT_LANES) * COL_LANES + jj, jm, LAYOUT
                )
                g = tl.load(
                    gout_ptr
                    + n * stride_gout_node
                    + col.to(tl.int64)[:, None] * stride_gout_row
                    + cc[None, :] * stride_gout_chan,
                    mask=jm[:, None] & cmask[None, :],
                    other=0.0,
                )
                ym = em[:, None] & jm[None, :]
                yv = tl.load(
                    rot_ptr
                    + e[:, None] * stride_rot_edge
                    + (ia * stride_rot_a + ib * stride_rot_b)[None, :],
                    ym,
                    0.0,
                )
                rv = tl.load(
                    radial_ptr
                    + e[:, None] * stride_radial_edge
                    + b * stride_radial_deg
                    + cc[None, :] * stride_radial_chan,
                    rm,
                    0.0,
                )
                u = tl.dot(yv, g, input_precision="tf32x3")
                tl.store(
                    gradial_ptr
                    + e[:, None] * stride_gradial_edge
                    + b * stride_gradial_deg
                    + cc[None, :] * stride_gradial_chan,
                    u * sn,
                    rm,
                )
                gyv = tl.dot(rv, tl.trans(g), input_precision="tf32x3")
                tl.store(
                    grot_ptr
                    + e[:, None] * stride_grot_edge
                    + (ia * stride_grot_a + ib * stride_grot_b)[None, :],
                    gyv * sn,
                    ym,
                )
                gsacc += tl.sum(tl.sum(u * rv, axis=1), axis=0)
        tl.store(gscale_ptr + n, gsacc)
