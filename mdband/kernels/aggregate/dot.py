"""aggregate's "dot" backward: (node, degree block) programs of tl.dot tile products.

The programs take BLOCK_EDGES edges per step as tl.dot tile products.

Same op, inputs, outputs and scratch as the walk backward (:mod:`.walk`; the math is the
package docstring's). One program per (destination node n, degree block b = degree l), grid
(N, NB). What depends on (n, b) only is loaded once: the block's tables, rho, the softmax
statistics of n and g = gout[n, block b]·rho, (DOT_COLS, BLOCK_CHANNELS). The segment of n is
then processed BLOCK_EDGES edges per step, as R = BLOCK_EDGES·SLOT_LANES rows r = i·SP + s (edge
i of the step, band slot s = m ∈ {0, −1, +1}, padded to SP = 4): ``coef`` (R, DOT_COLS) is the
step's rotation entries D[e, l²+l+m, l²+j] (zero off the block's entries, on padded lanes and
past the segment's end), ``ya`` (R, BC) its y rows times the edge's weight a (attention α per
channel, or env)::

    tv = coef @ g (R, BC);  gy = tv · a;  then the storage cotangent entries and the partial
    q[e, h] = Σ_s Σ_{c ∈ h} y·tv of block b, per head h:
      H > 1 (a per channel lane, PER_LANE):  grot = ya @ gᵀ (R, DOT_COLS);  q = (y·tv) @ O,
            with O (BC, DOT_HEADS) the 0/1 head matrix, then summed over the SP rows of each edge;
      H ≤ 1 (one weight a per edge):  p = y @ gᵀ (R, DOT_COLS);  grot = a·p;
            q = Σ_s Σ_j coef·p (= Σ_s Σ_c y·tv reassociated: one tile product fewer)

so the walk's per-edge cross-lane reductions become tile products. tl.dot needs every dimension
≥ 16 (``DOT_MIN``): DOT_COLS = max(16, JP) packed-column lanes (JP = the tables' lane count, a
power of two ≥ 2L+1; lanes ≥ JP masked), BC = max(16, next_pow2(C)), DOT_HEADS =
max(16, next_pow2(H)); BLOCK_EDGES per tl.dot precision from the tuning table. The attention
weights are computed once per edge (per lane only for H > 1) and repeated over its SP rows.

Accuracy: tl.dot in float32 at the tuning table's precision (default "tf32x3": three TF32
tensor-core products, to fp32's rounding) or "ieee" (exact fp32 / fp64 FMAs; float64 always);
the accumulation order differs from the walk's, so "dot" equals "walk" and the torch reference
to rounding (fp32 ~1e-6 relative, fp64 ~1e-15). Band and dense storages run the same code on
the same entries: bitwise identical. Deterministic: no atomics; every sum has a fixed order.

Bytes moved per edge (fp32, S = 4): as the walk backward. y Dm·C·S and the rotation entries
(3D−2)·S, each read by one program only; perm 8, env S and the logits per block program; gout
N·D·C·S in total (once per program); writes gy Dm·C·S, the storage cotangent entries and
NB·H·S (plain: NB·S, and NB·N·S) partials. No (E, D, D) buffer. FLOPs: the padded tiles do
4·R·DOT_COLS·BC per step and block (H > 1 adds 2·R·BC·DOT_HEADS), about 5.6× the structural
count at L = 3 (16 lanes for ≤ 7 columns, 4 rows for ≤ 3 slots).
"""

from __future__ import annotations

from mdband.kernels import _common as cm
from mdband.kernels.aggregate import stats

#: smallest tl.dot dimension the kernels pad to
DOT_MIN = 16

if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    node_segment, dot_block_rows, head_stats = cm.node_segment, cm.dot_block_rows, stats.head_stats
    SUM = cm.SUM

    @triton.jit
    def _weight_setup(
        stats_ptr,
        node,
        cc,
        cmask,
        head_dim,
        stride_stats_node,
        stride_stats_kind,
        stride_stats_head,
        BLOCK_CHANNELS: tl.constexpr,
        ATTENTION: tl.constexpr,
        PER_LANE: tl.constexpr,
    ):
        """Load what the attention weights of the node's edges need.

        Per channel lane (PER_LANE, H > 1) or for the one head (H = 1, shapes (1,)) the head hc and
        the statistics (M, 1/S) of the statistics pass; plain mode: hc = 0 (one "head" of all
        channels; the others unused).
        """
        if ATTENTION:
            if PER_LANE:
                hc, mx, inv = head_stats(
                    stats_ptr,
                    node,
                    cc,
                    cmask,
                    head_dim,
                    stride_stats_node,
                    stride_stats_kind,
                    stride_stats_head,
                    BLOCK_CHANNELS,
                )
            else:
                h1 = tl.arange(0, 1)
                hc, mx, inv = head_stats(
                    stats_ptr,
                    node,
                    h1,
                    h1 < 1,
                    head_dim,
                    stride_stats_node,
                    stride_stats_kind,
                    stride_stats_head,
                    1,
                )
        else:
            hc, mx, inv = cc * 0, cc, cc
        return hc, mx, inv

    @triton.jit
    def _step_rows(
        pointers,
        tiles,
        i0,
        end,
        scale,
        SLOT_LANES: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        ATTENTION: tl.constexpr,
        PER_LANE: tl.constexpr,
    ):
        """Load the step of BLOCK_EDGES edges at CSR positions i0 + i (those ≥ end masked).

        Per edge its id ee, validity oke, envelope eve (BE,); per row r = i·SP + s its edge er and
        validity okr (R,), the edge's weight a (attention env²·exp(logit − M)·(1/S): (R, BC), per
        channel lane's head, with PER_LANE, else (R, 1); plain: env·scale, (R, 1)), the rotation
        entries coef (R, DOT_COLS) and the y rows yb (R, BC), both zero where masked. ``pointers``:
        (perm, env, rot, y and logits pointers, the rotation's edge stride, y's three strides, the
        logits' two); ``tiles``: (the entry offsets off and mask m2, rows rs and row mask rowm,
        channel lanes cc and mask, each lane's head hc, the statistics mx and inv).
        """
        perm, env, rot, y, lg, sr0, sy0, sy1, sy2, sl0, sl1 = pointers
        off, m2, rs, rowm, cc, cmask, hc, mx, inv = tiles
        R: tl.constexpr = BLOCK_EDGES * SLOT_LANES
        pos = i0 + tl.arange(0, BLOCK_EDGES)
        oke = pos < end
        ee = tl.load(perm + pos, mask=oke, other=0).to(tl.int64)
        eve = tl.load(env + ee, mask=oke, other=0.0)
        er = tl.reshape(tl.broadcast_to(ee[:, None], (BLOCK_EDGES, SLOT_LANES)), (R,))
        okr = tl.reshape(tl.broadcast_to(oke[:, None], (BLOCK_EDGES, SLOT_LANES)), (R,))
        if ATTENTION and PER_LANE:  # per edge and channel lane, then repeated over its SP rows
            t = tl.load(
                lg + ee[:, None] * sl0 + hc[None, :] * sl1,
                mask=oke[:, None] & cmask[None, :],
                other=-float("inf"),
            )
            ae = (eve * eve)[:, None] * (tl.exp(t - mx[None, :]) * inv[None, :])
            a = tl.reshape(
                tl.broadcast_to(ae[:, None, :], (BLOCK_EDGES, SLOT_LANES, BLOCK_CHANNELS)),
                (R, BLOCK_CHANNELS),
            )
        else:
            if ATTENTION:  # one head: one weight per edge
                t = tl.load(lg + ee * sl0, mask=oke, other=-float("inf"))
                ae = (eve * eve) * (tl.exp(t - mx) * inv)
            else:
                ae = eve * scale
            a = tl.reshape(tl.broadcast_to(ae[:, None], (BLOCK_EDGES, SLOT_LANES)), (R,))[:, None]
        coef = tl.load(rot + er[:, None] * sr0 + off, mask=okr[:, None] & m2, other=0.0)
        yb = tl.load(
            y + er[:, None] * sy0 + rs[:, None] * sy1 + cc[None, :] * sy2,
            mask=okr[:, None] & rowm,
            other=0.0,
        )
        return ee, oke, eve, er, okr, a, coef, yb

    @triton.jit
    def aggregate_dot_bwd_kernel(
        # pointers: inputs, the CSR by destination, outputs; the storage's kernel tables
        gout_ptr,
        y_ptr,
        rot_ptr,
        rho_ptr,
        perm_ptr,
        offsets_ptr,
        env_ptr,
        logits_ptr,
        stats_ptr,
        node_scale_ptr,
        gy_ptr,
        grot_ptr,
        q_partial_ptr,
        gs_partial_ptr,
        col_table_ptr,
        row_table_ptr,
        entry_a_ptr,
        entry_b_ptr,
        # sizes
        n_channels,
        n_heads,
        head_dim,
        # strides
        stride_gout_node,
        stride_gout_row,
        stride_gout_chan,
        stride_y_edge,
        stride_y_row,
        stride_y_chan,
        stride_rot_edge,
        stride_rot_a,
        stride_rot_b,
        stride_logits_edge,
        stride_logits_head,
        stride_stats_node,
        stride_stats_kind,
        stride_stats_head,
        stride_gy_edge,
        stride_gy_row,
        stride_gy_chan,
        stride_grot_edge,
        stride_grot_a,
        stride_grot_b,
        stride_q_block,
        stride_q_edge,
        stride_q_head,
        stride_gs_block,
        # meta-parameters
        COL_LANES: tl.constexpr,
        DOT_COLS: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        DOT_HEADS: tl.constexpr,
        LAYOUT: tl.constexpr,
        ATTENTION: tl.constexpr,
        PER_LANE: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        """Run the "dot" backward of one (destination node n, degree block b) program.

        Writes the gy rows, storage cotangent entries and the per-(block, edge) partials of q of
        block b over n's segment (plain mode also the per-(block, node) partials of gs).
        """
        n, beg, end, _, _ = node_segment(offsets_ptr, n_channels, BLOCK_CHANNELS)
        b = tl.program_id(1)
        cc, cmask, col, jm, _, rs, rowm, m2, ia, ib, off = dot_block_rows(
            col_table_ptr,
            row_table_ptr,
            entry_a_ptr,
            entry_b_ptr,
            b,
            n_channels,
            stride_rot_a,
            stride_rot_b,
            COL_LANES,
            DOT_COLS,
            SLOT_LANES,
            BLOCK_EDGES,
            BLOCK_CHANNELS,
            LAYOUT,
        )
        dt = gy_ptr.dtype.element_ty
        goff = ia * stride_grot_a + ib * stride_grot_b
        rho = tl.load(rho_ptr + col, mask=jm, other=0.0)
        g = tl.load(
            gout_ptr
            + n * stride_gout_node
            + col.to(tl.int64)[:, None] * stride_gout_row
            + cc[None, :] * stride_gout_chan,
            mask=jm[:, None] & cmask[None, :],
            other=0.0,
        )
        g = g * rho[:, None]
        gt = tl.trans(g)
        hc, mx, inv = _weight_setup(
            stats_ptr,
            n,
            cc,
            cmask,
            head_dim,
            stride_stats_node,
            stride_stats_kind,
            stride_stats_head,
            BLOCK_CHANNELS,
            ATTENTION,
            PER_LANE,
        )
        if ATTENTION:
            sn = 1.0  # unused
        else:
            sn = tl.load(node_scale_ptr + n)
        hh = tl.arange(0, DOT_HEADS)
        # PER_LANE: 0/1 head matrix (BC, DOT_HEADS), q per head as a tile product (exact: 0, 1)
        oh = ((hc[:, None] == hh[None, :]) & cmask[:, None]).to(dt)
        gsacc = tl.zeros((BLOCK_EDGES,), dtype=dt)
        pointers = (
            perm_ptr,
            env_ptr,
            rot_ptr,
            y_ptr,
            logits_ptr,
            stride_rot_edge,
            stride_y_edge,
            stride_y_row,
            stride_y_chan,
            stride_logits_edge,
            stride_logits_head,
        )
        tiles = (off, m2, rs, rowm, cc, cmask, hc, mx, inv)
        for i0 in range(beg, end, BLOCK_EDGES):
            ee, oke, eve, er, okr, a, coef, yb = _step_rows(
                pointers,
                tiles,
                i0,
                end,
                sn,
                SLOT_LANES,
                BLOCK_EDGES,
                BLOCK_CHANNELS,
                ATTENTION,
                PER_LANE,
            )
            tv = tl.dot(coef, g, input_precision=PRECISION, out_dtype=dt)  # (R, BC)
            tl.store(
                gy_ptr
                + er[:, None] * stride_gy_edge
                + rs[:, None] * stride_gy_row
                + cc[None, :] * stride_gy_chan,
                tv * a,
                mask=okr[:, None] & rowm,
            )
            if PER_LANE:
                grt = tl.dot(yb * a, gt, input_precision=PRECISION, out_dtype=dt)  # (R, DOT_COLS)
                qr = tl.dot(yb * tv, oh, input_precision=PRECISION, out_dtype=dt)  # (R, DOT_HEADS)
                # block b's part of q
                qe = tl.reduce(tl.reshape(qr, (BLOCK_EDGES, SLOT_LANES, DOT_HEADS)), 1, SUM)
                tl.store(
                    q_partial_ptr
                    + b * stride_q_block
                    + ee[:, None] * stride_q_edge
                    + hh[None, :] * stride_q_head,
                    qe,
                    mask=oke[:, None] & (hh < n_heads)[None, :],
                )
            else:  # a is one number per row: grot = a·(y @ gᵀ), q = Σ_j coef·(y @ gᵀ)
                pr = tl.dot(yb, gt, input_precision=PRECISION, out_dtype=dt)  # (R, DOT_COLS)
                grt = pr * a
                qr = tl.reduce(coef * pr, 1, SUM)
                qe = tl.reduce(tl.reshape(qr, (BLOCK_EDGES, SLOT_LANES)), 1, SUM)  # block b's q
                tl.store(q_partial_ptr + b * stride_q_block + ee * stride_q_edge, qe, mask=oke)
                if not ATTENTION:
                    gsacc += eve * qe
            tl.store(grot_ptr + er[:, None] * stride_grot_edge + goff, grt, mask=okr[:, None] & m2)
        if not ATTENTION:
            tl.store(gs_partial_ptr + b * stride_gs_block + n, tl.reduce(gsacc, 0, SUM))
