"""aggregate's op: the dispatch, the ``triton_op`` pair and the public :func:`aggregate`.

The ``triton_op`` pair (forward, closed-form backward) comes with their fakes and autograd; the
math is in the package docstring.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mdband.kernels import _common as cm
from mdband.kernels.aggregate import launch
from mdband.kernels.aggregate.reference import aggregate_bwd_reference, aggregate_reference
from mdband.so3 import storage as st

OP = "mdband::aggregate"
OP_BWD = "mdband::aggregate_bwd"
MAX_CHANNELS = 1024  #: widest C of the kernels (one channel tile per program)


def backend(
    device, dtype, *, lmax: int, channels: int, n_heads: int, mmax: int = 1
) -> tuple[str | None, str]:
    """(backend, reason): "triton", "reference", or None when the op does not apply.

    Shared by the dispatch and :func:`mdband.kernels.capability.spec_for_aggregate`.
    """
    if mmax != 1:
        return None, f"aggregate implements mmax=1 only (got mmax={mmax})"
    if lmax < 0:
        return None, f"lmax must be >= 0 (got {lmax})"
    if n_heads < 0 or (n_heads > 0 and channels % n_heads != 0):
        return None, f"attention needs heads dividing channels (C={channels}, H={n_heads})"
    name = cm.select_backend(device, dtype, triton_ok=channels <= MAX_CHANNELS)
    return name, f"{name} on {torch.device(device).type} ({dtype})"


def _dispatch(y, lmax, logits) -> str:
    H = 0 if logits is None else logits.shape[1]
    decision = backend(y.device, y.dtype, lmax=lmax, channels=y.shape[2], n_heads=H)
    return cm.chosen_backend("aggregate", decision)


@torch.library.triton_op(OP, mutates_args=())
def _aggregate_op(
    y: Tensor,
    rot: Tensor,
    layout: int,
    rot_lmax: int,
    lmax: int,
    rho: Tensor,
    dst: Tensor,
    perm: Tensor,
    row_ptr: Tensor,
    env: Tensor,
    logits: Tensor | None,
    z: Tensor | None,
    s: Tensor | None,
) -> tuple[Tensor, Tensor]:
    N = row_ptr.shape[0] - 1
    cm.check_rot(rot, layout, rot_lmax, lmax, "aggregate")
    if _dispatch(y, lmax, logits) == "reference":
        return aggregate_reference(y, rot, layout, rot_lmax, lmax, rho, dst, N, env, logits, z, s)
    out = y.new_empty(N, st.dim_of(lmax), y.shape[2])
    stats = y.new_empty(N, 2, logits.shape[1]) if logits is not None else y.new_zeros(0)
    if cm.has_no_items(N):
        return out, stats
    t = cm.kernel_tables(layout, rot_lmax, lmax, y.device)
    if logits is not None:
        launch.stats(perm, row_ptr, env, logits, z, stats)
    sr = cm.rot_args(rot, layout)
    launch.walk_fwd(y, rot, rho, perm, row_ptr, env, logits, s, out, stats, t, layout, sr)
    return out, stats


@_aggregate_op.register_fake
def _(y, rot, layout, rot_lmax, lmax, rho, dst, perm, row_ptr, env, logits, z, s):
    N = row_ptr.shape[0] - 1
    out = y.new_empty(N, st.dim_of(lmax), y.shape[2])
    stats = y.new_empty(N, 2, logits.shape[1]) if logits is not None else y.new_empty(0)
    return out, stats


@torch.library.triton_op(OP_BWD, mutates_args=())
def _aggregate_bwd_op(
    gout: Tensor,
    out: Tensor,
    stats: Tensor,
    y: Tensor,
    rot: Tensor,
    layout: int,
    rot_lmax: int,
    lmax: int,
    rho: Tensor,
    dst: Tensor,
    perm: Tensor,
    row_ptr: Tensor,
    env: Tensor,
    logits: Tensor | None,
    z: Tensor | None,
    s: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    N = row_ptr.shape[0] - 1
    C = y.shape[2]
    cm.check_rot(rot, layout, rot_lmax, lmax, "aggregate")
    if _dispatch(y, lmax, logits) == "reference":
        return aggregate_bwd_reference(
            gout, out, stats, y, rot, layout, rot_lmax, lmax, rho, dst, env, logits, z, s
        )
    attn = logits is not None
    H = logits.shape[1] if logits is not None else 0
    E = y.shape[0]
    grot = cm.rot_cotangent(rot, layout, rot_lmax, lmax)
    gy = torch.empty_like(y)
    if attn:
        Q = (gout * out).reshape(N, out.shape[1], H, C // H).sum((1, 3))
        M, S = stats[:, 0], stats[:, 1]
        gz = -(Q * torch.exp(-M) / S).sum(0)
    if cm.has_no_items(N):
        if logits is not None:
            return gy, grot, torch.empty_like(env), torch.empty_like(logits), gz, y.new_zeros(0)
        assert s is not None  # the plain scatter (no attention) takes s
        return gy, grot, torch.empty_like(env), y.new_zeros(0), y.new_zeros(0), torch.empty_like(s)
    t = cm.kernel_tables(layout, rot_lmax, lmax, y.device)
    NB = t["nblk"]
    # per-(edge, block) partials of <gout[dst], msg> (per head with attention), finished below
    qp = y.new_empty(NB, E, H) if attn else y.new_empty(NB, E, 1)
    gsp = y.new_empty(NB, N) if not attn else y
    sr, so = cm.rot_args(rot, layout), cm.rot_args(grot, layout)
    launch.bwd(
        gout,
        y,
        rot,
        rho,
        perm,
        row_ptr,
        env,
        logits,
        stats,
        s,
        gy,
        grot,
        qp,
        gsp,
        t,
        layout,
        sr,
        so,
    )
    # epilogue: the blocks' partials summed by torch reductions (no atomics: deterministic)
    q = qp.sum(0)
    if logits is None:
        assert s is not None  # the plain scatter (no attention) takes s
        return gy, grot, s[dst] * q[:, 0], y.new_zeros(0), y.new_zeros(0), gsp.sum(0)
    inv = torch.reciprocal(S)
    d = torch.exp(logits - M[dst]) * inv[dst] * (q - Q[dst])
    glog = (env * env)[:, None] * d
    genv = (2.0 * env[:, None] * d).sum(1)
    return gy, grot, genv, glog, gz, y.new_zeros(0)


@_aggregate_bwd_op.register_fake
def _(gout, out, stats, y, rot, layout, rot_lmax, lmax, rho, dst, perm, row_ptr, env, logits, z, s):
    e = y.new_empty(0)
    if logits is not None:
        g_mode = (torch.empty_like(logits), torch.empty_like(z), e)
    else:
        g_mode = (e, e, torch.empty_like(s))
    return torch.empty_like(y), torch.empty_like(rot), torch.empty_like(env), *g_mode


def _setup(ctx, inputs, output):
    y, rot, layout, rot_lmax, lmax, rho, dst, perm, row_ptr, env, logits, z, s = inputs
    out, stats = output
    ctx.save_for_backward(out, stats, y, rot, rho, dst, perm, row_ptr, env, logits, z, s)
    ctx.meta = (layout, rot_lmax, lmax)
    ctx.set_materialize_grads(False)  # stats is never differentiated (gout None: zeros below)


def _backward(ctx, gout, _gstats):
    out, stats, y, rot, rho, dst, perm, row_ptr, env, logits, z, s = ctx.saved_tensors
    layout, rot_lmax, lmax = ctx.meta
    if gout is None:
        gout = torch.zeros_like(out)
    gy, grot, genv, glog, gz, gs = torch.ops.mdband.aggregate_bwd(
        gout, out, stats, y, rot, layout, rot_lmax, lmax, rho, dst, perm, row_ptr, env, logits, z, s
    )
    g_mode = (glog, gz, None) if logits is not None else (None, None, gs)  # logits, z, s
    return gy, grot, None, None, None, None, None, None, None, genv, *g_mode


_aggregate_op.register_autograd(_backward, setup_context=_setup)


def aggregate(
    y: torch.Tensor,
    storage,
    lmax: int,
    rho: torch.Tensor,
    dst: torch.Tensor,
    n_nodes: int,
    env: torch.Tensor,
    logits: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    s: torch.Tensor | None = None,
    csr: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Rotate back, rescale, weight and sum per destination: out (n_nodes, (lmax+1)², C).

    ``rho`` is cast to y's dtype; every other float input must already share y's dtype/device.

    Attention mode: give ``logits`` (E, H) and ``z`` (H,) (H divides C). Plain envelope scatter
    (n_atten_head = 0): give ``s`` (N,) instead. ``csr`` = (perm, row_ptr) of ``dst`` if the
    caller already has it (otherwise it is built here: a stable argsort). Differentiable in y,
    the storage's data, env, logits, z and s (not rho).
    """
    rot, layout, rot_lmax = cm.unpack_storage(storage, "aggregate")
    cm.check_rot(rot, layout, rot_lmax, lmax, "aggregate")
    E, dm = y.shape[0], st.reduced_dim(lmax)
    if y.dim() != 3 or y.shape[1] != dm:
        raise ValueError(f"aggregate: y must be (E, {dm}, C) for lmax={lmax}, got {tuple(y.shape)}")
    C = y.shape[2]
    if rot.shape[0] != E or dst.shape[0] != E or env.shape != (E,):
        raise ValueError("aggregate: y, storage, dst and env must have the same number of edges")
    if tuple(rho.shape) != (st.dim_of(lmax),):
        raise ValueError(f"aggregate: rho must be ({st.dim_of(lmax)},)")
    if logits is not None:
        if s is not None or z is None:
            raise ValueError("aggregate: attention mode takes logits and z (and no s)")
        H = logits.shape[1]
        if logits.shape[0] != E or H < 1 or C % H != 0 or tuple(z.shape) != (H,):
            raise ValueError(f"aggregate: logits (E, H) with H | C={C} and z (H,) required")
    elif s is None or tuple(s.shape) != (n_nodes,) or z is not None:
        raise ValueError("aggregate: plain mode takes s (N,) (and no z)")
    rho = rho.to(dtype=y.dtype, device=y.device)
    cm.check_dtypes("aggregate", y=y, storage=rot, env=env, logits=logits, z=z, s=s)
    env = env.contiguous()  # the kernels read env[e] at stride 1 (a column view is not)
    dst = dst.to(torch.int64)
    perm, row_ptr = csr if csr is not None else cm.csr(dst, n_nodes)
    out, _ = _aggregate_op(
        y, rot, layout, rot_lmax, lmax, rho, dst, perm, row_ptr, env, logits, z, s
    )
    return out
