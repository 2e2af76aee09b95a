"""The walk kernels of :mod:`mdband.kernels.aggregate`: one program per (destination node,
degree block) walking the node's CSR segment one edge at a time (forward, backward, and the
softmax statistics pass). Shapes, layout, accuracy and bytes moved: see that module; its
``WALK`` settings choose the launches (warps, stages, prefetch per pass).
"""

from __future__ import annotations

from mdband.kernels import _aggregate_dot as dot
from mdband.kernels import _common as cm

if cm.TRITON_AVAILABLE:
    triton, tl = cm.triton, cm.tl
    node_block, _head_stats, store_block = cm.node_block, dot.head_stats, dot.store_block
    SUM = cm.SUM
    MAX = tl.standard._elementwise_max  # combine of tl.max (no nested jit call, see SUM)

    @triton.jit
    def _edge_tiles(perm_ptr, env_ptr, rot_ptr, y_ptr, i, off, m2, rs, rm, cc, sr0, sy0, sy1, sy2):
        """Edge e = perm[i] of a segment: e, its envelope, its rotation entries of the degree
        block (at ``off``, mask m2) and its y rows rs (mask rm)."""
        e = tl.load(perm_ptr + i).to(tl.int64)
        ev = tl.load(env_ptr + e)
        coef = tl.load(rot_ptr + e * sr0 + off, mask=m2, other=0.0)
        yb = tl.load(y_ptr + e * sy0 + rs[:, None] * sy1 + cc[None, :] * sy2, mask=rm, other=0.0)
        return e, ev, coef, yb

    @triton.jit
    def _edge_tiles_of(env_ptr, rot_ptr, y_ptr, e, ok, off, m2, rs, rm, cc, sr0, sy0, sy1, sy2):
        """:func:`_edge_tiles` of a known edge e, every load masked by ok, an int (the prefetch
        of an edge past the segment's end reads nothing). The tile masks take ok as a row
        bound (rs ≥ 0): the interpreter's loads refuse a block mask and-ed with a scalar."""
        live = rs[:, None] < tl.where(ok != 0, 1 << 30, 0)
        ev = tl.load(env_ptr + e, mask=ok != 0, other=0.0)
        coef = tl.load(rot_ptr + e * sr0 + off, mask=m2 & live, other=0.0)
        yb = tl.load(
            y_ptr + e * sy0 + rs[:, None] * sy1 + cc[None, :] * sy2, mask=rm & live, other=0.0
        )
        return ev, coef, yb

    @triton.jit
    def _walk_load(
        perm_ptr, env_ptr, rot_ptr, y_ptr, lg_ptr, e, i, end, off, m2, rs, rm, cc, cmask, hc,
        sr0, sy0, sy1, sy2, sl0, sl1, BC: tl.constexpr, ATTN: tl.constexpr,
    ):  # fmt: skip
        """One step of the prefetching walk (``WALK["prefetch"]``): the tiles and logits of
        edge e = perm[i] (nothing read when i ≥ end) and the index of the edge after it,
        perm[i + 1]. A walk loads edge i + 1 before it works on edge i: the loads' latency
        hides behind the work, the values and the order of every sum stay the same."""
        ok = i < end
        ev, coef, yb = _edge_tiles_of(
            env_ptr, rot_ptr, y_ptr, e, ok.to(tl.int32), off, m2, rs, rm, cc, sr0, sy0, sy1, sy2
        )
        t = tl.zeros((BC,), y_ptr.dtype.element_ty)  # the logits (plain mode: unused)
        if ATTN:
            t = tl.load(lg_ptr + e * sl0 + hc * sl1, mask=cmask & (cc < tl.where(ok, BC, 0)),
                        other=0.0)  # fmt: skip
        en = tl.load(perm_ptr + i + 1, mask=i + 1 < end, other=0).to(tl.int64)
        return ev, coef, yb, t, en

    @triton.jit
    def _walk_fetch(wk, i, end, state, BC: tl.constexpr, ATTN: tl.constexpr, PF: tl.constexpr):
        """Edge i of a walk, shared by the forward and the backward: (e, ev, coef, yb, t) to
        work on and the state of the next step. ``wk``: the walk's pointers, index tiles and
        strides (a tuple, see the kernels); ``state`` = (e, next index, ev, coef, yb, t) as
        left by the previous step (by :func:`_walk_first` before the loop); without PF it is
        unused and edge i is loaded here."""
        (perm_ptr, env_ptr, rot_ptr, y_ptr, lg_ptr, off, m2, rs, rm, cc, cmask, hc,
         sr0, sy0, sy1, sy2, sl0, sl1) = wk  # fmt: skip
        e, en, ev, coef, yb, t = state
        if PF:
            ev1, coef1, yb1, t1, en2 = _walk_load(
                perm_ptr, env_ptr, rot_ptr, y_ptr, lg_ptr, en, i + 1, end, off, m2, rs, rm, cc,
                cmask, hc, sr0, sy0, sy1, sy2, sl0, sl1, BC, ATTN,
            )  # fmt: skip
            nxt = (en, en2, ev1, coef1, yb1, t1)
        else:
            e, ev, coef, yb = _edge_tiles(
                perm_ptr, env_ptr, rot_ptr, y_ptr, i, off, m2, rs, rm, cc, sr0, sy0, sy1, sy2
            )
            if ATTN:
                t = tl.load(lg_ptr + e * sl0 + hc * sl1, mask=cmask, other=0.0)
            nxt = state
        return e, ev, coef, yb, t, nxt

    @triton.jit
    def _walk_first(wk, beg, end, BC: tl.constexpr, ATTN: tl.constexpr, PF: tl.constexpr):
        """The walk's state before its first edge (:func:`_walk_fetch`): edge beg loaded with
        PF (nothing read for an empty segment), nothing read without."""
        (perm_ptr, env_ptr, rot_ptr, y_ptr, lg_ptr, off, m2, rs, rm, cc, cmask, hc,
         sr0, sy0, sy1, sy2, sl0, sl1) = wk  # fmt: skip
        live = beg < end
        if not PF:
            live = beg < beg  # the plain walk loads each edge in its step: read nothing here
        e = tl.load(perm_ptr + beg, mask=live, other=0).to(tl.int64)
        ev, coef, yb, t, en = _walk_load(
            perm_ptr, env_ptr, rot_ptr, y_ptr, lg_ptr, e, beg, tl.where(live, end, beg), off,
            m2, rs, rm, cc, cmask, hc, sr0, sy0, sy1, sy2, sl0, sl1, BC, ATTN,
        )  # fmt: skip
        return (e, en, ev, coef, yb, t)

    @triton.jit
    def _agg_stats_kernel(
        perm_ptr, ptr_ptr, env_ptr, lg_ptr, z_ptr, st_ptr,
        H, sl0, sl1, st0, st1, st2,
        BE: tl.constexpr, HP: tl.constexpr,
    ):  # fmt: skip
        # per-head softmax statistics of node n, BE edges of its segment at a time
        n = tl.program_id(0).to(tl.int64)
        beg = tl.load(ptr_ptr + n).to(tl.int64)
        end = tl.load(ptr_ptr + n + 1).to(tl.int64)
        hh = tl.arange(0, HP)
        hm = hh < H
        mx = tl.log(tl.load(z_ptr + hh, mask=hm, other=1.0))
        sm = tl.full((HP,), 1.0, st_ptr.dtype.element_ty)  # z · exp(-log z)
        for i0 in range(beg, end, BE):
            ii = i0 + tl.arange(0, BE)
            im = ii < end
            e = tl.load(perm_ptr + ii, mask=im, other=0).to(tl.int64)
            ev = tl.load(env_ptr + e, mask=im, other=0.0)
            t = tl.load(
                lg_ptr + e[:, None] * sl0 + hh[None, :] * sl1,
                mask=im[:, None] & hm[None, :],
                other=-float("inf"),
            )
            mnew = tl.maximum(mx, tl.reduce(t, 0, MAX))
            w = (ev * ev)[:, None] * tl.exp(t - mnew[None, :])
            sm = sm * tl.exp(mx - mnew) + tl.reduce(w, 0, SUM)
            mx = mnew
        tl.store(st_ptr + n * st0 + hh * st2, mx, mask=hm)
        tl.store(st_ptr + n * st0 + st1 + hh * st2, sm, mask=hm)

    @triton.jit
    def _agg_fwd_kernel(
        y_ptr, rot_ptr, rho_ptr, perm_ptr, ptr_ptr, env_ptr, lg_ptr, s_ptr, out_ptr, st_ptr,
        col_t, row_t, ea_t, eb_t,
        C, HD,
        sy0, sy1, sy2, sr0, sra, srb, sl0, sl1, so0, so1, so2, st0, st1, st2,
        JP: tl.constexpr, SP: tl.constexpr, BC: tl.constexpr,
        LAYOUT: tl.constexpr, ATTN: tl.constexpr, PF: tl.constexpr = False,
    ):  # fmt: skip
        # one program per (destination node n, degree block b): out[n, block b]
        n, b, beg, end, cc, cmask, col, jm, rs, rm, m2, ia, ib = node_block(
            ptr_ptr, col_t, row_t, ea_t, eb_t, C, BC, JP, SP, LAYOUT
        )
        dt = out_ptr.dtype.element_ty
        off = ia * sra + ib * srb
        rho = tl.load(rho_ptr + col, mask=jm, other=0.0)
        if ATTN:  # statistics of the stats pass, per channel (every lane of a head the same)
            hc, mx, inv = _head_stats(st_ptr, n, cc, cmask, HD, st0, st1, st2, BC)
            sn = 1.0  # unused
        else:
            sn = tl.load(s_ptr + n)
            hc = cc  # unused
        acc = tl.full((JP, BC), 0.0, dt)
        wk = (perm_ptr, env_ptr, rot_ptr, y_ptr, lg_ptr, off, m2, rs, rm, cc, cmask, hc,
              sr0, sy0, sy1, sy2, sl0, sl1)  # fmt: skip
        state = _walk_first(wk, beg, end, BC, ATTN, PF)
        for i in range(beg, end):
            e, ev, coef, yb, t, state = _walk_fetch(wk, i, end, state, BC, ATTN, PF)
            if ATTN:
                a = (ev * ev) * tl.exp(t - mx) * inv
            else:
                a = ev
            acc += tl.reduce(coef[:, :, None] * (yb * a)[:, None, :], 0, SUM)
        store_block(out_ptr, acc, rho, sn, n, col, jm, cc, cmask, so0, so1, so2, ATTN)

    @triton.jit
    def _agg_bwd_kernel(
        gout_ptr, y_ptr, rot_ptr, rho_ptr, perm_ptr, ptr_ptr, env_ptr, lg_ptr, st_ptr, s_ptr,
        gy_ptr, grot_ptr, qp_ptr, gsp_ptr,
        col_t, row_t, ea_t, eb_t,
        C, H, HD,
        sgo0, sgo1, sgo2, sy0, sy1, sy2, sr0, sra, srb, sl0, sl1, st0, st1, st2,
        sgy0, sgy1, sgy2, so0, soa, sob, sq0, sq1, sq2, sgs0,
        JP: tl.constexpr, SP: tl.constexpr, BC: tl.constexpr, HP: tl.constexpr,
        LAYOUT: tl.constexpr, ATTN: tl.constexpr, PF: tl.constexpr = False,
    ):  # fmt: skip
        # one program per (destination node n, degree block b); everything that depends on
        # (n, b) only is loaded once, the edge loop does block b's part of each edge
        n, b, beg, end, cc, cmask, col, jm, rs, rm, m2, ia, ib = node_block(
            ptr_ptr, col_t, row_t, ea_t, eb_t, C, BC, JP, SP, LAYOUT
        )
        off = ia * sra + ib * srb
        goff = ia * soa + ib * sob
        rho = tl.load(rho_ptr + col, mask=jm, other=0.0)
        g = tl.load(
            gout_ptr + n * sgo0 + col.to(tl.int64)[:, None] * sgo1 + cc[None, :] * sgo2,
            mask=jm[:, None] & cmask[None, :],
            other=0.0,
        )
        g = g * rho[:, None]
        if ATTN:
            hc, mxc, invc = _head_stats(st_ptr, n, cc, cmask, HD, st0, st1, st2, BC)
            hh = tl.arange(0, HP)
            hm = hh < H
            onehot = (hc[None, :] == hh[:, None]) & cmask[None, :]
        else:
            sn = tl.load(s_ptr + n)
            gsacc = sn * 0.0
            hc = cc  # unused
        wk = (perm_ptr, env_ptr, rot_ptr, y_ptr, lg_ptr, off, m2, rs, rm, cc, cmask, hc,
              sr0, sy0, sy1, sy2, sl0, sl1)  # fmt: skip
        state = _walk_first(wk, beg, end, BC, ATTN, PF)
        for i in range(beg, end):
            e, ev, coef, yb, t, state = _walk_fetch(wk, i, end, state, BC, ATTN, PF)
            if ATTN:
                a = (ev * ev) * (tl.exp(t - mxc) * invc)
            else:
                a = sn * ev
            tv = tl.reduce(coef[:, :, None] * g[None, :, :], 1, SUM)
            tl.store(gy_ptr + e * sgy0 + rs[:, None] * sgy1 + cc[None, :] * sgy2, tv * a, mask=rm)
            grt = tl.reduce(g[None, :, :] * (yb * a)[:, None, :], 2, SUM)
            tl.store(grot_ptr + e * so0 + goff, grt, mask=m2)
            qv = tl.reduce(yb * tv, 0, SUM)  # block b's part of <gout[n], msg_e> per channel
            if ATTN:
                qh = tl.reduce(tl.where(onehot, qv[None, :], 0.0), 1, SUM)
                tl.store(qp_ptr + b * sq0 + e * sq1 + hh * sq2, qh, mask=hm)
            else:
                q = tl.reduce(qv, 0, SUM)
                tl.store(qp_ptr + b * sq0 + e * sq1, q)
                gsacc += ev * q
        if not ATTN:
            tl.store(gsp_ptr + b * sgs0 + n, gsacc)
