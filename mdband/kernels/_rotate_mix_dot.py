"""rotate_mix's "dot" kernels: source-node programs with BE edges per step as tl.dot products.

Same op, inputs, outputs and layouts as the "edge" kernels of :mod:`mdband.kernels.rotate_mix`
(whose docstring has the math; ``rotate_mix.KERNELS`` picks the kernels per pass). Shapes (C
channels, E edges, N nodes, L = ``lmax``, Dm = 3L+1, NB = L+1 degree blocks, R mixer rank)::

    x (N, D, C)   rot (E, ·) BAND or DENSE, read through ``storage.kernel_tables``
    k (E, K, R), basis (R, C)  (mixer)   or   rad (E, Dm, C)  (no mixer)
    y, gy (E, Dm, C)   gx (N, D, C)   grot like rot   gk like k   grad like rad
    gbp (N·NB, R, C)   scratch: the basis cotangent's partial of each backward program

The programs walk the CSR by SOURCE (``perm``, ``row_ptr``), so the node features of a
program's degree block b, xb = x[n, l²..l²+2l, :] (JPK, BC), are the same for every edge of its
segment. The segment is processed BE edges per step, as R = BE·SP rows r = i·SP + s (edge i of
the step, band slot s = m ∈ {0, −1, +1}, padded to SP = 4); ``coef`` (R, JPK) holds the step's
rotation entries D[e, l²+l+m, l²+j] of block b (zero off the block's entries, on padded lanes and
past the segment's end). Then

    xl   = coef @ xb                 (R, BC)   the step's rotated rows of block b
    grt  = gxl @ xbᵀ                 (R, JPK)  their rotation cotangent (the entries are stored)
    gx  += coefᵀ @ gxl               (JPK, BC) over the segment (K = R): gx[n, block b]

* forward, grid N (mixer) or N·NB (no mixer): with the mixer one program per source node walks
  all NB blocks per step and accumulates the outputs of the step's edges in registers, a
  (R, LP, BC) tile y3[(i, s), t] = y[e_i, (l_out = t + |m_s|, m_s)] += Σ_q k[e_i, (b, l_out,
  |m|), q]·basis[q]·xl_b[(i, s)], stored once per step. Each y row has one writer: the sum over
  l_in stays in one program, in block order (no atomics, no per-l_in scratch, which would move
  NB·E·Dm·C more bytes; an edge-parallel program cannot use a shared-operand tl.dot, because
  x[src] changes with the edge). Without the mixer y = xl·rad needs no sum: one program per
  (node, block).
* backward, grid N·NB, program pid = n·NB + b (the NB programs of a node run next to each
  other, so the gy rows they share hit L2): the fused edge and node passes, no (E, Dm, C) scratch.
  Mixer: per rank q and output lane t (static loops; gy_t (R, BC) = the gy rows (t + |m_s|, m_s),
  k_t (R,) = the k entries (b, t + |m_s|, |m_s|, q) of each row)

      u_q = Σ_t k_t·gy_t;  gxl = Σ_q basis[q]·u_q;  gbp[pid, q] = Σ_steps Σ_r xl·u_q
      gk[e, (b, t + |m|, |m|), q] = Σ_{s: |m_s| = |m|} Σ_c gy_t·basis[q]·xl   (a C-lane row sum
      per row and (q, t), then the two |m| = 1 slots added; written by this program only)

  no mixer: gxl = gy·rad, grad = gy·xl (block b's rows). The basis cotangent is gbp.sum(0).

tl.dot needs every dimension ≥ 16 (``DOT_MIN``): JPK = max(16, JP) packed-column lanes (JP = the
tables' lane count, a power of two ≥ 2L+1; lanes ≥ JP masked), BE = ``DOT_EDGES`` = 4 edges
(R = 16 rows), BC = max(16, next_pow2(C)); LP = next_pow2(L+1) output lanes of the mixer.

Accuracy: every tl.dot is ``input_precision="ieee"`` with ``out_dtype`` the features' dtype
(exact fp32 / fp64 FMAs, no TF32; float32 may choose Triton's "tf32x3", three TF32 tensor-core
products to fp32's rounding, per pass: :data:`DOT_PRECISION`); the order of the sums differs
from the edge kernels', so "dot" equals "edge" and the torch reference to rounding (fp32 ~1e-6
relative, fp64 ~1e-15). Band and dense storages run the same code on the same entries: bitwise
identical. Deterministic: no atomics; every sum has a fixed order (gbp is summed by torch).

Bytes moved per edge (fp32, S = 4): the rotation entries (3D−2)·S (band; as many scattered dense
entries), each read by one program; k K·R·S, read once (the two |m| = 1 slots share entries:
cache hits); y Dm·C·S written; x[n] once per program from DRAM (N·D·C·S in all, later steps hit
the cache), perm 8 per program that reads the edge (no mixer: NB). Backward: also gy, of which
row (l_out, m) is read by every block l_in ≥ |m| ((L+1)² + 2L² = 34 row loads for Dm = 10 rows
at L = 3; the repeats are meant to hit L2), and writes grot entries (3D−2)·S, gk K·R·S (or grad
Dm·C·S), gx N·D·C·S and gbp N·NB·R·C·S; the edge kernels' (E, Dm, C) cotangent round trip and
the node kernel's second rotation read are gone.

FLOPs (padded tiles, per edge, BE = 4, R = 16, L = 3: JPK = 16, LP = 4, BC = 64): forward
NB·(2·R·JPK·BC + 2·R·LP·BC·Rk)/BE = 40,960 for rank Rk = 1 (structural ≈ 10,000: ~4×);
backward NB·(3·2·R·JPK·BC + ~5·R·BC·NB·Rk + ~4·R·BC·Rk)/BE ≈ 119,000 (~55 % in the three
dots); E = 647k: ≈ 27 and 77 GFLOP, all fp32 FMA-unit work with "ieee".

Measured once (H200, Triton 3.6, torch 2.11; E = 647,154, N = 4096, C = 64, L = 3, R = 1, fp32,
band, random src; ms, "edge" → best "dot" (BE, warps)): mixer forward 1.48 → 2.02 (4, 2), backward
6.6 → 9.1 (4, 1); no mixer forward 1.43 → 1.65 (4, 2), backward 4.73 → 4.89 (4, 1). Slower: ncu
of the backward shows L1/shared memory at ~90-96 % of its throughput (MIO stalls: the FMA tl.dot
reads its operands from shared memory for every K step), DRAM ~10 %, and 188-209 registers per
thread (occupancy 12.5 %); 4 or 8 warps are slower still (up to 25 ms). Hence the "edge" default.
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm

#: edges per step (R = DOT_EDGES · SP rows of the tl.dot tiles; SP = 4, so ≥ 4). Read at each
#: launch, like DOT_WARPS (None: :data:`WARPS` per pass), so a benchmark can sweep both.
DOT_EDGES = 4
DOT_WARPS = None
#: warps per program of each pass, the fastest of 1, 2, 4, 8 at BE = 4 in the measurement of the
#: module docstring (C = 64; a block of more warps pays more for the shared-memory operands)
WARPS = {"fwd": 2, "bwd": 1}
#: tl.dot precision per pass in float32 ("ieee": exact FMAs; "tf32x3": Triton's three-TF32
#: tensor-core product, about fp32's rounding); float64 is always "ieee"
DOT_PRECISION = {"fwd": "ieee", "bwd": "tf32x3"}
#: smallest tl.dot dimension the kernels pad to
DOT_MIN = 16


def precision(x, pas: str) -> str:
    """The tl.dot precision of pass ``pas`` for node features x (:data:`DOT_PRECISION`)."""
    return DOT_PRECISION[pas] if x.dtype == torch.float32 else "ieee"


def chosen(kernels: dict, pas: str, x, mix: bool) -> str:
    """The kernels ``rotate_mix.KERNELS`` names for pass "fwd" or "bwd": "edge" or "dot";
    "auto" is "dot" for the radial rows (no mixer) where that pass's tl.dot runs on tensor cores
    (float32 with :data:`DOT_PRECISION` "tf32x3"), else "edge". H200, 2026-12-03
    (``benchmarks/gpu_warps.py --rotate-mix-dot``, E = 647,154, band, ms, edge → tf32x3 dot):
    radial rows L = 3, C = 64 backward 4.73 → 4.21 (4 edges per step, one warp), forward
    1.43 → 1.90; mixer of rank 1 backward 6.60 → 8.64 (L = 3, C = 64), 2.22 → 2.96 (L = 2,
    C = 32): the mixer and every forward stay on the edge kernels."""
    name = cm.kernel_choice(kernels, pas, ("edge", "dot", "auto"), "rotate_mix")
    if name == "auto":
        tensor_cores = precision(x, pas) == "tf32x3" and cm.has_tf32_cores(x.device)
        return "dot" if not mix and tensor_cores else "edge"
    return name


def warps(pas: str) -> int:
    """Warps of a dot program of pass "fwd" or "bwd": ``DOT_WARPS``, else ``WARPS[pas]``."""
    return DOT_WARPS if DOT_WARPS is not None else WARPS[pas]


def pads(t: dict, C: int) -> dict:
    """The tile sizes of a launch: JPK, BC and BE (see the module docstring)."""
    return {"JPK": max(DOT_MIN, t["jp"]), "BC": max(DOT_MIN, cm.next_pow2(C)), "BE": DOT_EDGES}


if cm.TRITON_AVAILABLE:
    triton, tl = cm.triton, cm.tl
    dot_block_rows = cm.dot_block_rows
    SUM = cm.SUM

    @triton.jit
    def _rows(er, rs, cc, s0, s1, s2):
        """Offsets (R, BC) of rows rs of edges er, channels cc, in an (E, Dm, C) tensor."""
        return er[:, None] * s0 + rs[:, None] * s1 + cc[None, :] * s2

    @triton.jit
    def _load_rows(ptr, er, rs, cc, s0, s1, s2, mask):
        """Rows rs of edges er, channels cc, of an (E, Dm, C) tensor (R, BC); 0 where masked."""
        return tl.load(ptr + _rows(er, rs, cc, s0, s1, s2), mask=mask, other=0.0)

    @triton.jit
    def _step_edges(perm_ptr, i0, end, SP: tl.constexpr, BE: tl.constexpr):
        """The step of BE edges at CSR positions i0 + i (those ≥ end masked): their ids ee and
        validity oke (BE,), and per row r = i·SP + s its edge er and validity okr (R,)."""
        R: tl.constexpr = BE * SP
        pos = i0 + tl.arange(0, BE)
        oke = pos < end
        ee = tl.load(perm_ptr + pos, mask=oke, other=0).to(tl.int64)
        er = tl.reshape(tl.broadcast_to(ee[:, None], (BE, SP)), (R,))
        okr = tl.reshape(tl.broadcast_to(oke[:, None], (BE, SP)), (R,))
        return ee, oke, er, okr

    @triton.jit
    def _rm_dot_fwd_kernel(
        x_ptr, rot_ptr, k_ptr, b_ptr, rad_ptr, y_ptr, perm_ptr, ptr_ptr,
        col_t, row_t, ea_t, eb_t, ki_t, or_t,
        C,
        sx0, sx1, sx2, sr0, sra, srb, sk0, sk1, sk2, sb0, sb1, sd0, sd1, sd2, sy0, sy1, sy2,
        NB: tl.constexpr, NBL: tl.constexpr, JP: tl.constexpr, JPK: tl.constexpr,
        SP: tl.constexpr, LP: tl.constexpr, R: tl.constexpr, BE: tl.constexpr,
        BC: tl.constexpr, LAYOUT: tl.constexpr, MIX: tl.constexpr, PREC: tl.constexpr = "ieee",
    ):  # fmt: skip
        # one program per (source node n, group of NBL blocks): NBL = NB (mixer) or 1
        pid = tl.program_id(0).to(tl.int64)
        n = pid // (NB // NBL)
        g = pid % (NB // NBL)
        beg = tl.load(ptr_ptr + n).to(tl.int64)
        end = tl.load(ptr_ptr + n + 1).to(tl.int64)
        dt = y_ptr.dtype.element_ty
        RW: tl.constexpr = BE * SP
        tt = tl.arange(0, LP)
        sl0 = tl.arange(0, RW) % SP
        cc0 = tl.arange(0, BC)
        orow = tl.load(or_t + sl0[:, None] * LP + tt[None, :]).to(tl.int64)  # (RW, LP)
        om3 = (orow >= 0)[:, :, None] & (cc0 < C)[None, None, :]
        for i0 in range(beg, end, BE):
            ee, oke, er, okr = _step_edges(perm_ptr, i0, end, SP, BE)
            y3 = tl.zeros((RW, LP, BC), dtype=dt)
            for bb in tl.static_range(NBL):
                b = g * NBL + bb
                cc, cmask, col, jm, sl, rs, rowm, m2, ia, ib, off = dot_block_rows(
                    col_t, row_t, ea_t, eb_t, b, C, sra, srb, JP, JPK, SP, BE, BC, LAYOUT
                )  # fmt: skip
                xb = tl.load(
                    x_ptr + n * sx0 + col.to(tl.int64)[:, None] * sx1 + cc[None, :] * sx2,
                    mask=jm[:, None] & cmask[None, :],
                    other=0.0,
                )
                coef = tl.load(rot_ptr + er[:, None] * sr0 + off, mask=okr[:, None] & m2, other=0.0)
                xl = tl.dot(coef, xb, input_precision=PREC, out_dtype=dt)  # (RW, BC)
                if MIX:
                    kt = tl.load(ki_t + (b * SP + sl)[:, None] * LP + tt[None, :]).to(tl.int64)
                    km = okr[:, None] & (kt >= 0)
                    for q in tl.static_range(R):
                        kv = tl.load(k_ptr + er[:, None] * sk0 + kt * sk1 + q * sk2, mask=km,
                                     other=0.0)  # fmt: skip
                        bq = tl.load(b_ptr + q * sb0 + cc * sb1, mask=cmask, other=0.0)
                        y3 += kv[:, :, None] * (xl * bq[None, :])[:, None, :]
                else:
                    rm = okr[:, None] & rowm
                    rd = _load_rows(rad_ptr, er, rs, cc, sd0, sd1, sd2, rm)
                    tl.store(
                        y_ptr + _rows(er, rs, cc, sy0, sy1, sy2),
                        xl * rd,
                        mask=rm,
                    )
            if MIX:
                tl.store(
                    y_ptr + er[:, None, None] * sy0 + orow[:, :, None] * sy1
                    + cc0[None, None, :] * sy2,
                    y3,
                    mask=okr[:, None, None] & om3,
                )  # fmt: skip

    @triton.jit
    def _rm_dot_bwd_kernel(
        x_ptr, rot_ptr, k_ptr, b_ptr, rad_ptr, gy_ptr, perm_ptr, ptr_ptr,
        gx_ptr, grot_ptr, gk_ptr, gbp_ptr, grad_ptr,
        col_t, row_t, ea_t, eb_t, ki_t, or_t,
        C,
        sx0, sx1, sx2, sr0, sra, srb, sk0, sk1, sk2, sb0, sb1, sd0, sd1, sd2, sg0, sg1, sg2,
        sgx0, sgx1, sgx2, so0, soa, sob, sq0, sq1, sq2, sp0, sp1, sp2, sh0, sh1, sh2,
        NB: tl.constexpr, JP: tl.constexpr, JPK: tl.constexpr, SP: tl.constexpr,
        LP: tl.constexpr, R: tl.constexpr, RP: tl.constexpr, BE: tl.constexpr,
        BC: tl.constexpr, LAYOUT: tl.constexpr, MIX: tl.constexpr, PREC: tl.constexpr = "ieee",
    ):  # fmt: skip
        # one program per (source node n, degree block b = l_in), pid = n·NB + b: block b's
        # storage cotangent entries, gk entries (b, ·) or grad rows, gx[n, block b], gbp[pid]
        pid = tl.program_id(0).to(tl.int64)
        n = pid // NB
        b = pid % NB
        beg = tl.load(ptr_ptr + n).to(tl.int64)
        end = tl.load(ptr_ptr + n + 1).to(tl.int64)
        cc, cmask, col, jm, sl, rs, rowm, m2, ia, ib, off = dot_block_rows(
            col_t, row_t, ea_t, eb_t, b, C, sra, srb, JP, JPK, SP, BE, BC, LAYOUT
        )  # fmt: skip
        dt = gx_ptr.dtype.element_ty
        RW: tl.constexpr = BE * SP
        goff = ia * soa + ib * sob
        jc = col.to(tl.int64)
        xb = tl.load(
            x_ptr + n * sx0 + jc[:, None] * sx1 + cc[None, :] * sx2,
            mask=jm[:, None] & cmask[None, :],
            other=0.0,
        )  # (JPK, BC), the same for every edge of the segment
        xbt = tl.trans(xb)
        sl2 = tl.reshape(sl, (BE, SP))
        qq = tl.arange(0, RP)
        acc = tl.zeros((JPK, BC), dtype=dt)
        gbw = tl.zeros((RP, RW, BC), dtype=dt)
        for i0 in range(beg, end, BE):
            ee, oke, er, okr = _step_edges(perm_ptr, i0, end, SP, BE)
            coef = tl.load(rot_ptr + er[:, None] * sr0 + off, mask=okr[:, None] & m2, other=0.0)
            xl = tl.dot(coef, xb, input_precision=PREC, out_dtype=dt)  # (RW, BC)
            if MIX:
                gxl = tl.zeros((RW, BC), dtype=dt)
                for q in tl.static_range(R):
                    bq = tl.load(b_ptr + q * sb0 + cc * sb1, mask=cmask, other=0.0)
                    xlb = xl * bq[None, :]
                    u = tl.zeros((RW, BC), dtype=dt)
                    for t in tl.static_range(NB):  # output lane t: l_out = t + |m_s|
                        kt = tl.load(ki_t + (b * SP + sl) * LP + t).to(tl.int64)  # (RW,)
                        km = okr & (kt >= 0)
                        orw = tl.maximum(tl.load(or_t + sl * LP + t), 0).to(tl.int64)
                        gyt = tl.load(
                            gy_ptr + er[:, None] * sg0 + orw[:, None] * sg1 + cc[None, :] * sg2,
                            mask=km[:, None] & cmask[None, :],
                            other=0.0,
                        )
                        kv = tl.load(k_ptr + er * sk0 + kt * sk1 + q * sk2, mask=km, other=0.0)
                        u += kv[:, None] * gyt
                        v2 = tl.reshape(tl.reduce(gyt * xlb, 1, SUM), (BE, SP))
                        # slot 0 is m = 0; slots 1, 2 (m = -1, +1) share the |m| = 1 entries
                        v0 = tl.reduce(tl.where(sl2 == 0, v2, 0.0), 1, SUM)
                        v1 = tl.reduce(tl.where(sl2 > 0, v2, 0.0), 1, SUM)
                        k0 = tl.load(ki_t + (b * SP) * LP + t + ee * 0).to(tl.int64)  # (BE,)
                        k1 = tl.load(ki_t + (b * SP + 1) * LP + t + ee * 0).to(tl.int64)
                        tl.store(gk_ptr + ee * sq0 + k0 * sq1 + q * sq2, v0, mask=oke & (k0 >= 0))
                        tl.store(gk_ptr + ee * sq0 + k1 * sq1 + q * sq2, v1, mask=oke & (k1 >= 0))
                    gxl += bq[None, :] * u
                    gbw += tl.where((qq == q)[:, None, None], (xl * u)[None, :, :], 0.0)
            else:
                rm = okr[:, None] & rowm
                rd = _load_rows(rad_ptr, er, rs, cc, sd0, sd1, sd2, rm)
                gr = _load_rows(gy_ptr, er, rs, cc, sg0, sg1, sg2, rm)
                gxl = gr * rd
                tl.store(
                    grad_ptr + _rows(er, rs, cc, sh0, sh1, sh2),
                    gr * xl,
                    mask=rm,
                )
            grt = tl.dot(gxl, xbt, input_precision=PREC, out_dtype=dt)  # (RW, JPK)
            tl.store(grot_ptr + er[:, None] * so0 + goff, grt, mask=okr[:, None] & m2)
            acc = tl.dot(tl.trans(coef), gxl, acc, input_precision=PREC, out_dtype=dt)
        tl.store(
            gx_ptr + n * sgx0 + jc[:, None] * sgx1 + cc[None, :] * sgx2,
            acc,
            mask=jm[:, None] & cmask[None, :],
        )
        if MIX:
            tl.store(
                gbp_ptr + pid * sp0 + qq[:, None] * sp1 + cc[None, :] * sp2,
                tl.reduce(gbw, 1, SUM),
                mask=(qq < R)[:, None] & cmask[None, :],
            )


# ---------------------------------------------------------------------------- launchers
def strides3(t):
    """Strides of a 3-d input, (0, 0, 0) for the placeholder of an absent one."""
    return t.stride() if t.dim() == 3 else (0, 0, 0)


def strides2(t):
    """Strides of a 2-d input, (0, 0) for the placeholder of an absent one."""
    return t.stride() if t.dim() == 2 else (0, 0)


def launch_fwd(x, rot, k, basis, rad, perm, row_ptr, y, t, mt, layout, sr):
    """Run the forward dot kernel into ``y`` and return it; ``t`` / ``mt`` = the storage's and
    the mixer's kernel tables, ``sr`` = the storage's kernel strides."""
    N, C = x.shape[0], x.shape[2]
    mix = k is not None
    p = pads(t, C)
    nb = t["nblk"]
    nbl = nb if mix else 1
    kk, bb, rd = (k, basis, y) if mix else (y, y, rad)
    cm.wrap(_rm_dot_fwd_kernel)[(N * (nb // nbl),)](
        x, rot, kk, bb, rd, y, perm, row_ptr,
        t["col"], t["row"], t["ent_a"], t["ent_b"], mt["kidx"], mt["orow"],
        C,
        *x.stride(), *sr, *strides3(kk), *strides2(bb), *strides3(rd), *y.stride(),
        NB=nb, NBL=nbl, JP=t["jp"], JPK=p["JPK"], SP=t["sp"], LP=mt["lp"],
        R=k.shape[2] if mix else 1, BE=p["BE"], BC=p["BC"], LAYOUT=layout, MIX=mix,
        PREC=precision(x, "fwd"), num_warps=warps("fwd"),
    )  # fmt: skip
    return y


def launch_bwd(gy, x, rot, k, basis, rad, perm, row_ptr, gx, grot, gk, grad, t, mt, layout, sr,
               so):  # fmt: skip
    """Run the fused backward dot kernel (fills gx, grot's entries, gk or grad) and return
    (gx, grot, gk, gbasis, grad), gbasis = the programs' partials summed by torch."""
    N, C = x.shape[0], x.shape[2]
    mix = k is not None
    p = pads(t, C)
    nb = t["nblk"]
    R = k.shape[2] if mix else 1
    gbp = x.new_empty(N * nb, R, C) if mix else x.new_zeros(0)
    kk, bb, rd = (k, basis, gy) if mix else (gy, gy, rad)
    gkk, gbb, grr = (gk, gbp, gy) if mix else (gy, gy, grad)
    cm.wrap(_rm_dot_bwd_kernel)[(N * nb,)](
        x, rot, kk, bb, rd, gy, perm, row_ptr,
        gx, grot, gkk, gbb, grr,
        t["col"], t["row"], t["ent_a"], t["ent_b"], mt["kidx"], mt["orow"],
        C,
        *x.stride(), *sr, *strides3(kk), *strides2(bb), *strides3(rd), *gy.stride(),
        *gx.stride(), *so, *strides3(gkk), *strides3(gbb), *strides3(grr),
        NB=nb, JP=t["jp"], JPK=p["JPK"], SP=t["sp"], LP=mt["lp"], R=R, RP=cm.next_pow2(R),
        BE=p["BE"], BC=p["BC"], LAYOUT=layout, MIX=mix, PREC=precision(x, "bwd"),
        num_warps=warps("bwd"),
    )  # fmt: skip
    return gx, grot, gk, gbp.sum(0) if mix else gbp, grad
