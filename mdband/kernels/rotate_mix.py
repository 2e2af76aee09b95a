"""rotate-mix: rotate node features into each edge's frame and apply the radial degree mixer.

Shapes (C channels, E edges, N nodes, L = ``lmax``, D = (L+1)², Dm = 3L+1, K = (L+1)² + L²)::

    x      (N, D, C)   node features, packed l² + l + m
    src    (E,) int64  source node of each edge
    rot    RotationStorage, BAND (E, 3Ds−2) or DENSE (E, Ds, Ds), built for lmax_s ≥ L
    k      (E, K, R)   per-edge mixer kernel: block |m|=0 ((L+1)×(L+1)) then |m|=1 (L×L); entry
                       (l_in − |m|)(L − |m| + 1) + (l_out − |m|) inside block |m|
    basis  (R, C)      channel basis of the rank-R mixer
    rad    (E, Dm, C)  elementwise radial weights (mode without mixer, ``k=None``)
    y      (E, Dm, C)  edge messages in the local frame, m-major reduced order

    xl[e, (l,m), c]    = Σ_j D[e, l²+l+m, l²+j] · x[src_e, l²+j, c]
    y[e, (l_out,m), c] = Σ_r basis[r,c] Σ_{l_in} k[e, blk(|m|), l_in, l_out, r] · xl[e, (l_in,m), c]
    (or y = xl · rad without the mixer). No cross-m mixing; m = ±1 share the |m| = 1 block.

Accuracy: exact fp32/fp64 FMAs (no TF32, no tensor cores); band and dense storages run the same
arithmetic in the same order, so they agree bitwise. Triton vs the torch reference: rounding only
(≲1e-6 relative in fp32).

Bytes moved per edge (forward, fp32, S = 4 bytes): rotation reads (3D−2)·S (band) or the same
number of scattered dense entries, x[src] D·C·S (L2-resident gather), k K·R·S, y write Dm·C·S.
Backward: edge kernel reads x[src], rot, k, gy (Dm·C·S) and writes the storage cotangent, gk,
per-program basis partials and the mixer's input cotangent (Dm·C·S, scratch); a CSR-by-source node
kernel (one program per node and degree block) reads that cotangent and rot and writes gx
(N·D·C·S in total). No atomics: gx is a deterministic segment sum over the source CSR.
The backward kernels are in :mod:`mdband.kernels._rotate_mix_edge`; ``KERNELS`` picks these or
the by-source "dot" kernels (:mod:`mdband.kernels._rotate_mix_dot`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mdband.kernels import _common as cm
from mdband.kernels import _rotate_mix_dot as dot
from mdband.kernels import _rotate_mix_edge as edge
from mdband.kernels._mixer import mixer_matrix, mixer_size, mixer_tables, scatter_mixer_grad
from mdband.so3 import storage as st

OP = "mdband::rotate_mix"
OP_BWD = "mdband::rotate_mix_bwd"

MAX_CHANNELS = 1024  #: largest channel count of the single-tile kernels (beyond: the reference)
MIXERS = ("degree_channel", "none")  #: mixer modes the op implements
#: warps per program of the forward, backward-edge and backward-node kernels: one warp keeps
#: every channel reduction inside a warp (H200, E = 647,154, L = 3, C = 64: forward 1.5 ms and
#: backward 6.7 ms with one warp, 5.1 and 17.4 ms with four; benchmarks/gpu_warps.py)
WARPS = {"fwd": 1, "edge": 1, "node": 1}
BWD_EDGE = {"EB": 16, "stages": 3}  #: backward edge kernel: edges per program, pipeline stages
#: Triton kernels per pass: "edge" (the kernels below), "dot" (_rotate_mix_dot: by source node,
#: BE edges per step as tl.dot products) or "auto" (_rotate_mix_dot.chosen: the tf32x3 dot for
#: float32 radial rows, as timed there; else "edge"). Same outputs to rounding; read when an op
#: runs (at trace time when compiled)
KERNELS = {"fwd": "edge", "bwd": "auto"}


# ---------------------------------------------------------------------------- references
def rotate_mix_reference(x, src, rot, layout, rot_lmax, lmax, k=None, basis=None, rad=None):
    """Torch reference of the forward (both layouts; differentiable by autograd)."""
    W = cm.row_matrix(rot, layout, rot_lmax, lmax)
    xl = torch.bmm(W, x.index_select(0, src))
    if k is None:
        return xl * rad
    return torch.einsum("eoiq,eic,qc->eoc", mixer_matrix(k, lmax), xl, basis)


def rotate_mix_bwd_reference(gy, x, src, rot, layout, rot_lmax, lmax, k, basis, rad):
    """Closed-form backward: (gx, grot, gk, gbasis, grad) (absent inputs → empty tensors)."""
    W = cm.row_matrix(rot, layout, rot_lmax, lmax)
    xs = x.index_select(0, src)
    xl = torch.bmm(W, xs)
    if k is None:
        gxl = gy * rad
        grad = gy * xl
        gk, gb = gy.new_zeros(0), gy.new_zeros(0)
    else:
        Km = mixer_matrix(k, lmax)
        gxl = torch.einsum("eoiq,eoc,qc->eic", Km, gy, basis)
        gk = scatter_mixer_grad(torch.einsum("eoc,eic,qc->eoiq", gy, xl, basis), lmax)
        gb = torch.einsum("eoiq,eoc,eic->qc", Km, gy, xl)
        grad = gy.new_zeros(0)
    grot = cm.rot_grad_from_matrix(torch.bmm(gxl, xs.transpose(1, 2)), layout, rot_lmax, lmax)
    gx = torch.zeros_like(x).index_add(0, src, torch.bmm(W.transpose(1, 2), gxl))
    return gx, grot, gk, gb, grad


# ---------------------------------------------------------------------------- Triton kernels
# Every kernel walks the degree blocks b = 0..L (static), with the three band rows of a block as
# the slot axis (SP = 4 lanes, slot 3 empty) and the 2l+1 columns as the lane axis (JP lanes).
# Storage entries are addressed only through storage.kernel_tables (a, b index pairs).
if cm.TRITON_AVAILABLE:
    triton, tl = cm.triton, cm.tl
    block_tables, entry_index, node_block = cm.block_tables, cm.entry_index, cm.node_block
    SUM = cm.SUM

    _rotated_block = edge.rotated_block

    @triton.jit
    def _rm_fwd_kernel(
        x_ptr, src_ptr, rot_ptr, k_ptr, b_ptr, rad_ptr, y_ptr,
        col_t, row_t, ea_t, eb_t, ki_t, or_t,
        C,
        sx0, sx1, sx2, sr0, sra, srb, sk0, sk1, sk2, sb0, sb1, sd0, sd1, sd2, sy0, sy1, sy2,
        NB: tl.constexpr, JP: tl.constexpr, SP: tl.constexpr, LP: tl.constexpr,
        R: tl.constexpr, BC: tl.constexpr, LAYOUT: tl.constexpr, MIX: tl.constexpr,
    ):  # fmt: skip
        e = tl.program_id(0).to(tl.int64)
        cc = tl.arange(0, BC)
        cmask = cc < C
        ss = tl.arange(0, SP)
        tt = tl.arange(0, LP)
        node = tl.load(src_ptr + e).to(tl.int64)
        y3 = tl.full((SP, LP, BC), 0.0, y_ptr.dtype.element_ty)
        for b in tl.static_range(NB):
            xl, xb, rs, rm, m2, ia, ib = _rotated_block(
                x_ptr, rot_ptr, node, e, b, col_t, row_t, ea_t, eb_t, cc, cmask,
                sx0, sx1, sx2, sr0, sra, srb, JP, SP, LAYOUT,
            )  # fmt: skip
            if MIX:
                kt = tl.load(ki_t + (b * SP + ss)[:, None] * LP + tt[None, :]).to(tl.int64)
                km = kt >= 0
                for q in tl.static_range(R):
                    kv = tl.load(k_ptr + e * sk0 + kt * sk1 + q * sk2, mask=km, other=0.0)
                    bq = tl.load(b_ptr + q * sb0 + cc * sb1, mask=cmask, other=0.0)
                    y3 += kv[:, :, None] * (bq[None, :] * xl)[:, None, :]
            else:
                rd = tl.load(
                    rad_ptr + e * sd0 + rs[:, None] * sd1 + cc[None, :] * sd2, mask=rm, other=0.0
                )
                tl.store(y_ptr + e * sy0 + rs[:, None] * sy1 + cc[None, :] * sy2, xl * rd, mask=rm)
        if MIX:
            orow = tl.load(or_t + ss[:, None] * LP + tt[None, :]).to(tl.int64)
            om = orow >= 0
            tl.store(
                y_ptr + e * sy0 + orow[:, :, None] * sy1 + cc[None, None, :] * sy2,
                y3,
                mask=om[:, :, None] & cmask[None, None, :],
            )


# ---------------------------------------------------------------------------- dispatch
def backend(device, dtype, *, lmax: int, mmax: int = 1, mixer: str = "degree_channel",
            rank: int = 1, channels: int | None = None) -> tuple[str | None, str]:  # fmt: skip
    """(backend, reason): "triton", "reference", or None when the op does not apply.

    The predicate both the dispatch and ``capability.spec_for_rotate_mix`` use.
    """
    if mmax != 1:
        return None, f"rotate_mix implements mmax=1 only (got mmax={mmax})"
    if mixer not in MIXERS:
        return None, f"rotate_mix implements mixers {MIXERS} (got {mixer!r})"
    if mixer == "degree_channel" and rank < 1:
        return None, f"degree_channel mixer needs rank >= 1 (got {rank})"
    if lmax < 0:
        return None, f"lmax must be >= 0 (got {lmax})"
    ok = channels is None or channels <= MAX_CHANNELS
    name = cm.select_backend(device, dtype, triton_ok=ok)
    return name, f"{name} on {torch.device(device).type} ({dtype})"


def _dispatch(x, lmax, k) -> str:
    decision = backend(
        x.device,
        x.dtype,
        lmax=lmax,
        mixer="none" if k is None else "degree_channel",
        rank=1 if k is None else k.shape[2],
        channels=x.shape[2],
    )
    return cm.chosen_backend("rotate_mix", decision)


_s3, _s2 = dot.strides3, dot.strides2  # strides of an optional 3-d / 2-d input (0 if absent)


def _rot_tables(rot, layout, rot_lmax, lmax):
    return cm.kernel_tables(layout, rot_lmax, lmax, rot.device)


@torch.library.triton_op(OP, mutates_args=())
def _rotate_mix_op(
    x: Tensor, src: Tensor, rot: Tensor, layout: int, rot_lmax: int, lmax: int,
    k: Tensor | None, basis: Tensor | None, rad: Tensor | None, perm: Tensor, row_ptr: Tensor,
) -> Tensor:  # fmt: skip
    E, C = src.shape[0], x.shape[2]
    dm = st.reduced_dim(lmax)
    cm.check_rot(rot, layout, rot_lmax, lmax, "rotate_mix")
    if _dispatch(x, lmax, k) == "reference":
        return rotate_mix_reference(x, src, rot, layout, rot_lmax, lmax, k, basis, rad)
    y = x.new_empty(E, dm, C)
    if cm.has_no_items(E):
        return y
    t = _rot_tables(rot, layout, rot_lmax, lmax)
    mt = mixer_tables(lmax, str(x.device))
    mix = k is not None
    kk = k if mix else y
    bb = basis if mix else y
    rd = rad if not mix else y
    R = k.shape[2] if mix else 1
    sr = cm.rot_args(rot, layout)
    if dot.chosen(KERNELS, "fwd", x, mix) == "dot":
        return dot.launch_fwd(x, rot, k, basis, rad, perm, row_ptr, y, t, mt, layout, sr)
    cm.wrap(_rm_fwd_kernel)[(E,)](
        x, src, rot, kk, bb, rd, y,
        t["col"], t["row"], t["ent_a"], t["ent_b"], mt["kidx"], mt["orow"],
        C,
        *x.stride(), *sr, *_s3(kk), *_s2(bb), *_s3(rd), *y.stride(),
        NB=t["nblk"], JP=t["jp"], SP=t["sp"], LP=mt["lp"], R=R, BC=cm.next_pow2(C),
        num_warps=WARPS["fwd"],
        LAYOUT=layout, MIX=mix,
    )  # fmt: skip
    return y


@_rotate_mix_op.register_fake
def _(x, src, rot, layout, rot_lmax, lmax, k, basis, rad, perm, row_ptr):
    return x.new_empty(src.shape[0], st.reduced_dim(lmax), x.shape[2])


@torch.library.triton_op(OP_BWD, mutates_args=())
def _rotate_mix_bwd_op(
    gy: Tensor, x: Tensor, src: Tensor, rot: Tensor, layout: int, rot_lmax: int, lmax: int,
    k: Tensor | None, basis: Tensor | None, rad: Tensor | None, perm: Tensor, row_ptr: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    C, E = x.shape[2], src.shape[0]
    cm.check_rot(rot, layout, rot_lmax, lmax, "rotate_mix")
    if _dispatch(x, lmax, k) == "reference":
        return rotate_mix_bwd_reference(gy, x, src, rot, layout, rot_lmax, lmax, k, basis, rad)
    mix = k is not None
    grot = cm.rot_cotangent(rot, layout, rot_lmax, lmax)
    gx = torch.empty_like(x)
    gk = torch.empty_like(k) if mix else x.new_zeros(0)
    grad = torch.empty_like(rad) if not mix else x.new_zeros(0)
    R = k.shape[2] if mix else 1
    EB = 4 if cm.interpret_mode() else BWD_EDGE["EB"]
    nprog = (E + EB - 1) // EB
    gbp = x.new_zeros(nprog, R, C) if mix else x.new_zeros(0)
    if cm.has_no_items(E):
        gx.zero_()
        return gx, grot, gk, gbp.sum(0) if mix else gbp, grad
    t = _rot_tables(rot, layout, rot_lmax, lmax)
    mt = mixer_tables(lmax, str(x.device))
    sr = cm.rot_args(rot, layout)
    so = cm.rot_args(grot, layout)
    if dot.chosen(KERNELS, "bwd", x, mix) == "dot":
        return dot.launch_bwd(gy, x, rot, k, basis, rad, perm, row_ptr, gx, grot, gk, grad, t,
                              mt, layout, sr, so)  # fmt: skip
    warps = (WARPS["edge"], WARPS["node"])
    edge.launch_bwd(gy, x, src, rot, k, basis, rad, perm, row_ptr, gx, grot, gk, gbp, grad, t, mt,
                    layout, sr, so, EB, warps, BWD_EDGE["stages"])  # fmt: skip
    return gx, grot, gk, gbp.sum(0) if mix else gbp, grad


@_rotate_mix_bwd_op.register_fake
def _(gy, x, src, rot, layout, rot_lmax, lmax, k, basis, rad, perm, row_ptr):
    e = x.new_empty(0)
    g_mode = (torch.empty_like(k), torch.empty_like(basis), e) if k is not None else (
        e, e, torch.empty_like(rad))  # fmt: skip
    return torch.empty_like(x), torch.empty_like(rot), *g_mode


def _setup(ctx, inputs, output):
    x, src, rot, layout, rot_lmax, lmax, k, basis, rad, perm, row_ptr = inputs
    ctx.save_for_backward(x, src, rot, k, basis, rad, perm, row_ptr)
    ctx.meta = (layout, rot_lmax, lmax)


def _backward(ctx, gy):
    x, src, rot, k, basis, rad, perm, row_ptr = ctx.saved_tensors
    layout, rot_lmax, lmax = ctx.meta
    gx, grot, gk, gb, grad = torch.ops.mdband.rotate_mix_bwd(
        gy, x, src, rot, layout, rot_lmax, lmax, k, basis, rad, perm, row_ptr
    )
    g_mode = (gk, gb, None) if k is not None else (None, None, grad)  # k, basis, rad
    return gx, None, grot, None, None, None, *g_mode, None, None


_rotate_mix_op.register_autograd(_backward, setup_context=_setup)


# ---------------------------------------------------------------------------- public API
def rotate_mix(
    x: torch.Tensor,
    src: torch.Tensor,
    storage,
    lmax: int,
    k: torch.Tensor | None = None,
    basis: torch.Tensor | None = None,
    rad: torch.Tensor | None = None,
    csr: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Rotate ``x[src]`` into each edge frame and mix degrees: y (E, 3·lmax+1, C).

    Parameters
    ----------
    x : (N, (lmax+1)², C) node features.
    src : (E,) int64 source node per edge.
    storage : RotationStorage (BAND or DENSE) built for lmax_s ≥ ``lmax``; read via ``require``.
    lmax : degree of this consumer.
    k, basis : (E, K, R) mixer kernel and (R, C) channel basis (mode degree_channel), or
    rad : (E, 3·lmax+1, C) elementwise weights with ``k=None`` (mode none).
    csr : (perm, row_ptr) of ``src`` over the N nodes (:func:`~mdband.kernels._common.csr`), if
        the caller has it; the backward sums per source node with it.
    """
    rot, layout, rot_lmax = cm.unpack_storage(storage, "rotate_mix")
    cm.check_rot(rot, layout, rot_lmax, lmax, "rotate_mix")
    cm.check_dtypes("rotate_mix", x=x, storage=rot, k=k, basis=basis, rad=rad)
    D, dm = st.dim_of(lmax), st.reduced_dim(lmax)
    if x.dim() != 3 or x.shape[1] != D:
        raise ValueError(f"rotate_mix: x must be (N, {D}, C) for lmax={lmax}, got {tuple(x.shape)}")
    E, C = src.shape[0], x.shape[2]
    if rot.shape[0] != E:
        raise ValueError(f"rotate_mix: storage has {rot.shape[0]} edges, src has {E}")
    if k is None:
        if rad is None or tuple(rad.shape) != (E, dm, C):
            raise ValueError(f"rotate_mix without mixer needs rad of shape {(E, dm, C)}")
        if basis is not None:
            raise ValueError("rotate_mix: basis given without k")
    else:
        if rad is not None:
            raise ValueError("rotate_mix: give either k/basis (mixer) or rad, not both")
        K = mixer_size(lmax)
        if k.dim() != 3 or tuple(k.shape[:2]) != (E, K):
            raise ValueError(f"rotate_mix: k must be (E, {K}, R), got {tuple(k.shape)}")
        if basis is None or tuple(basis.shape) != (k.shape[2], C):
            raise ValueError(f"rotate_mix: basis must be ({k.shape[2]}, {C})")
    src = src.to(torch.int64)
    perm, row_ptr = csr if csr is not None else cm.csr(src, x.shape[0])
    return _rotate_mix_op(x, src, rot, layout, rot_lmax, lmax, k, basis, rad, perm, row_ptr)
