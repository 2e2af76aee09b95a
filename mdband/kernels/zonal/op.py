"""zonal_embed's op: the dispatch, the launches, the ``triton_op`` pair and the public function.

The launches follow the tuning table's ``zonal`` record; the ``triton_op`` pair (forward,
closed-form backward) comes with their fakes and autograd; the public function is
:func:`zonal_embed` (package docstring: the math).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.kernels.zonal.reference import zonal_embed_bwd_reference, zonal_embed_reference
from mdband.so3 import storage as st

if cm.TRITON_AVAILABLE:
    from mdband.kernels.zonal.kernels import (
        zonal_dot_bwd_kernel,
        zonal_fwd_kernel,
        zonal_walk_bwd_kernel,
    )

OP = "mdband::zonal_embed"
OP_BWD = "mdband::zonal_embed_bwd"

MAX_CHANNELS = 1024


def backend(device, dtype, *, lmax: int, channels: int | None = None) -> tuple[str | None, str]:
    """(backend, reason) shared by the dispatch and ``capability.spec_for_zonal_embed``."""
    if lmax < 0:
        return None, f"lmax must be >= 0 (got {lmax})"
    ok = channels is None or channels <= MAX_CHANNELS
    name = cm.select_backend(device, dtype, triton_ok=ok)
    return name, f"{name} on {torch.device(device).type} ({dtype})"


def bwd_kernel(radial) -> str:
    """Return the backward kernel (``"dot"`` or ``"walk"``) the tuning table picks for ``radial``.

    "auto" is the tf32x3 dot where TF32 tensor cores run it (float32), else the walk.
    """
    choice = tuning.current().zonal.bwd
    tensor_cores = radial.dtype == torch.float32 and cm.has_tf32_cores(radial.device)
    return "dot" if choice == "auto" and tensor_cores else "walk"


def _dispatch(radial, lmax) -> str:
    decision = backend(radial.device, radial.dtype, lmax=lmax, channels=radial.shape[2])
    return cm.chosen_backend("zonal_embed", decision)


@torch.library.triton_op(OP, mutates_args=())
def _zonal_op(
    rot: Tensor,
    layout: int,
    rot_lmax: int,
    lmax: int,
    radial: Tensor,
    dst: Tensor,
    perm: Tensor,
    row_ptr: Tensor,
    s: Tensor,
) -> Tensor:
    N = row_ptr.shape[0] - 1
    C = radial.shape[2]
    cm.check_rot(rot, layout, rot_lmax, lmax, "zonal_embed")
    if _dispatch(radial, lmax) == "reference":
        return zonal_embed_reference(rot, layout, rot_lmax, lmax, radial, dst, s, N)
    out = radial.new_empty(N, st.dim_of(lmax), C)
    if cm.has_no_items(N):
        return out
    t = cm.kernel_tables(layout, rot_lmax, lmax, radial.device)
    cm.wrap(zonal_fwd_kernel)[(N,)](
        rot,
        radial,
        perm,
        row_ptr,
        s,
        out,
        t["col"],
        t["ent_a"],
        t["ent_b"],
        C,
        *cm.rot_args(rot, layout),
        *radial.stride(),
        *out.stride(),
        N_BLOCKS=t["nblk"],
        COL_LANES=t["jp"],
        SLOT_LANES=t["sp"],
        BLOCK_CHANNELS=cm.next_pow2(C),
        LAYOUT=layout,
    )
    return out


@_zonal_op.register_fake
def _(rot, layout, rot_lmax, lmax, radial, dst, perm, row_ptr, s):
    return radial.new_empty(row_ptr.shape[0] - 1, st.dim_of(lmax), radial.shape[2])


@torch.library.triton_op(OP_BWD, mutates_args=())
def _zonal_bwd_op(
    gout: Tensor,
    rot: Tensor,
    layout: int,
    rot_lmax: int,
    lmax: int,
    radial: Tensor,
    dst: Tensor,
    perm: Tensor,
    row_ptr: Tensor,
    s: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    N = row_ptr.shape[0] - 1
    C = radial.shape[2]
    cm.check_rot(rot, layout, rot_lmax, lmax, "zonal_embed")
    if _dispatch(radial, lmax) == "reference":
        return zonal_embed_bwd_reference(gout, rot, layout, rot_lmax, lmax, radial, dst, s)
    grot = rot.new_zeros(rot.shape)
    grad = torch.empty_like(radial)
    gs = torch.empty_like(s)
    if cm.has_no_items(N):
        return grot, grad, gs
    t = cm.kernel_tables(layout, rot_lmax, lmax, radial.device)
    args = (
        gout,
        rot,
        radial,
        perm,
        row_ptr,
        s,
        grot,
        grad,
        gs,
        t["col"],
        t["ent_a"],
        t["ent_b"],
        C,
        *gout.stride(),
        *cm.rot_args(rot, layout),
        *radial.stride(),
        *cm.rot_args(grot, layout),
        *grad.stride(),
    )
    meta = dict(N_BLOCKS=t["nblk"], COL_LANES=t["jp"], SLOT_LANES=t["sp"], LAYOUT=layout)
    if bwd_kernel(radial) == "dot":
        zt = tuning.current().zonal
        cm.wrap(zonal_dot_bwd_kernel)[(N,)](
            *args,
            **meta,
            BLOCK_CHANNELS=max(16, cm.next_pow2(C)),
            DOT_COLS=max(16, t["jp"]),
            BLOCK_EDGES=zt.dot_edges,
            num_warps=zt.dot_warps,
        )
    else:
        cm.wrap(zonal_walk_bwd_kernel)[(N,)](*args, **meta, BLOCK_CHANNELS=cm.next_pow2(C))
    return grot, grad, gs


@_zonal_bwd_op.register_fake
def _(gout, rot, layout, rot_lmax, lmax, radial, dst, perm, row_ptr, s):
    return torch.empty_like(rot), torch.empty_like(radial), torch.empty_like(s)


def _setup(ctx, inputs, output):
    rot, layout, rot_lmax, lmax, radial, dst, perm, row_ptr, s = inputs
    ctx.save_for_backward(rot, radial, dst, perm, row_ptr, s)
    ctx.meta = (layout, rot_lmax, lmax)


def _backward(ctx, gout):
    rot, radial, dst, perm, row_ptr, s = ctx.saved_tensors
    layout, rot_lmax, lmax = ctx.meta
    grot, grad, gs = torch.ops.mdband.zonal_embed_bwd(
        gout, rot, layout, rot_lmax, lmax, radial, dst, perm, row_ptr, s
    )
    return grot, None, None, None, grad, None, None, None, gs


_zonal_op.register_autograd(_backward, setup_context=_setup)


def zonal_embed(
    storage,
    radial: torch.Tensor,
    dst: torch.Tensor,
    s: torch.Tensor,
    csr: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """GIE zonal scatter: out (N, (L+1)², C), L = radial.shape[1] − 1, N = s.shape[0].

    Differentiable in the storage's data, ``radial`` and ``s``. ``csr`` = (perm, row_ptr) of
    ``dst`` if the caller already has it.
    """
    rot, layout, rot_lmax = cm.unpack_storage(storage, "zonal_embed")
    if radial.dim() != 3:
        raise ValueError(f"zonal_embed: radial must be (E, L+1, C), got {tuple(radial.shape)}")
    lmax = radial.shape[1] - 1
    cm.check_rot(rot, layout, rot_lmax, lmax, "zonal_embed")
    E = radial.shape[0]
    if rot.shape[0] != E or dst.shape[0] != E:
        raise ValueError("zonal_embed: storage, radial and dst must have the same number of edges")
    if s.dim() != 1:
        raise ValueError("zonal_embed: s must be (N,)")
    cm.check_dtypes("zonal_embed", radial=radial, storage=rot, s=s)
    dst = dst.to(torch.int64)
    perm, row_ptr = csr if csr is not None else cm.csr(dst, s.shape[0])
    return _zonal_op(rot, layout, rot_lmax, lmax, radial, dst, perm, row_ptr, s)
