"""aggregate ("flash" aggregation): rotate edge messages back, weight them and sum per destination.

Shapes (C channels, E edges, N nodes, H heads, L = ``lmax``, D = (L+1)², Dm = 3L+1)::

    y      (E, Dm, C)  edge messages in the local frame (m-major reduced order)
    rot    RotationStorage, BAND or DENSE, built for lmax_s ≥ L
    rho    (D,)        rescale per packed column (``storage.rotate_inv_rescale``)
    dst    (E,) int64  destination node (unsorted allowed; the wrapper builds a CSR)
    env    (E,)        envelope
    logits (E, H), z (H,)   attention logits and null weight (softplus'ed + 1e-7), or
    s      (N,)        node scale (inv_sqrt_deg) of the plain envelope scatter (no attention)
    out    (N, D, C)

    msg[e, l²+j, c] = rho[l²+j] · Σ_m D[e, l²+l+m, l²+j] · y[e, (l,m), c]
    attention:  w = env² · exp(logit);  α[e,h] = w[e,h] / (z_h + Σ_{e': dst=n} w[e',h])
                out[n, :, c] = Σ_{e: dst=n} α[e, c // (C/H)] · msg[e, :, c]
    plain:      out[n] = s[n] · Σ_{e: dst=n} env_e · msg_e

The softmax is max-shifted per (node, head): the running max starts at log z, so the null weight
enters as exp(log z − max); nodes without edges give 0 and large logits do not overflow.

Accuracy: exact fp32/fp64 FMAs and IEEE reciprocals; exp/log are Triton's (≤ 2 ulp in fp32).
Band and dense storages are bitwise identical (same code path, same order); vs the torch
reference: rounding only. Deterministic: no atomics; every sum has a fixed order.

Parallel decomposition (NB = L+1 degree blocks: block b = degree l = b, its 2l+1 packed columns
and ≤ 3 reduced rows). Attention first runs a statistics pass, one program per node (BE edges
of its CSR segment at a time) writing (M, S) = ``stats``. Forward and backward then run one
program per (destination node n, degree block b), grid (N, NB), that loads what depends on
(n, b) only (tables, rho, stats, gout[n, block b]·rho) once and walks n's segment in CSR order
doing block b's part of each edge: out[n, block b]; backward: gy rows, storage entries and the
edge's per-block partial of q = <gout[dst], msg> (per head; plain mode also per-(block, node)
partials of gs) in an (NB, E, H) scratch that a torch epilogue sums in block order to finish
glogits, genv (and gs). Few warps per program (one for C ≤ 64 at L = 3): the walks are
latency-bound, so many programs share an SM; the forward walk loads edge i + 1 before it works
on edge i (``WALK``; the walks are in :mod:`mdband.kernels._aggregate_walk`). ``KERNELS``
switches either pass to the "dot" kernels of :mod:`mdband.kernels._aggregate_dot` (same
programs, BE edges per step as tl.dot tile products instead of per-edge reductions; same
scratch and epilogue).

Bytes moved per edge (fp32, S = 4): y Dm·C·S and the rotation (3D−2)·S (band; as many scattered
dense entries), each read by one program only, perm 8, env/logits (1+H)·S per block program
(mostly cache hits); out N·D·C·S in total. The backward also reads gout (N·D·C·S) and writes gy
(Dm·C·S), the storage cotangent and NB·H·S (plain: NB·S) of partials for the epilogue. No dense
(E, D, D) buffer for the band.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mdband.kernels import _aggregate_dot as dot
from mdband.kernels import _common as cm
from mdband.so3 import storage as st

OP = "mdband::aggregate"
OP_BWD = "mdband::aggregate_bwd"

MAX_CHANNELS = 1024


# ---------------------------------------------------------------------------- references
def _msg(y, rot, layout, rot_lmax, lmax, rho):
    W = cm.row_matrix(rot, layout, rot_lmax, lmax)
    return W, rho[None, :, None] * torch.bmm(W.transpose(1, 2), y)


def _softmax_stats(logits, env, z, dst, N):
    """Segment max M (N, H) (detached: α does not depend on it) and shifted sum S (N, H)."""
    E, H = logits.shape
    lz = torch.log(z)
    M = lz.expand(N, H).clone()
    M = M.scatter_reduce(0, dst[:, None].expand(E, H), logits.detach(), "amax", include_self=True)
    w = env[:, None] ** 2 * torch.exp(logits - M[dst])
    S = torch.exp(lz - M).index_add(0, dst, w)
    return M, S, w


def aggregate_reference(y, rot, layout, rot_lmax, lmax, rho, dst, N, env, logits, z, s):
    """Torch reference of the forward: (out (N, D, C), stats (N, 2, H) or empty)."""
    _, msg = _msg(y, rot, layout, rot_lmax, lmax, rho)
    D, C = msg.shape[1], msg.shape[2]
    out = msg.new_zeros(N, D, C)
    if logits is None:
        out = out.index_add(0, dst, env[:, None, None] * msg)
        return out * s[:, None, None], y.new_zeros(0)
    H = logits.shape[1]
    M, S, w = _softmax_stats(logits, env, z, dst, N)
    alpha = w / S[dst]
    ac = alpha.repeat_interleave(C // H, dim=1)
    out = out.index_add(0, dst, ac[:, None, :] * msg)
    return out, torch.stack([M, S], dim=1)


def aggregate_bwd_reference(
    gout, out, stats, y, rot, layout, rot_lmax, lmax, rho, dst, env, logits, z, s
):
    """Closed-form backward: (gy, grot, genv, glogits, gz, gs) (absent → empty tensors)."""
    W, msg = _msg(y, rot, layout, rot_lmax, lmax, rho)
    E, D, C = msg.shape
    N = gout.shape[0]
    gsel = gout[dst]
    if logits is None:
        q = (gsel * msg).sum((1, 2))
        gmsg = (s[dst] * env)[:, None, None] * gsel
        genv = s[dst] * q
        gs = gout.new_zeros(N).index_add(0, dst, env * q)
        glog, gz = y.new_zeros(0), y.new_zeros(0)
    else:
        H = logits.shape[1]
        HD = C // H
        M, S = stats[:, 0], stats[:, 1]
        ap = torch.exp(logits - M[dst]) / S[dst]
        alpha = env[:, None] ** 2 * ap
        gmsg = alpha.repeat_interleave(HD, dim=1)[:, None, :] * gsel
        q = (gsel * msg).reshape(E, D, H, HD).sum((1, 3))
        Q = (gout * out).reshape(N, D, H, HD).sum((1, 3))
        d = ap * (q - Q[dst])
        glog = env[:, None] ** 2 * d
        genv = (2.0 * env[:, None] * d).sum(1)
        gz = -(Q * torch.exp(-M) / S).sum(0)
        gs = y.new_zeros(0)
    gmr = rho[None, :, None] * gmsg
    gy = torch.bmm(W, gmr)
    grot = cm.rot_grad_from_matrix(torch.bmm(y, gmr.transpose(1, 2)), layout, rot_lmax, lmax)
    return gy, grot, genv, glog, gz, gs


# ---------------------------------------------------------------------------- Triton kernels
if cm.TRITON_AVAILABLE:
    from mdband.kernels._aggregate_walk import _agg_bwd_kernel, _agg_fwd_kernel, _agg_stats_kernel


# ---------------------------------------------------------------------------- dispatch
#: edges per step of the softmax-statistics pass
STATS_EDGES = 32
#: Triton kernels per pass: "walk" (the kernels above, one edge at a time), "dot"
#: (:mod:`mdband.kernels._aggregate_dot`, BE edges per step as tl.dot products) or "auto"
#: ("dot" where its tl.dot is tf32x3 on tensor cores, i.e. float32, else "walk"). Same outputs
#: to rounding. Read when an op runs (at trace time when compiled). Timed on an H200
#: (``benchmarks/gpu_warps.py``, 2026-12-03): the tf32x3 dot backward is faster than the walk
#: (L = 3, C = 64: 5.22 against 6.0-6.4 ms fwd + bwd; L = 2, C = 32: 2.97 against 4.3); the
#: dot forward is not timed faster than the prefetching walk.
KERNELS = {"fwd": "walk", "bwd": "auto"}


#: launch of the walk kernels: warps per program (None: :func:`_warps`), software-pipeline
#: stages of their edge loops (3 is Triton's default; ``benchmarks/gpu_warps.py`` sweeps both)
#: and per pass ``prefetch``: the walk issues edge i + 1's loads before edge i's work (and
#: stores), the same values bit for bit. On the H200 (2026-12-03, 647,154 edges, one head) the
#: forward's prefetch took 1.27 → 1.07 ms (L = 3, C = 64) and 0.69 → 0.65 ms (L = 2, C = 32);
#: the backward's 5.32 → 5.30 and 3.95 → 4.09 ms: on for the forward only
WALK = {"warps": None, "stages": 3, "prefetch": {"fwd": True, "bwd": False}}


def _warps(C: int, jp: int) -> int:
    """Warps of a (node, degree block) walk program: few, so that many fit on an SM (the walks
    are latency-bound); one per 512 elements of its JP × BC tiles (or ``WALK["warps"]``)."""
    if WALK["warps"]:
        return WALK["warps"]
    return max(1, min(8, cm.next_pow2(C) * jp // 512))


def backend(device, dtype, *, lmax: int, channels: int, n_heads: int,
            mmax: int = 1) -> tuple[str | None, str]:  # fmt: skip
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
    return cm.chosen_backend(
        "aggregate", backend(y.device, y.dtype, lmax=lmax, channels=y.shape[2], n_heads=H)
    )


@torch.library.triton_op(OP, mutates_args=())
def _aggregate_op(
    y: Tensor, rot: Tensor, layout: int, rot_lmax: int, lmax: int, rho: Tensor, dst: Tensor,
    perm: Tensor, row_ptr: Tensor, env: Tensor,
    logits: Tensor | None, z: Tensor | None, s: Tensor | None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    N = row_ptr.shape[0] - 1
    C = y.shape[2]
    cm.check_rot(rot, layout, rot_lmax, lmax, "aggregate")
    if _dispatch(y, lmax, logits) == "reference":
        return aggregate_reference(y, rot, layout, rot_lmax, lmax, rho, dst, N, env, logits, z, s)
    attn = logits is not None
    H = logits.shape[1] if attn else 0
    out = y.new_empty(N, st.dim_of(lmax), C)
    stats = y.new_empty(N, 2, H) if attn else y.new_zeros(0)
    if cm.has_no_items(N):
        return out, stats
    t = cm.kernel_tables(layout, rot_lmax, lmax, y.device)
    sr = cm.rot_args(rot, layout)
    lg = logits if attn else y
    sl = lg.stride()[:2] if attn else (0, 0)
    stt = stats.stride() if attn else (0, 0, 0)
    if attn:
        cm.wrap(_agg_stats_kernel)[(N,)](
            perm, row_ptr, env, logits, z, stats, H, *sl, *stt,
            BE=STATS_EDGES, HP=cm.next_pow2(H), num_warps=1,
        )  # fmt: skip
    if dot.chosen(KERNELS, "fwd", y) == "dot":
        dot.launch_fwd(y, rot, rho, perm, row_ptr, env, logits, s, out, stats, t, layout, sr)
        return out, stats
    cm.wrap(_agg_fwd_kernel)[(N, t["nblk"])](
        y, rot, rho, perm, row_ptr, env, lg, s if not attn else y, out, stats if attn else y,
        t["col"], t["row"], t["ent_a"], t["ent_b"],
        C, C // H if attn else 1,
        *y.stride(), *sr, *sl, *out.stride(), *stt,
        JP=t["jp"], SP=t["sp"], BC=cm.next_pow2(C), LAYOUT=layout, ATTN=attn,
        PF=WALK["prefetch"]["fwd"], num_warps=_warps(C, t["jp"]), num_stages=WALK["stages"],
    )  # fmt: skip
    return out, stats


@_aggregate_op.register_fake
def _(y, rot, layout, rot_lmax, lmax, rho, dst, perm, row_ptr, env, logits, z, s):
    N = row_ptr.shape[0] - 1
    out = y.new_empty(N, st.dim_of(lmax), y.shape[2])
    stats = y.new_empty(N, 2, logits.shape[1]) if logits is not None else y.new_empty(0)
    return out, stats


@torch.library.triton_op(OP_BWD, mutates_args=())
def _aggregate_bwd_op(
    gout: Tensor, out: Tensor, stats: Tensor, y: Tensor, rot: Tensor, layout: int,
    rot_lmax: int, lmax: int, rho: Tensor, dst: Tensor, perm: Tensor, row_ptr: Tensor,
    env: Tensor, logits: Tensor | None, z: Tensor | None, s: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    N = row_ptr.shape[0] - 1
    C = y.shape[2]
    cm.check_rot(rot, layout, rot_lmax, lmax, "aggregate")
    if _dispatch(y, lmax, logits) == "reference":
        return aggregate_bwd_reference(
            gout, out, stats, y, rot, layout, rot_lmax, lmax, rho, dst, env, logits, z, s
        )
    attn = logits is not None
    H = logits.shape[1] if attn else 0
    E = y.shape[0]
    grot = cm.rot_cotangent(rot, layout, rot_lmax, lmax)
    gy = torch.empty_like(y)
    if attn:
        Q = (gout * out).reshape(N, out.shape[1], H, C // H).sum((1, 3))
        M, S = stats[:, 0], stats[:, 1]
        gz = -(Q * torch.exp(-M) / S).sum(0)
    if cm.has_no_items(N):
        if attn:
            return gy, grot, torch.empty_like(env), torch.empty_like(logits), gz, y.new_zeros(0)
        return gy, grot, torch.empty_like(env), y.new_zeros(0), y.new_zeros(0), torch.empty_like(s)
    t = cm.kernel_tables(layout, rot_lmax, lmax, y.device)
    NB = t["nblk"]
    # per-(edge, block) partials of <gout[dst], msg> (per head with attention), finished below
    qp = y.new_empty(NB, E, H) if attn else y.new_empty(NB, E, 1)
    gsp = y.new_empty(NB, N) if not attn else y
    sr = cm.rot_args(rot, layout)
    so = cm.rot_args(grot, layout)
    if dot.chosen(KERNELS, "bwd", y) == "dot":
        dot.launch_bwd(gout, y, rot, rho, perm, row_ptr, env, logits, stats, s, gy, grot, qp, gsp,
                       t, layout, sr, so)  # fmt: skip
    else:
        cm.wrap(_agg_bwd_kernel)[(N, NB)](
            gout, y, rot, rho, perm, row_ptr, env, logits if attn else y,
            stats if attn else y, s if not attn else y, gy, grot, qp, gsp,
            t["col"], t["row"], t["ent_a"], t["ent_b"],
            C, H, C // H if attn else 1,
            *gout.stride(), *y.stride(), *sr,
            *(logits.stride() if attn else (0, 0)), *(stats.stride() if attn else (0, 0, 0)),
            *gy.stride(), *so, *qp.stride(), gsp.stride(0) if not attn else 0,
            JP=t["jp"], SP=t["sp"], BC=cm.next_pow2(C), HP=cm.next_pow2(max(H, 1)),
            LAYOUT=layout, ATTN=attn, PF=WALK["prefetch"]["bwd"],
            num_warps=_warps(C, t["jp"]), num_stages=WALK["stages"],
        )  # fmt: skip
    # epilogue: the blocks' partials summed by torch reductions (no atomics: deterministic)
    q = qp.sum(0)
    if not attn:
        return gy, grot, s[dst] * q[:, 0], y.new_zeros(0), y.new_zeros(0), gsp.sum(0)
    inv = torch.reciprocal(S)
    d = torch.exp(logits - M[dst]) * inv[dst] * (q - Q[dst])
    glog = (env * env)[:, None] * d
    genv = (2.0 * env[:, None] * d).sum(1)
    return gy, grot, genv, glog, gz, y.new_zeros(0)


@_aggregate_bwd_op.register_fake
def _(gout, out, stats, y, rot, layout, rot_lmax, lmax, rho, dst, perm, row_ptr, env, logits, z, s):
    e = y.new_empty(0)
    g_mode = (torch.empty_like(logits), torch.empty_like(z), e) if logits is not None else (
        e, e, torch.empty_like(s))  # fmt: skip
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


# ---------------------------------------------------------------------------- public API
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
