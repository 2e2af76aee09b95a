"""rotate_mix's "edge" backward: an edge kernel, then a node kernel over the source CSR.

One program per BLOCK_EDGES edges, then one per (source node, degree block) over the source CSR.

Shapes and math: :mod:`mdband.kernels.rotate_mix`. Both kernels walk the degree blocks as the
forward does (:func:`~.forward.rotated_block`). Edge kernel: reads x[src], rot, the mixer k (or
rad) and gy; writes the storage cotangent, gk, each program's basis partials (summed by the
caller) and, with the mixer, the mixer's input cotangent gxl (E, Dm, C) for the node kernel
(without the mixer: grad, and the node kernel forms gy · rad itself). Node kernel: gx[n] = Σ
over n's out-edges of the transposed rotation of that cotangent, a deterministic segment sum
(no atomics). Exact fp32 / fp64 FMAs, band and dense storages in the same order (bitwise
equal).
"""

from __future__ import annotations

from mdband.kernels import _common as cm
from mdband.kernels.rotate_mix import forward

if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    node_block, rotated_block = cm.node_block, forward.rotated_block
    SUM = cm.SUM

    @triton.jit
    def radial_rows(radial_ptr, gy_ptr, edge, rs, rm, cc, strides):
        """Return the rows rs (mask rm) of the edge's radial weights and of its output cotangent gy.

        ``strides``: the radial weights' three and gy's three.
        """
        sd0, sd1, sd2, sg0, sg1, sg2 = strides
        rd = tl.load(
            radial_ptr + edge * sd0 + rs[:, None] * sd1 + cc[None, :] * sd2, mask=rm, other=0.0
        )
        gr = tl.load(
            gy_ptr + edge * sg0 + rs[:, None] * sg1 + cc[None, :] * sg2, mask=rm, other=0.0
        )
        return rd, gr

    @triton.jit
    def rotate_mix_edge_bwd_kernel(
        # pointers: inputs, outputs; the storage's and the mixer's kernel tables
        x_ptr,
        src_ptr,
        rot_ptr,
        mixer_ptr,
        basis_ptr,
        radial_ptr,
        gy_ptr,
        grot_ptr,
        gmixer_ptr,
        gbasis_partial_ptr,
        grad_ptr,
        col_table_ptr,
        row_table_ptr,
        entry_a_ptr,
        entry_b_ptr,
        mixer_index_ptr,
        out_row_ptr,
        # sizes
        n_edges,
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
        stride_gy_edge,
        stride_gy_row,
        stride_gy_chan,
        stride_grot_edge,
        stride_grot_a,
        stride_grot_b,
        stride_gmixer_edge,
        stride_gmixer_entry,
        stride_gmixer_rank,
        stride_gbasis_prog,
        stride_gbasis_rank,
        stride_gbasis_chan,
        stride_grad_edge,
        stride_grad_row,
        stride_grad_chan,
        # meta-parameters
        N_BLOCKS: tl.constexpr,
        COL_LANES: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        OUT_LANES: tl.constexpr,
        RANK: tl.constexpr,
        BLOCK_RANK: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        LAYOUT: tl.constexpr,
        MIXER: tl.constexpr,
    ):
        """Run the edge backward of BLOCK_EDGES edges per program.

        Writes the storage cotangent, gk, the program's basis partials and, with the mixer, the
        mixer's input cotangent for the node kernel (then grad_ptr is that scratch); without the
        mixer, grad.
        """
        pid = tl.program_id(0).to(tl.int64)
        cc = tl.arange(0, BLOCK_CHANNELS)
        cmask = cc < n_channels
        ss = tl.arange(0, SLOT_LANES)
        tt = tl.arange(0, OUT_LANES)
        qq = tl.arange(0, BLOCK_RANK)
        dt = gy_ptr.dtype.element_ty
        gbacc = tl.full((BLOCK_RANK, BLOCK_CHANNELS), 0.0, dt)
        orow = tl.load(out_row_ptr + ss[:, None] * OUT_LANES + tt[None, :]).to(tl.int64)
        om3 = (orow >= 0)[:, :, None] & cmask[None, None, :]
        tables = (col_table_ptr, row_table_ptr, entry_a_ptr, entry_b_ptr)
        strides = (
            stride_x_node,
            stride_x_row,
            stride_x_chan,
            stride_rot_edge,
            stride_rot_a,
            stride_rot_b,
        )
        radial_strides = (
            stride_radial_edge,
            stride_radial_row,
            stride_radial_chan,
            stride_gy_edge,
            stride_gy_row,
            stride_gy_chan,
        )
        for i in range(BLOCK_EDGES):
            e0 = pid * BLOCK_EDGES + i
            valid = e0 < n_edges
            e = tl.minimum(e0, n_edges - 1)  # tail programs redo the last edge; partials skip it
            node = tl.load(src_ptr + e).to(tl.int64)
            if MIXER:
                g3 = tl.load(
                    gy_ptr
                    + e * stride_gy_edge
                    + orow[:, :, None] * stride_gy_row
                    + cc[None, None, :] * stride_gy_chan,
                    mask=om3,
                    other=0.0,
                )
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
                    # slot 0 is m = 0; slots 1, 2 (m = -1, +1) share the |m| = 1 mixer entries
                    k0 = tl.load(mixer_index_ptr + (b * SLOT_LANES) * OUT_LANES + tt).to(tl.int64)
                    k1 = tl.load(mixer_index_ptr + (b * SLOT_LANES + 1) * OUT_LANES + tt).to(
                        tl.int64
                    )
                    gxl = tl.full((SLOT_LANES, BLOCK_CHANNELS), 0.0, dt)
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
                        u = tl.reduce(kv[:, :, None] * g3, 1, SUM)
                        gxl += bq[None, :] * u
                        gbq = tl.reduce(u * xl, 0, SUM)
                        gbacc += tl.where(
                            valid, tl.where((qq == q)[:, None], gbq[None, :], 0.0), 0.0
                        )
                        v = tl.reduce(g3 * (bq[None, :] * xl)[:, None, :], 2, SUM)
                        v0 = tl.reduce(tl.where(ss[:, None] == 0, v, 0.0), 0, SUM)
                        v1 = tl.reduce(tl.where(ss[:, None] > 0, v, 0.0), 0, SUM)
                        gk = gmixer_ptr + e * stride_gmixer_edge
                        tl.store(
                            gk + k0 * stride_gmixer_entry + q * stride_gmixer_rank, v0, mask=k0 >= 0
                        )
                        tl.store(
                            gk + k1 * stride_gmixer_entry + q * stride_gmixer_rank, v1, mask=k1 >= 0
                        )
                    # the mixer's input cotangent, for the node kernel
                    tl.store(
                        grad_ptr
                        + e * stride_grad_edge
                        + rs[:, None] * stride_grad_row
                        + cc[None, :] * stride_grad_chan,
                        gxl,
                        mask=rm,
                    )
                else:
                    rd, gr = radial_rows(radial_ptr, gy_ptr, e, rs, rm, cc, radial_strides)
                    gxl = gr * rd
                    tl.store(
                        grad_ptr
                        + e * stride_grad_edge
                        + rs[:, None] * stride_grad_row
                        + cc[None, :] * stride_grad_chan,
                        gr * xl,
                        mask=rm,
                    )
                grt = tl.reduce(xb[None, :, :] * gxl[:, None, :], 2, SUM)
                tl.store(
                    grot_ptr + e * stride_grot_edge + (ia * stride_grot_a + ib * stride_grot_b),
                    grt,
                    mask=m2,
                )
        if MIXER:
            tl.store(
                gbasis_partial_ptr
                + pid * stride_gbasis_prog
                + qq[:, None] * stride_gbasis_rank
                + cc[None, :] * stride_gbasis_chan,
                gbacc,
                mask=(qq < RANK)[:, None] & cmask[None, :],
            )

    @triton.jit
    def rotate_mix_node_bwd_kernel(
        # pointers: the CSR by source, inputs, output; the storage's kernel tables
        perm_ptr,
        offsets_ptr,
        rot_ptr,
        radial_ptr,
        gy_ptr,
        gx_ptr,
        col_table_ptr,
        row_table_ptr,
        entry_a_ptr,
        entry_b_ptr,
        # sizes
        n_channels,
        # strides
        stride_rot_edge,
        stride_rot_a,
        stride_rot_b,
        stride_radial_edge,
        stride_radial_row,
        stride_radial_chan,
        stride_gy_edge,
        stride_gy_row,
        stride_gy_chan,
        stride_gx_node,
        stride_gx_row,
        stride_gx_chan,
        # meta-parameters
        N_BLOCKS: tl.constexpr,
        COL_LANES: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        LAYOUT: tl.constexpr,
        MIXER: tl.constexpr,
    ):
        """Sum the Dᵀ-rotated cotangents of node n's out-edges into gx[n], per degree block.

        gx[n] = Σ_{e: src=e→n} Dᵀ-rotation of the local cotangent, one degree block per program (4x
        the parallelism at L = 3). MIXER: radial_ptr holds the mixer's input cotangent written by
        the edge kernel; otherwise the plain radial product's cotangent is formed here (gy · rad).
        """
        n, b, beg, end, cc, cmask, col, jm, rs, rm, m2, ia, ib = node_block(
            offsets_ptr,
            col_table_ptr,
            row_table_ptr,
            entry_a_ptr,
            entry_b_ptr,
            n_channels,
            BLOCK_CHANNELS,
            COL_LANES,
            SLOT_LANES,
            LAYOUT,
        )
        dt = gx_ptr.dtype.element_ty
        off = ia * stride_rot_a + ib * stride_rot_b
        acc = tl.full((COL_LANES, BLOCK_CHANNELS), 0.0, dt)
        radial_strides = (
            stride_radial_edge,
            stride_radial_row,
            stride_radial_chan,
            stride_gy_edge,
            stride_gy_row,
            stride_gy_chan,
        )
        for i in range(beg, end):
            e = tl.load(perm_ptr + i).to(tl.int64)
            coef = tl.load(rot_ptr + e * stride_rot_edge + off, mask=m2, other=0.0)
            if MIXER:  # the edge kernel left the mixer's input cotangent in radial_ptr
                gxl = tl.load(
                    radial_ptr
                    + e * stride_radial_edge
                    + rs[:, None] * stride_radial_row
                    + cc[None, :] * stride_radial_chan,
                    mask=rm,
                    other=0.0,
                )
            else:
                rd, gr = radial_rows(radial_ptr, gy_ptr, e, rs, rm, cc, radial_strides)
                gxl = gr * rd
            acc += tl.reduce(coef[:, :, None] * gxl[:, None, :], 0, SUM)
        tl.store(
            gx_ptr
            + n * stride_gx_node
            + col.to(tl.int64)[:, None] * stride_gx_row
            + cc[None, :] * stride_gx_chan,
            acc,
            mask=jm[:, None] & cmask[None, :],
        )
