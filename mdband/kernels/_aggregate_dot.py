"""aggregate's "dot" kernels: the (node, degree block) programs with BE edges per step as tl.dot.

Same op, inputs, outputs and scratch as the "walk" kernels of :mod:`mdband.kernels.aggregate`
(whose docstring has the math; ``aggregate.KERNELS`` picks the kernels per pass). Shapes (C
channels, E edges, N nodes, H heads, L = ``lmax``, Dm = 3L+1; NB = L+1 degree blocks)::

    y      (E, Dm, C)   rot (E, ·) BAND or DENSE, read through ``storage.kernel_tables``
    out    (N, D, C)    forward
    gy     (E, Dm, C), grot (like rot), qp (NB, E, H or 1), gsp (NB, N) plain mode   backward

One program per (destination node n, degree block b = degree l), grid (N, NB), as the walk.
What depends on (n, b) only is loaded once: the block's tables, rho, the softmax statistics of
n, and in the backward g = gout[n, block b]·rho, (JPK, BC). The segment of n is then processed
BE edges per step, as R = BE·SP rows r = i·SP + s (edge i of the step, band slot s = m ∈ {0, −1,
+1}, padded to SP = 4): ``coef`` (R, JPK) is the step's rotation entries D[e, l²+l+m, l²+j]
(zero off the block's entries, on padded lanes and past the segment's end), ``ya`` (R, BC) its
y rows times the edge's weight a (attention α per channel, or env):

    forward   acc (JPK, BC) += coefᵀ @ ya           (K = R);  out[n, block b] = rho · acc (· s[n])
    backward  tv = coef @ g (R, BC);  gy = tv · a;  then the storage cotangent entries and the
              partial q[e, h] = Σ_s Σ_{c ∈ h} y·tv of block b, per head h:
      H > 1 (a per channel lane, ``LANES``):  grot = ya @ gᵀ (R, JPK);  q = (y·tv) @ O, with
              O (BC, HPK) the 0/1 head matrix, then summed over the SP rows of each edge;
      H ≤ 1 (one weight a per edge):  p = y @ gᵀ (R, JPK);  grot = a·p;  q = Σ_s Σ_j coef·p
              (= Σ_s Σ_c y·tv reassociated: one tile product fewer)

so the per-edge cross-lane reductions of the walk become tile products (and, for q, one
JPK-lane row sum per step). tl.dot needs every dimension ≥ 16 (``DOT_MIN``): JPK = max(16, JP)
packed-column lanes (JP = the tables' lane count, a power of two ≥ 2L+1; lanes ≥ JP masked),
BE edges per step (``DOT_LAUNCH``: 4 for "ieee", R = 16; 16 for "tf32x3", R = 64), BC =
max(16, next_pow2(C)), HPK = max(16, next_pow2(H)).
The attention weights are computed once per edge (per lane only for H > 1) and repeated over
its SP rows. The backward's partials are the walk's (qp per (block, edge), plain mode also gsp
per (block, node)); aggregate.py's torch epilogue sums them in block order.

Accuracy: every tl.dot is ``input_precision="ieee"`` (exact fp32 / fp64 FMAs, no TF32) or, in
float32, Triton's "tf32x3" per pass (:data:`DOT_PRECISION`: the backward's default; three TF32
tensor-core products, to fp32's rounding: max rel. difference from the walk 5.8e-7 at L = 3,
C = 64 on an H200); the
accumulation order differs from the walk's, so "dot" equals "walk" and the torch reference to
rounding (fp32 ~1e-6 relative, fp64 ~1e-15). Band and dense storages run the same code on the
same entries: bitwise identical. Deterministic: no atomics; every sum has a fixed order.

Bytes moved per edge (fp32, S = 4): as the walk. y Dm·C·S and the rotation entries (3D−2)·S
(band; as many scattered dense entries), each read by one program only; perm 8, env S and the
logits (H·S, one load per channel lane for H > 1) per block program (cache hits); out N·D·C·S
in total. The backward also reads gout (N·D·C·S, once per program) and writes gy (Dm·C·S), the
storage cotangent entries and NB·H·S (plain: NB·S, and NB·N·S) partials. No (E, D, D) buffer.
FLOPs: the padded tiles do 2·R·JPK·BC per step and block in the forward, twice that in the
backward (H ≤ 1; H > 1 adds 2·R·BC·HPK), about 5.6× the structural count at L = 3 (JPK = 16 lanes
for ≤ 7 columns, SP = 4 rows for ≤ 3 slots): ~42 GFLOP for the default backward (E = 647k,
L = 3, C = 64), all fp32 FMA-unit work with "ieee". Not yet timed on a GPU.
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm

#: launch per tl.dot precision: edges per step BE (R = BE · SP rows of the tl.dot tiles; SP = 4,
#: so ≥ 4) and warps (None: 8, 4 for C ≤ 16). "ieee": compiled for sm_90 (Triton 3.9) with 8
#: warps, BE = 4 needs ≤ 212 registers and no spills at C ≤ 128 in fp32 (BE = 8 with 4 warps
#: spills at C = 64: the FMA tl.dot holds whole K slices of its operands per thread); the fp64
#: H > 1 backward spills a little. "tf32x3": the fastest backward of ``benchmarks/gpu_warps.py``
#: on an H200 (2026-12-03, 647,154 edges, one head, fwd + bwd with the walk's forward: L = 3,
#: C = 64 5.22 ms against the walk's 6.0-6.4; L = 2, C = 32 2.97 against 4.3-4.4).
DOT_LAUNCH = {"ieee": {"BE": 4, "warps": None}, "tf32x3": {"BE": 16, "warps": 4}}
#: overrides of DOT_LAUNCH for every precision (None: per precision), read at each launch so
#: that a benchmark can sweep them
DOT_EDGES = None
DOT_WARPS = None
#: tl.dot precision per pass in float32 ("ieee": exact FMAs; "tf32x3": Triton's three-TF32
#: tensor-core product, about fp32's rounding); float64 is always "ieee"
DOT_PRECISION = {"fwd": "ieee", "bwd": "tf32x3"}
#: smallest tl.dot dimension the kernels pad to
DOT_MIN = 16


def precision(y, pas: str) -> str:
    """The tl.dot precision of pass ``pas`` for features y (:data:`DOT_PRECISION`)."""
    return DOT_PRECISION[pas] if y.dtype == torch.float32 else "ieee"


def chosen(kernels: dict, pas: str, y) -> str:
    """The kernels ``aggregate.KERNELS`` names for pass "fwd" or "bwd" and features y: "walk" or
    "dot"; "auto" is "dot" where that pass's tl.dot runs on tensor cores (float32 with
    :data:`DOT_PRECISION` "tf32x3", on a GPU where ``cm.has_tf32_cores``), else "walk"
    (float64: the exact walk)."""
    name = cm.kernel_choice(kernels, pas, ("walk", "dot", "auto"), "aggregate")
    if name == "auto":
        tensor_cores = precision(y, pas) == "tf32x3" and cm.has_tf32_cores(y.device)
        return "dot" if tensor_cores else "walk"
    return name


def warps(C: int, prec: str) -> int:
    """Warps of a dot program: ``DOT_WARPS``, else ``DOT_LAUNCH[prec]``, else 8 (4 for
    C ≤ 16)."""
    w = DOT_WARPS if DOT_WARPS is not None else DOT_LAUNCH[prec]["warps"]
    if w is not None:
        return w
    return 8 if C > 16 else 4


def pads(t: dict, C: int, H: int, prec: str) -> dict:
    """The tile sizes of a launch: JPK, BC, HPK and BE (see the module docstring)."""
    return {
        "JPK": max(DOT_MIN, t["jp"]),
        "BC": max(DOT_MIN, cm.next_pow2(C)),
        "HPK": max(DOT_MIN, cm.next_pow2(max(H, 1))),
        "BE": DOT_EDGES if DOT_EDGES is not None else DOT_LAUNCH[prec]["BE"],
    }


if cm.TRITON_AVAILABLE:
    triton, tl = cm.triton, cm.tl
    div_ieee, node_segment, dot_block_rows = cm.div_ieee, cm.node_segment, cm.dot_block_rows
    SUM = cm.SUM

    @triton.jit
    def head_stats(st_ptr, n, cc, cmask, HD, st0, st1, st2, BC: tl.constexpr):
        """Per channel lane: its head hc = cc // HD and node n's softmax statistics of that
        head (max M, and 1/S) from the statistics pass (stats have the features' dtype)."""
        hc = cc // HD
        mx = tl.load(st_ptr + n * st0 + hc * st2, mask=cmask, other=0.0)
        sm = tl.load(st_ptr + n * st0 + st1 + hc * st2, mask=cmask, other=1.0)
        inv = div_ieee(tl.full((BC,), 1.0, st_ptr.dtype.element_ty), sm)
        return hc, mx, inv

    @triton.jit
    def _dot_setup(
        ptr_ptr, col_t, row_t, ea_t, eb_t, C, sra, srb,
        JP: tl.constexpr, JPK: tl.constexpr, SP: tl.constexpr, BE: tl.constexpr,
        BC: tl.constexpr, LAYOUT: tl.constexpr,
    ):  # fmt: skip
        """Step-invariant index tiles of a (node n, degree block b) program: n, b, the segment
        [beg, end), channel lanes cc/cmask, block b's packed columns col (JPK,) with mask jm;
        per row r = i·SP + s (R = BE·SP rows): the reduced row rs of slot s (clamped ≥ 0), the
        (R, BC) y-row mask rowm, the (R, JPK) entry mask m2 and the entries' storage indices
        (ia, ib) (an entry of edge e sits at e·sr0 + ia·sa + ib·sb), and off = ia·sra + ib·srb."""
        n, beg, end, _, _ = node_segment(ptr_ptr, C, BC)
        b = tl.program_id(1)
        cc, cmask, col, jm, _, rs, rowm, m2, ia, ib, off = dot_block_rows(
            col_t, row_t, ea_t, eb_t, b, C, sra, srb, JP, JPK, SP, BE, BC, LAYOUT
        )
        return n, b, beg, end, cc, cmask, col, jm, rs, rowm, m2, ia, ib, off

    @triton.jit
    def store_block(out_ptr, acc, rho, sn, n, col, jm, cc, cmask, so0, so1, so2,
                    ATTN: tl.constexpr):  # fmt: skip
        """out[n, block columns col] = acc · rho (· the node scale sn in plain mode): the end of
        both forward kernels (walk and dot)."""
        res = acc * rho[:, None]
        if not ATTN:
            res = res * sn
        tl.store(
            out_ptr + n * so0 + col.to(tl.int64)[:, None] * so1 + cc[None, :] * so2,
            res,
            mask=jm[:, None] & cmask[None, :],
        )

    @triton.jit
    def _weight_setup(
        st_ptr, n, cc, cmask, HD, st0, st1, st2,
        BC: tl.constexpr, ATTN: tl.constexpr, LANES: tl.constexpr,
    ):  # fmt: skip
        """What the attention weights of node n's edges need: per channel lane (LANES, H > 1)
        or for the one head (H = 1, shapes (1,)) the head hc and the statistics (M, 1/S) of the
        statistics pass; plain mode: hc = 0 (one "head" of all channels; the others unused)."""
        if ATTN:
            if LANES:
                hc, mx, inv = head_stats(st_ptr, n, cc, cmask, HD, st0, st1, st2, BC)
            else:
                h1 = tl.arange(0, 1)
                hc, mx, inv = head_stats(st_ptr, n, h1, h1 < 1, HD, st0, st1, st2, 1)
        else:
            hc, mx, inv = cc * 0, cc, cc
        return hc, mx, inv

    @triton.jit
    def _step_rows(
        perm_ptr, env_ptr, rot_ptr, y_ptr, lg_ptr, i0, end, off, m2, rs, rowm, cc, cmask,
        hc, mx, inv, scale, sr0, sy0, sy1, sy2, sl0, sl1,
        SP: tl.constexpr, BE: tl.constexpr, BC: tl.constexpr, ATTN: tl.constexpr,
        LANES: tl.constexpr,
    ):  # fmt: skip
        """The step of BE edges at CSR positions i0 + i (i < BE; those ≥ end masked): per edge
        its id ee, validity oke, envelope eve (BE,); per row r = i·SP + s its edge er and
        validity okr (R,), the edge's weight a (attention env²·exp(logit − M)·(1/S): (R, BC),
        per channel lane's head, with LANES, else (R, 1); plain: env·scale, (R, 1)), the
        rotation entries coef (R, JPK) and the y rows yb (R, BC), both zero where masked."""
        R: tl.constexpr = BE * SP
        pos = i0 + tl.arange(0, BE)
        oke = pos < end
        ee = tl.load(perm_ptr + pos, mask=oke, other=0).to(tl.int64)
        eve = tl.load(env_ptr + ee, mask=oke, other=0.0)
        er = tl.reshape(tl.broadcast_to(ee[:, None], (BE, SP)), (R,))
        okr = tl.reshape(tl.broadcast_to(oke[:, None], (BE, SP)), (R,))
        if ATTN and LANES:  # per edge and channel lane, then repeated over the edge's SP rows
            t = tl.load(
                lg_ptr + ee[:, None] * sl0 + hc[None, :] * sl1,
                mask=oke[:, None] & cmask[None, :],
                other=-float("inf"),
            )
            ae = (eve * eve)[:, None] * (tl.exp(t - mx[None, :]) * inv[None, :])
            a = tl.reshape(tl.broadcast_to(ae[:, None, :], (BE, SP, BC)), (R, BC))
        else:
            if ATTN:  # one head: one weight per edge
                t = tl.load(lg_ptr + ee * sl0, mask=oke, other=-float("inf"))
                ae = (eve * eve) * (tl.exp(t - mx) * inv)
            else:
                ae = eve * scale
            a = tl.reshape(tl.broadcast_to(ae[:, None], (BE, SP)), (R,))[:, None]
        coef = tl.load(rot_ptr + er[:, None] * sr0 + off, mask=okr[:, None] & m2, other=0.0)
        yb = tl.load(
            y_ptr + er[:, None] * sy0 + rs[:, None] * sy1 + cc[None, :] * sy2,
            mask=okr[:, None] & rowm,
            other=0.0,
        )
        return ee, oke, eve, er, okr, a, coef, yb

    @triton.jit
    def _agg_dot_fwd_kernel(
        y_ptr, rot_ptr, rho_ptr, perm_ptr, ptr_ptr, env_ptr, lg_ptr, s_ptr, out_ptr, st_ptr,
        col_t, row_t, ea_t, eb_t,
        C, HD,
        sy0, sy1, sy2, sr0, sra, srb, sl0, sl1, so0, so1, so2, st0, st1, st2,
        JP: tl.constexpr, JPK: tl.constexpr, SP: tl.constexpr, BE: tl.constexpr,
        BC: tl.constexpr, LAYOUT: tl.constexpr, ATTN: tl.constexpr, LANES: tl.constexpr,
        PREC: tl.constexpr = "ieee",
    ):  # fmt: skip
        # one program per (destination node n, degree block b): out[n, block b]
        n, b, beg, end, cc, cmask, col, jm, rs, rowm, m2, ia, ib, off = _dot_setup(
            ptr_ptr, col_t, row_t, ea_t, eb_t, C, sra, srb, JP, JPK, SP, BE, BC, LAYOUT
        )
        dt = out_ptr.dtype.element_ty
        rho = tl.load(rho_ptr + col, mask=jm, other=0.0)
        hc, mx, inv = _weight_setup(st_ptr, n, cc, cmask, HD, st0, st1, st2, BC, ATTN, LANES)
        if ATTN:
            sn = 1.0  # unused
        else:
            sn = tl.load(s_ptr + n)
        acc = tl.zeros((JPK, BC), dtype=dt)
        for i0 in range(beg, end, BE):
            ee, oke, eve, er, okr, a, coef, yb = _step_rows(
                perm_ptr, env_ptr, rot_ptr, y_ptr, lg_ptr, i0, end, off, m2, rs, rowm, cc,
                cmask, hc, mx, inv, 1.0, sr0, sy0, sy1, sy2, sl0, sl1, SP, BE, BC, ATTN, LANES,
            )  # fmt: skip
            acc = tl.dot(tl.trans(coef), yb * a, acc, input_precision=PREC, out_dtype=dt)
        store_block(out_ptr, acc, rho, sn, n, col, jm, cc, cmask, so0, so1, so2, ATTN)

    @triton.jit
    def _agg_dot_bwd_kernel(
        gout_ptr, y_ptr, rot_ptr, rho_ptr, perm_ptr, ptr_ptr, env_ptr, lg_ptr, st_ptr, s_ptr,
        gy_ptr, grot_ptr, qp_ptr, gsp_ptr,
        col_t, row_t, ea_t, eb_t,
        C, H, HD,
        sgo0, sgo1, sgo2, sy0, sy1, sy2, sr0, sra, srb, sl0, sl1, st0, st1, st2,
        sgy0, sgy1, sgy2, so0, soa, sob, sq0, sq1, sq2, sgs0,
        JP: tl.constexpr, JPK: tl.constexpr, SP: tl.constexpr, BE: tl.constexpr,
        BC: tl.constexpr, HPK: tl.constexpr, LAYOUT: tl.constexpr, ATTN: tl.constexpr,
        LANES: tl.constexpr, PREC: tl.constexpr = "ieee",
    ):  # fmt: skip
        # one program per (destination node n, degree block b): gy rows, storage cotangent
        # entries and the per-(block, edge) partials of q of block b over n's segment
        n, b, beg, end, cc, cmask, col, jm, rs, rowm, m2, ia, ib, off = _dot_setup(
            ptr_ptr, col_t, row_t, ea_t, eb_t, C, sra, srb, JP, JPK, SP, BE, BC, LAYOUT
        )
        dt = gy_ptr.dtype.element_ty
        goff = ia * soa + ib * sob
        rho = tl.load(rho_ptr + col, mask=jm, other=0.0)
        g = tl.load(
            gout_ptr + n * sgo0 + col.to(tl.int64)[:, None] * sgo1 + cc[None, :] * sgo2,
            mask=jm[:, None] & cmask[None, :],
            other=0.0,
        )
        g = g * rho[:, None]
        gt = tl.trans(g)
        hc, mx, inv = _weight_setup(st_ptr, n, cc, cmask, HD, st0, st1, st2, BC, ATTN, LANES)
        if ATTN:
            sn = 1.0  # unused
        else:
            sn = tl.load(s_ptr + n)
        hh = tl.arange(0, HPK)
        # LANES: 0/1 head matrix (BC, HPK), q per head as a tile product (exact products by 0, 1)
        oh = ((hc[:, None] == hh[None, :]) & cmask[:, None]).to(dt)
        gsacc = tl.zeros((BE,), dtype=dt)
        for i0 in range(beg, end, BE):
            ee, oke, eve, er, okr, a, coef, yb = _step_rows(
                perm_ptr, env_ptr, rot_ptr, y_ptr, lg_ptr, i0, end, off, m2, rs, rowm, cc,
                cmask, hc, mx, inv, sn, sr0, sy0, sy1, sy2, sl0, sl1, SP, BE, BC, ATTN, LANES,
            )  # fmt: skip
            tv = tl.dot(coef, g, input_precision=PREC, out_dtype=dt)  # (R, BC)
            tl.store(
                gy_ptr + er[:, None] * sgy0 + rs[:, None] * sgy1 + cc[None, :] * sgy2,
                tv * a,
                mask=okr[:, None] & rowm,
            )
            if LANES:
                grt = tl.dot(yb * a, gt, input_precision=PREC, out_dtype=dt)  # (R, JPK)
                qr = tl.dot(yb * tv, oh, input_precision=PREC, out_dtype=dt)  # (R, HPK)
                qe = tl.reduce(tl.reshape(qr, (BE, SP, HPK)), 1, SUM)  # block b's part of q
                tl.store(
                    qp_ptr + b * sq0 + ee[:, None] * sq1 + hh[None, :] * sq2,
                    qe,
                    mask=oke[:, None] & (hh < H)[None, :],
                )
            else:  # a is one number per row: grot = a·(y @ gᵀ), q = Σ_j coef·(y @ gᵀ)
                pr = tl.dot(yb, gt, input_precision=PREC, out_dtype=dt)  # (R, JPK)
                grt = pr * a
                qr = tl.reduce(coef * pr, 1, SUM)
                qe = tl.reduce(tl.reshape(qr, (BE, SP)), 1, SUM)  # block b's part of q
                tl.store(qp_ptr + b * sq0 + ee * sq1, qe, mask=oke)
                if not ATTN:
                    gsacc += eve * qe
            tl.store(grot_ptr + er[:, None] * so0 + goff, grt, mask=okr[:, None] & m2)
        if not ATTN:
            tl.store(gsp_ptr + b * sgs0 + n, tl.reduce(gsacc, 0, SUM))


# ---------------------------------------------------------------------------- launchers
def launch_fwd(y, rot, rho, perm, row_ptr, env, logits, s, out, stats, t, layout, sr):
    """Run the forward dot kernel (after the statistics pass in attention mode) into ``out``;
    ``t`` = the kernel tables, ``sr`` = the storage's kernel strides."""
    N, C = out.shape[0], y.shape[2]
    attn = logits is not None
    H = logits.shape[1] if attn else 0
    prec = precision(y, "fwd")
    p = pads(t, C, H, prec)
    cm.wrap(_agg_dot_fwd_kernel)[(N, t["nblk"])](
        y, rot, rho, perm, row_ptr, env, logits if attn else y, s if not attn else y, out,
        stats if attn else y,
        t["col"], t["row"], t["ent_a"], t["ent_b"],
        C, C // H if attn else 1,
        *y.stride(), *sr, *(logits.stride() if attn else (0, 0)), *out.stride(),
        *(stats.stride() if attn else (0, 0, 0)),
        JP=t["jp"], JPK=p["JPK"], SP=t["sp"], BE=p["BE"], BC=p["BC"], LAYOUT=layout,
        ATTN=attn, LANES=H > 1, PREC=prec, num_warps=warps(C, prec),
    )  # fmt: skip


def launch_bwd(gout, y, rot, rho, perm, row_ptr, env, logits, stats, s, gy, grot, qp, gsp, t,
               layout, sr, so):  # fmt: skip
    """Run the backward dot kernel: fills gy, grot's entries, qp and (plain mode) gsp."""
    N, C = gout.shape[0], y.shape[2]
    attn = logits is not None
    H = logits.shape[1] if attn else 0
    prec = precision(y, "bwd")
    p = pads(t, C, H, prec)
    cm.wrap(_agg_dot_bwd_kernel)[(N, t["nblk"])](
        gout, y, rot, rho, perm, row_ptr, env, logits if attn else y,
        stats if attn else y, s if not attn else y, gy, grot, qp, gsp,
        t["col"], t["row"], t["ent_a"], t["ent_b"],
        C, H, C // H if attn else 1,
        *gout.stride(), *y.stride(), *sr,
        *(logits.stride() if attn else (0, 0)), *(stats.stride() if attn else (0, 0, 0)),
        *gy.stride(), *so, *qp.stride(), gsp.stride(0) if not attn else 0,
        JP=t["jp"], JPK=p["JPK"], SP=t["sp"], BE=p["BE"], BC=p["BC"], HPK=p["HPK"],
        LAYOUT=layout, ATTN=attn, LANES=H > 1, PREC=prec, num_warps=warps(C, prec),
    )  # fmt: skip
