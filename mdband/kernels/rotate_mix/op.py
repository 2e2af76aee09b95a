"""rotate_mix's op: the dispatch, the ``triton_op`` pair and the public :func:`rotate_mix`.

The ``triton_op`` pair (forward, closed-form backward) comes with their fakes and autograd; the
math is in the package docstring.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mdband.kernels import _common as cm
from mdband.kernels.rotate_mix import launch
from mdband.kernels.rotate_mix.mixer import mixer_size, mixer_tables
from mdband.kernels.rotate_mix.reference import rotate_mix_bwd_reference, rotate_mix_reference
from mdband.so3 import storage as st

OP = "mdband::rotate_mix"
OP_BWD = "mdband::rotate_mix_bwd"
MAX_CHANNELS = 1024  #: largest channel count of the single-tile kernels (beyond: the reference)
MIXERS = ("degree_channel", "none")  #: mixer modes the op implements


def backend(
    device,
    dtype,
    *,
    lmax: int,
    mmax: int = 1,
    mixer: str = "degree_channel",
    rank: int = 1,
    channels: int | None = None,
) -> tuple[str | None, str]:
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


@torch.library.triton_op(OP, mutates_args=())
def _rotate_mix_op(
    x: Tensor,
    src: Tensor,
    rot: Tensor,
    layout: int,
    rot_lmax: int,
    lmax: int,
    k: Tensor | None,
    basis: Tensor | None,
    rad: Tensor | None,
    perm: Tensor,
    row_ptr: Tensor,
) -> Tensor:
    E, C = src.shape[0], x.shape[2]
    cm.check_rot(rot, layout, rot_lmax, lmax, "rotate_mix")
    if _dispatch(x, lmax, k) == "reference":
        return rotate_mix_reference(x, src, rot, layout, rot_lmax, lmax, k, basis, rad)
    y = x.new_empty(E, st.reduced_dim(lmax), C)
    if cm.has_no_items(E):
        return y
    t = cm.kernel_tables(layout, rot_lmax, lmax, rot.device)
    mt = mixer_tables(lmax, str(x.device))
    launch.fwd(x, src, rot, k, basis, rad, y, t, mt, layout, cm.rot_args(rot, layout))
    return y


@_rotate_mix_op.register_fake
def _(x, src, rot, layout, rot_lmax, lmax, k, basis, rad, perm, row_ptr):
    return x.new_empty(src.shape[0], st.reduced_dim(lmax), x.shape[2])


@torch.library.triton_op(OP_BWD, mutates_args=())
def _rotate_mix_bwd_op(
    gy: Tensor,
    x: Tensor,
    src: Tensor,
    rot: Tensor,
    layout: int,
    rot_lmax: int,
    lmax: int,
    k: Tensor | None,
    basis: Tensor | None,
    rad: Tensor | None,
    perm: Tensor,
    row_ptr: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    C, E = x.shape[2], src.shape[0]
    cm.check_rot(rot, layout, rot_lmax, lmax, "rotate_mix")
    if _dispatch(x, lmax, k) == "reference":
        return rotate_mix_bwd_reference(gy, x, src, rot, layout, rot_lmax, lmax, k, basis, rad)
    mix = k is not None
    grot = cm.rot_cotangent(rot, layout, rot_lmax, lmax)
    gx = torch.empty_like(x)
    gk = torch.empty_like(k) if k is not None else x.new_zeros(0)
    if mix:
        grad = x.new_zeros(0)
    else:
        assert rad is not None  # the mode without k takes rad
        grad = torch.empty_like(rad)
    R = k.shape[2] if k is not None else 1
    eb = launch.edge_block()
    gbp = x.new_zeros((E + eb - 1) // eb, R, C) if mix else x.new_zeros(0)
    if cm.has_no_items(E):
        gx.zero_()
        return gx, grot, gk, gbp.sum(0) if mix else gbp, grad
    t = cm.kernel_tables(layout, rot_lmax, lmax, rot.device)
    sr, so = cm.rot_args(rot, layout), cm.rot_args(grot, layout)
    if launch.bwd_kernels(x, mix) == "dot":
        launch.dot_bwd(gy, x, rot, rad, perm, row_ptr, gx, grot, grad, t, layout, sr, so)
        return gx, grot, gk, gbp, grad
    mt = mixer_tables(lmax, str(x.device))
    launch.edge_bwd(
        gy,
        x,
        src,
        rot,
        k,
        basis,
        rad,
        perm,
        row_ptr,
        gx,
        grot,
        gk,
        gbp,
        grad,
        t,
        mt,
        layout,
        sr,
        so,
    )
    return gx, grot, gk, gbp.sum(0) if mix else gbp, grad


@_rotate_mix_bwd_op.register_fake
def _(gy, x, src, rot, layout, rot_lmax, lmax, k, basis, rad, perm, row_ptr):
    e = x.new_empty(0)
    if k is not None:
        g_mode = (torch.empty_like(k), torch.empty_like(basis), e)
    else:
        g_mode = (e, e, torch.empty_like(rad))
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
