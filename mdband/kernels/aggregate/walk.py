"""aggregate's "walk" kernels: forward and backward, walking a node's CSR segment edge by edge.

One program per (destination node, degree block) walks the node's CSR segment one edge at a
time, forward and backward.

Shapes, layout and math: :mod:`mdband.kernels.aggregate`. A program loads what depends on
(n, b) only once (tables, rho, the softmax statistics, in the backward g = gout[n, block b]·rho)
and does block b's part of each edge of n's segment: the forward accumulates out[n, block b]
(JP × BC); the backward writes the edge's gy rows and storage cotangent entries and its
partial of q = <gout[dst], msg> per head in an (NB, E, H) scratch (plain mode: per block and
node also the partials of gs) that the op's torch epilogue sums in block order. With PREFETCH
a walk loads edge i + 1 before it works on edge i: the loads' latency hides behind the work,
the values and the order of every sum stay the same (the tuning table's ``walk_prefetch``).
Exact fp32 / fp64 FMAs; band and dense storages bitwise equal; no atomics.
"""

from __future__ import annotations

from mdband.kernels import _common as cm
from mdband.kernels.aggregate import stats

if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    node_block, head_stats = cm.node_block, stats.head_stats
    SUM = cm.SUM

    @triton.jit
    def _edge_tiles(
        perm_ptr,
        env_ptr,
        rot_ptr,
        y_ptr,
        i,
        off,
        m2,
        rs,
        rm,
        cc,
        stride_rot_edge,
        stride_y_edge,
        stride_y_row,
        stride_y_chan,
    ):
        """Load edge e = perm[i] of a segment.

        Returns e, its envelope, its rotation entries of the degree block (at ``off``, mask m2) and
        its y rows rs (mask rm).
        """
        e = tl.load(perm_ptr + i).to(tl.int64)
        ev = tl.load(env_ptr + e)
        coef = tl.load(rot_ptr + e * stride_rot_edge + off, mask=m2, other=0.0)
        yb = tl.load(
            y_ptr + e * stride_y_edge + rs[:, None] * stride_y_row + cc[None, :] * stride_y_chan,
            mask=rm,
            other=0.0,
        )
        return e, ev, coef, yb

    @triton.jit
    def _edge_tiles_of(
        env_ptr,
        rot_ptr,
        y_ptr,
        e,
        ok,
        off,
        m2,
        rs,
        rm,
        cc,
        stride_rot_edge,
        stride_y_edge,
        stride_y_row,
        stride_y_chan,
    ):
        """Load the tiles of :func:`_edge_tiles` for a known edge e.

        Every load is masked by ok, an int (the prefetch of an edge past the segment's end reads
        nothing). The tile masks take ok as a row bound (rs ≥ 0): the interpreter's loads refuse a
        block mask and-ed with a scalar.
        """
        live = rs[:, None] < tl.where(ok != 0, 1 << 30, 0)
        ev = tl.load(env_ptr + e, mask=ok != 0, other=0.0)
        coef = tl.load(rot_ptr + e * stride_rot_edge + off, mask=m2 & live, other=0.0)
        yb = tl.load(
            y_ptr + e * stride_y_edge + rs[:, None] * stride_y_row + cc[None, :] * stride_y_chan,
            mask=rm & live,
            other=0.0,
        )
        return ev, coef, yb

    @triton.jit
    def _walk_load(
        pointers, tiles, e, i, end, BLOCK_CHANNELS: tl.constexpr, ATTENTION: tl.constexpr
    ):
        """Do one step of the prefetching walk.

        Loads the tiles and logits of edge e = perm[i] (nothing read when i ≥ end) and the index of
        the edge after it, perm[i + 1]. ``pointers`` and ``tiles``: see :func:`_walk_fetch`.
        """
        perm, env, rot, y, lg, sr0, sy0, sy1, sy2, sl0, sl1 = pointers
        off, m2, rs, rm, cc, cmask, hc = tiles
        ok = i < end
        ev, coef, yb = _edge_tiles_of(
            env, rot, y, e, ok.to(tl.int32), off, m2, rs, rm, cc, sr0, sy0, sy1, sy2
        )
        t = tl.zeros((BLOCK_CHANNELS,), y.dtype.element_ty)  # the logits (plain mode: unused)
        if ATTENTION:
            t = tl.load(
                lg + e * sl0 + hc * sl1,
                mask=cmask & (cc < tl.where(ok, BLOCK_CHANNELS, 0)),
                other=0.0,
            )
        en = tl.load(perm + i + 1, mask=i + 1 < end, other=0).to(tl.int64)
        return ev, coef, yb, t, en

    @triton.jit
    def _walk_fetch(
        pointers,
        tiles,
        i,
        end,
        state,
        BLOCK_CHANNELS: tl.constexpr,
        ATTENTION: tl.constexpr,
        PREFETCH: tl.constexpr,
    ):
        """Fetch edge i of a walk, shared by the forward and the backward.

        Returns (e, ev, coef, yb, t) to work on and the state of the next step. ``pointers``: (perm,
        env, rot, y and logits pointers, the rotation's edge stride, y's three strides and the
        logits' two); ``tiles``: (the block's entry offsets off and mask m2, rows rs and mask rm,
        channel lanes cc and mask, each lane's head hc); ``state`` = (e, next index, ev, coef, yb,
        t) as left by the previous step (by :func:`_walk_first` before the loop); without PREFETCH
        it is unused and edge i is loaded here.
        """
        perm, env, rot, y, lg, sr0, sy0, sy1, sy2, sl0, sl1 = pointers
        off, m2, rs, rm, cc, cmask, hc = tiles
        e, en, ev, coef, yb, t = state
        if PREFETCH:
            ev1, coef1, yb1, t1, en2 = _walk_load(
                pointers, tiles, en, i + 1, end, BLOCK_CHANNELS, ATTENTION
            )
            nxt = (en, en2, ev1, coef1, yb1, t1)
        else:
            e, ev, coef, yb = _edge_tiles(
                perm, env, rot, y, i, off, m2, rs, rm, cc, sr0, sy0, sy1, sy2
            )
            if ATTENTION:
                t = tl.load(lg + e * sl0 + hc * sl1, mask=cmask, other=0.0)
            nxt = state
        return e, ev, coef, yb, t, nxt

    @triton.jit
    def _walk_first(
        pointers,
        tiles,
        beg,
        end,
        BLOCK_CHANNELS: tl.constexpr,
        ATTENTION: tl.constexpr,
        PREFETCH: tl.constexpr,
    ):
        """Return the walk's state before its first edge (:func:`_walk_fetch`).

        Edge beg is loaded with PREFETCH (nothing read for an empty segment), nothing read without.
        """
        perm, env, rot, y, lg, sr0, sy0, sy1, sy2, sl0, sl1 = pointers
        off, m2, rs, rm, cc, cmask, hc = tiles
        live = beg < end
        if not PREFETCH:
            live = beg < beg  # the plain walk loads each edge in its step: read nothing here
        e = tl.load(perm + beg, mask=live, other=0).to(tl.int64)
        ev, coef, yb, t, en = _walk_load(
            pointers, tiles, e, beg, tl.where(live, end, beg), BLOCK_CHANNELS, ATTENTION
        )
        return (e, en, ev, coef, yb, t)

    @triton.jit
    def store_block(
        out_ptr,
        acc,
        rho,
        node_scale,
        node,
        col,
        jm,
        cc,
        cmask,
        stride_out_node,
        stride_out_row,
        stride_out_chan,
        ATTENTION: tl.constexpr,
    ):
        """out[node, block columns col] = acc · rho (· the node scale in plain mode)."""
        res = acc * rho[:, None]
        if not ATTENTION:
            res = res * node_scale
        tl.store(
            out_ptr
            + node * stride_out_node
            + col.to(tl.int64)[:, None] * stride_out_row
            + cc[None, :] * stride_out_chan,
            res,
            mask=jm[:, None] & cmask[None, :],
        )

    @triton.jit
    def aggregate_walk_fwd_kernel(
        # pointers: inputs, the CSR by destination, output; the storage's kernel tables
        y_ptr,
        rot_ptr,
        rho_ptr,
        perm_ptr,
        offsets_ptr,
        env_ptr,
        logits_ptr,
        node_scale_ptr,
        out_ptr,
        stats_ptr,
        col_table_ptr,
        row_table_ptr,
        entry_a_ptr,
        entry_b_ptr,
        # sizes
        n_channels,
        head_dim,
        # strides
        stride_y_edge,
        stride_y_row,
        stride_y_chan,
        stride_rot_edge,
        stride_rot_a,
        stride_rot_b,
        stride_logits_edge,
        stride_logits_head,
        stride_out_node,
        stride_out_row,
        stride_out_chan,
        stride_stats_node,
        stride_stats_kind,
        stride_stats_head,
        # meta-parameters
        COL_LANES: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        LAYOUT: tl.constexpr,
        ATTENTION: tl.constexpr,
        PREFETCH: tl.constexpr,
    ):
        """Run the walk forward of one (destination node n, degree block b) program.

        It writes out[n, block b].
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
        dt = out_ptr.dtype.element_ty
        off = ia * stride_rot_a + ib * stride_rot_b
        rho = tl.load(rho_ptr + col, mask=jm, other=0.0)
        if ATTENTION:  # statistics of the stats pass, per channel (every lane of a head the same)
            hc, mx, inv = head_stats(
                stats_ptr,
                n,
                cc,
                cmask,
                head_dim,
                stride_stats_node,
                stride_stats_kind,
                stride_stats_head,
                BLOCK_CHANNELS,
            )
            sn = 1.0  # unused
        else:
            sn = tl.load(node_scale_ptr + n)
            hc = cc  # unused
        acc = tl.full((COL_LANES, BLOCK_CHANNELS), 0.0, dt)
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
        tiles = (off, m2, rs, rm, cc, cmask, hc)
        state = _walk_first(pointers, tiles, beg, end, BLOCK_CHANNELS, ATTENTION, PREFETCH)
        for i in range(beg, end):
            e, ev, coef, yb, t, state = _walk_fetch(
                pointers, tiles, i, end, state, BLOCK_CHANNELS, ATTENTION, PREFETCH
            )
            if ATTENTION:
                a = (ev * ev) * tl.exp(t - mx) * inv
            else:
                a = ev
            acc += tl.reduce(coef[:, :, None] * (yb * a)[:, None, :], 0, SUM)
        store_block(
            out_ptr,
            acc,
            rho,
            sn,
            n,
            col,
            jm,
            cc,
            cmask,
            stride_out_node,
            stride_out_row,
            stride_out_chan,
            ATTENTION,
        )

    @triton.jit
    def aggregate_walk_bwd_kernel(
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
        SLOT_LANES: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        BLOCK_HEADS: tl.constexpr,
        LAYOUT: tl.constexpr,
        ATTENTION: tl.constexpr,
        PREFETCH: tl.constexpr,
    ):
        """Run the walk backward of one (destination node n, degree block b) program.

        Everything that depends on (n, b) only is loaded once; the edge loop does block b's part of
        each edge.
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
        off = ia * stride_rot_a + ib * stride_rot_b
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
        if ATTENTION:
            hc, mxc, invc = head_stats(
                stats_ptr,
                n,
                cc,
                cmask,
                head_dim,
                stride_stats_node,
                stride_stats_kind,
                stride_stats_head,
                BLOCK_CHANNELS,
            )
            hh = tl.arange(0, BLOCK_HEADS)
            hm = hh < n_heads
            onehot = (hc[None, :] == hh[:, None]) & cmask[None, :]
        else:
            sn = tl.load(node_scale_ptr + n)
            gsacc = sn * 0.0
            hc = cc  # unused
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
        tiles = (off, m2, rs, rm, cc, cmask, hc)
        state = _walk_first(pointers, tiles, beg, end, BLOCK_CHANNELS, ATTENTION, PREFETCH)
        for i in range(beg, end):
            e, ev, coef, yb, t, state = _walk_fetch(
                pointers, tiles, i, end, state, BLOCK_CHANNELS, ATTENTION, PREFETCH
            )
            if ATTENTION:
                a = (ev * ev) * (tl.exp(t - mxc) * invc)
            else:
                a = sn * ev
            tv = tl.reduce(coef[:, :, None] * g[None, :, :], 1, SUM)
            tl.store(
                gy_ptr
                + e * stride_gy_edge
                + rs[:, None] * stride_gy_row
                + cc[None, :] * stride_gy_chan,
                tv * a,
                mask=rm,
            )
            grt = tl.reduce(g[None, :, :] * (yb * a)[:, None, :], 2, SUM)
            tl.store(grot_ptr + e * stride_grot_edge + goff, grt, mask=m2)
            qv = tl.reduce(yb * tv, 0, SUM)  # block b's part of <gout[n], msg_e> per channel
            if ATTENTION:
                qh = tl.reduce(tl.where(onehot, qv[None, :], 0.0), 1, SUM)
                tl.store(
                    q_partial_ptr + b * stride_q_block + e * stride_q_edge + hh * stride_q_head,
                    qh,
                    mask=hm,
                )
            else:
                q = tl.reduce(qv, 0, SUM)
                tl.store(q_partial_ptr + b * stride_q_block + e * stride_q_edge, q)
                gsacc += ev * q
        if not ATTENTION:
            tl.store(gs_partial_ptr + b * stride_gs_block + n, gsacc)
