"""rotate_mix's "edge" backward: one program per EB edges, then one per (source node, degree
block) over the source CSR (:mod:`mdband.kernels.rotate_mix` has the op, the math and the
forward; :mod:`mdband.kernels._rotate_mix_dot` the "dot" alternative).

Both walk the degree blocks b = 0..L (static), the three band rows of a block as the slot axis
(SP = 4 lanes, slot 3 empty) and the 2l+1 columns as the lane axis (JP lanes); storage entries
are addressed only through storage.kernel_tables. Edge kernel: reads x[src], rot, k (or rad)
and gy; writes the storage cotangent, gk, each program's basis partials (gbp, summed by the
caller) and, with the mixer, the mixer's input cotangent gxl (E, Dm, C) for the node kernel.
Node kernel: gx[n] = Σ over n's out-edges of the transposed rotation of that cotangent, a
deterministic segment sum (no atomics). Exact fp32 / fp64 FMAs, band and dense storages in the
same order (bitwise equal).
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.kernels._rotate_mix_dot import strides2 as _s2
from mdband.kernels._rotate_mix_dot import strides3 as _s3

if cm.TRITON_AVAILABLE:
    triton, tl = cm.triton, cm.tl
    block_tables, entry_index, node_block = cm.block_tables, cm.entry_index, cm.node_block
    SUM = cm.SUM

    @triton.jit
    def rotated_block(
        x_ptr, rot_ptr, node, e, b, col_t, row_t, ea_t, eb_t, cc, cmask,
        sx0, sx1, sx2, sr0, sra, srb, JP: tl.constexpr, SP: tl.constexpr, LAYOUT: tl.constexpr,
    ):  # fmt: skip
        """Degree block b of x[node] in edge e's frame: xl (SP, BC), the block's rotation rows
        times its x columns xb (JP, BC); with the block's reduced rows rs (clamped to ≥ 0) and
        their (SP, BC) mask rm, the entry mask m2 and the entries' storage indices (ia, ib)."""
        col, jm, rows, sv, m2, tix = block_tables(col_t, row_t, b, JP, SP)
        rs = tl.maximum(rows, 0).to(tl.int64)
        rm = sv[:, None] & cmask[None, :]
        xb = tl.load(
            x_ptr + node * sx0 + col.to(tl.int64)[:, None] * sx1 + cc[None, :] * sx2,
            mask=jm[:, None] & cmask[None, :],
            other=0.0,
        )
        ia, ib = entry_index(ea_t, eb_t, tix, m2, LAYOUT)
        coef = tl.load(rot_ptr + e * sr0 + (ia * sra + ib * srb), mask=m2, other=0.0)
        xl = tl.reduce(coef[:, :, None] * xb[None, :, :], 1, SUM)
        return xl, xb, rs, rm, m2, ia, ib

    @triton.jit
    def radial_rows(rad_ptr, gy_ptr, e, rs, rm, cc, sd0, sd1, sd2, sg0, sg1, sg2):
        """Rows rs (mask rm) of edge e's radial weights and of its output cotangent gy."""
        rd = tl.load(rad_ptr + e * sd0 + rs[:, None] * sd1 + cc[None, :] * sd2, mask=rm, other=0.0)
        gr = tl.load(gy_ptr + e * sg0 + rs[:, None] * sg1 + cc[None, :] * sg2, mask=rm, other=0.0)
        return rd, gr

    @triton.jit
    def _rm_bwd_edge_kernel(
        x_ptr, src_ptr, rot_ptr, k_ptr, b_ptr, rad_ptr, gy_ptr,
        grot_ptr, gk_ptr, gbp_ptr, grad_ptr,
        col_t, row_t, ea_t, eb_t, ki_t, or_t,
        E, C,
        sx0, sx1, sx2, sr0, sra, srb, sk0, sk1, sk2, sb0, sb1, sd0, sd1, sd2, sg0, sg1, sg2,
        so0, soa, sob, sq0, sq1, sq2, sp0, sp1, sp2, sh0, sh1, sh2,
        NB: tl.constexpr, JP: tl.constexpr, SP: tl.constexpr, LP: tl.constexpr,
        R: tl.constexpr, RP: tl.constexpr, BC: tl.constexpr, EB: tl.constexpr,
        LAYOUT: tl.constexpr, MIX: tl.constexpr,
    ):  # fmt: skip
        pid = tl.program_id(0).to(tl.int64)
        cc = tl.arange(0, BC)
        cmask = cc < C
        ss = tl.arange(0, SP)
        tt = tl.arange(0, LP)
        qq = tl.arange(0, RP)
        dt = gy_ptr.dtype.element_ty
        gbacc = tl.full((RP, BC), 0.0, dt)
        orow = tl.load(or_t + ss[:, None] * LP + tt[None, :]).to(tl.int64)
        om3 = (orow >= 0)[:, :, None] & cmask[None, None, :]
        for i in range(EB):
            e0 = pid * EB + i
            valid = e0 < E
            e = tl.minimum(e0, E - 1)  # tail programs redo the last edge; partials skip it
            node = tl.load(src_ptr + e).to(tl.int64)
            if MIX:
                g3 = tl.load(
                    gy_ptr + e * sg0 + orow[:, :, None] * sg1 + cc[None, None, :] * sg2,
                    mask=om3,
                    other=0.0,
                )
            for b in tl.static_range(NB):
                xl, xb, rs, rm, m2, ia, ib = rotated_block(
                    x_ptr, rot_ptr, node, e, b, col_t, row_t, ea_t, eb_t, cc, cmask,
                    sx0, sx1, sx2, sr0, sra, srb, JP, SP, LAYOUT,
                )  # fmt: skip
                if MIX:
                    kt = tl.load(ki_t + (b * SP + ss)[:, None] * LP + tt[None, :]).to(tl.int64)
                    km = kt >= 0
                    # slot 0 is m = 0; slots 1, 2 (m = -1, +1) share the |m| = 1 mixer entries
                    k0 = tl.load(ki_t + (b * SP) * LP + tt).to(tl.int64)
                    k1 = tl.load(ki_t + (b * SP + 1) * LP + tt).to(tl.int64)
                    gxl = tl.full((SP, BC), 0.0, dt)
                    for q in tl.static_range(R):
                        kv = tl.load(k_ptr + e * sk0 + kt * sk1 + q * sk2, mask=km, other=0.0)
                        bq = tl.load(b_ptr + q * sb0 + cc * sb1, mask=cmask, other=0.0)
                        u = tl.reduce(kv[:, :, None] * g3, 1, SUM)
                        gxl += bq[None, :] * u
                        gbq = tl.reduce(u * xl, 0, SUM)
                        gbacc += tl.where(
                            valid, tl.where((qq == q)[:, None], gbq[None, :], 0.0), 0.0
                        )
                        v = tl.reduce(g3 * (bq[None, :] * xl)[:, None, :], 2, SUM)
                        v0 = tl.reduce(tl.where(ss[:, None] == 0, v, 0.0), 0, SUM)
                        v1 = tl.reduce(tl.where(ss[:, None] > 0, v, 0.0), 0, SUM)
                        tl.store(gk_ptr + e * sq0 + k0 * sq1 + q * sq2, v0, mask=k0 >= 0)
                        tl.store(gk_ptr + e * sq0 + k1 * sq1 + q * sq2, v1, mask=k1 >= 0)
                    # the mixer's input cotangent, for the node kernel (grad_ptr is scratch here)
                    tl.store(
                        grad_ptr + e * sh0 + rs[:, None] * sh1 + cc[None, :] * sh2, gxl, mask=rm
                    )
                else:
                    rd, gr = radial_rows(
                        rad_ptr, gy_ptr, e, rs, rm, cc, sd0, sd1, sd2, sg0, sg1, sg2
                    )
                    gxl = gr * rd
                    tl.store(
                        grad_ptr + e * sh0 + rs[:, None] * sh1 + cc[None, :] * sh2, gr * xl, mask=rm
                    )
                grt = tl.reduce(xb[None, :, :] * gxl[:, None, :], 2, SUM)
                tl.store(grot_ptr + e * so0 + (ia * soa + ib * sob), grt, mask=m2)
        if MIX:
            tl.store(
                gbp_ptr + pid * sp0 + qq[:, None] * sp1 + cc[None, :] * sp2,
                gbacc,
                mask=(qq < R)[:, None] & cmask[None, :],
            )

    @triton.jit
    def _rm_bwd_node_kernel(
        perm_ptr, ptr_ptr, rot_ptr, rad_ptr, gy_ptr, gx_ptr,
        col_t, row_t, ea_t, eb_t,
        C,
        sr0, sra, srb, sd0, sd1, sd2, sg0, sg1, sg2, sx0, sx1, sx2,
        NB: tl.constexpr, JP: tl.constexpr, SP: tl.constexpr,
        BC: tl.constexpr, LAYOUT: tl.constexpr, MIX: tl.constexpr,
    ):  # fmt: skip
        """gx[n] = Σ_{e: src=e→n} Dᵀ-rotation of the local cotangent, one degree block per
        program. MIX: rad_ptr holds the mixer's input cotangent written by the edge kernel;
        otherwise the plain radial product's cotangent is formed here (gy · rad)."""
        # one degree block per program (4x the parallelism at L = 3)
        n, b, beg, end, cc, cmask, col, jm, rs, rm, m2, ia, ib = node_block(
            ptr_ptr, col_t, row_t, ea_t, eb_t, C, BC, JP, SP, LAYOUT
        )
        dt = gx_ptr.dtype.element_ty
        off = ia * sra + ib * srb
        acc = tl.full((JP, BC), 0.0, dt)
        for i in range(beg, end):
            e = tl.load(perm_ptr + i).to(tl.int64)
            coef = tl.load(rot_ptr + e * sr0 + off, mask=m2, other=0.0)
            if MIX:  # the edge kernel left the mixer's input cotangent in rad_ptr
                gxl = tl.load(
                    rad_ptr + e * sd0 + rs[:, None] * sd1 + cc[None, :] * sd2, mask=rm, other=0.0
                )
            else:
                rd, gr = radial_rows(rad_ptr, gy_ptr, e, rs, rm, cc, sd0, sd1, sd2, sg0, sg1, sg2)
                gxl = gr * rd
            acc += tl.reduce(coef[:, :, None] * gxl[:, None, :], 0, SUM)
        tl.store(
            gx_ptr + n * sx0 + col.to(tl.int64)[:, None] * sx1 + cc[None, :] * sx2,
            acc,
            mask=jm[:, None] & cmask[None, :],
        )


def launch_bwd(gy, x, src, rot, k, basis, rad, perm, row_ptr, gx, grot, gk, gbp, grad, t, mt,
               layout, sr, so, EB, warps, stages):  # fmt: skip
    """Launch the edge and node kernels (inside rotate_mix's backward op): writes gx, grot, gk
    (mixer) or grad (no mixer) and the basis partials gbp; t, mt the storage and mixer tables,
    sr, so the rotation and cotangent storage strides, warps the (edge, node) warps."""
    N, C = x.shape[0], x.shape[2]
    E = src.shape[0]
    mix = k is not None
    R = k.shape[2] if mix else 1
    BC = cm.next_pow2(C)
    nprog = (E + EB - 1) // EB
    kk = k if mix else gy
    bb = basis if mix else gy
    rd = rad if not mix else gy
    gxl = torch.empty_like(gy) if mix else None  # mixer input cotangent, edge → node kernel
    gkk = gk if mix else gy
    gbb = gbp if mix else gy
    grr = grad if not mix else gxl
    rp = cm.next_pow2(R)
    cm.wrap(_rm_bwd_edge_kernel)[(nprog,)](
        x, src, rot, kk, bb, rd, gy,
        grot, gkk, gbb, grr,
        t["col"], t["row"], t["ent_a"], t["ent_b"], mt["kidx"], mt["orow"],
        E, C,
        *x.stride(), *sr, *_s3(kk), *_s2(bb), *_s3(rd), *gy.stride(),
        *so, *_s3(gkk), *_s3(gbb), *_s3(grr),
        NB=t["nblk"], JP=t["jp"], SP=t["sp"], LP=mt["lp"], R=R, RP=rp, BC=BC, EB=EB,
        num_warps=warps[0], num_stages=stages,
        LAYOUT=layout, MIX=mix,
    )  # fmt: skip
    if not cm.has_no_items(N):
        rn = gxl if mix else rd
        cm.wrap(_rm_bwd_node_kernel)[(N, t["nblk"])](
            perm, row_ptr, rot, rn, gy, gx,
            t["col"], t["row"], t["ent_a"], t["ent_b"],
            C,
            *sr, *_s3(rn), *gy.stride(), *gx.stride(),
            NB=t["nblk"], JP=t["jp"], SP=t["sp"], BC=BC,
            LAYOUT=layout, MIX=mix, num_warps=warps[1],
        )  # fmt: skip
