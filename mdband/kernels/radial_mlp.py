"""radial_mlp: the radial MLP of one hidden layer and the envelope product, per edge block.

Shapes (E edges, R radial functions, C hidden width, D = (L+1)·C outputs;
sezm-architecture.md §2.2)::

    rbf    (E, R)    the radial basis of each edge
    w1     (R, C)    ``radial_embedding.net.0.matrix``
    scale  (C,)      ``net.1.adam_scale`` (``edge_norm``) or None
    w2     (C, D)    the last ``matrix``
    env    (E, 1)    the edge envelope (descriptor version ≥ 1.1) or None
    out    (E, D)    silu(norm(rbf @ w1)) @ w2 · env,  norm(h) = h · rsqrt(mean(h²) + eps) · scale

Backward (closed form, the hidden layer recomputed in registers): for the cotangent go (E, D),
``gy = go · env``, ``g_env = Σ_d go ⊙ y``, ``gn = (gy w2ᵀ) ⊙ silu'(n)``, the RMS norm's
``gh = ρ (s ⊙ gn) − h ρ³ mean(h ⊙ s ⊙ gn)`` (ρ = rsqrt(mean(h²) + eps)), ``grbf = gh w1ᵀ``. No
gradients for the weights: the op serves force evaluation (frozen weights); training takes the
torch path (:func:`radial_mlp_reference`, any order).

The torch path runs two GEMMs, the norm, SiLU and the envelope product as separate kernels
over (E, C) and (E, D) tensors, and as many backward. Here a program keeps BLOCK_EDGES edges'
chain in registers: forward reads rbf and env (4·(R + 1) B per edge in float32) and writes out
(4·D B); backward reads rbf, env and go and writes grbf and g_env (4·(2R + D + 2) B). Products
are tl.dot tiles (widths padded to powers of two ≥ 16) at ``tf32x3`` (relative error ≈ 2⁻²¹
each); float32 only (float64 takes the torch path). Launch, on/off switch and the widest output
the op takes: the tuning table's ``radial_mlp`` record (BENCHMARKS.md "2026-12-04 (second
session)": faster than the torch path at DPA4-Mini's D = 96, slower at the default config's
D = 256, whose tiles spill registers).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn.functional import silu

from mdband.kernels import _common as cm
from mdband.kernels import tuning

OP = "mdband::radial_mlp"
OP_BWD = "mdband::radial_mlp_bwd"


def radial_mlp_reference(
    rbf: Tensor, w1: Tensor, scale: Tensor | None, w2: Tensor, env: Tensor | None, eps: float = 1e-7
) -> Tensor:
    """Compute out (E, D) by torch (differentiable to any order, also in the weights)."""
    h = rbf @ w1
    if scale is not None:
        h = h * torch.rsqrt((h * h).mean(-1, keepdim=True) + eps) * scale
    out = silu(h) @ w2
    return out if env is None else out * env


def radial_mlp_bwd_reference(go, rbf, w1, scale, w2, env, eps=1e-7):
    """(grbf (E, R), g_env (E, 1) or None) for the cotangent go, closed form (the kernel's)."""
    h = rbf @ w1
    rho = torch.rsqrt((h * h).mean(-1, keepdim=True) + eps) if scale is not None else None
    n = h if scale is None else h * rho * scale
    s = torch.sigmoid(n)
    y = (n * s) @ w2
    gy = go if env is None else go * env
    g_env = None if env is None else (go * y).sum(-1, keepdim=True)
    gn = (gy @ w2.t()) * (s + n * s * (1.0 - s))
    if scale is None:
        gh = gn
    else:
        sg = gn * scale
        gh = rho * sg - h * rho**3 * (h * sg).mean(-1, keepdim=True)
    return gh @ w1.t(), g_env


def enabled() -> bool:
    """Whether the tuning table asks for the op ("op") or the torch path ("torch")."""
    return tuning.current().radial_mlp.kernels == "op"


def applies(width: int, dtype: torch.dtype) -> bool:
    """Tell whether a model calls the op for outputs of width D.

    It does for :func:`enabled`, D ≤ the tuning table's ``max_width`` (None: no limit) and
    float32 (the kernels' one dtype).
    """
    widest = tuning.current().radial_mlp.max_width  # None: no limit
    return enabled() and (widest is None or width <= widest) and dtype == torch.float32


if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    @triton.jit
    def _hidden(
        rbf_ptr,
        w1_ptr,
        scale_ptr,
        n_edges,
        n_radial,
        n_hidden,
        epsilon,
        NORM: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        BLOCK_RADIAL: tl.constexpr,
        BLOCK_HIDDEN: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        """Compute the hidden layer of the program's edges.

        Returns the program's edges (e, mask), the hidden pre-activation h, its normalised n, the
        norm's ρ and scale s (ones without a norm), and w1's tile.
        """
        e = tl.program_id(0).to(tl.int64) * BLOCK_EDGES + tl.arange(0, BLOCK_EDGES)
        em = e < n_edges
        rc, cc = tl.arange(0, BLOCK_RADIAL), tl.arange(0, BLOCK_HIDDEN)
        x = tl.load(
            rbf_ptr + e[:, None] * n_radial + rc[None, :],
            mask=em[:, None] & (rc < n_radial)[None, :],
            other=0.0,
        )
        w1 = cm.load_tile(w1_ptr, 0, n_radial, n_hidden, n_hidden, BLOCK_RADIAL, BLOCK_HIDDEN)
        h = tl.dot(x, w1, input_precision=PRECISION)
        if NORM:
            s = tl.load(scale_ptr + cc, mask=cc < n_hidden, other=0.0)
            eps = cm.scalar_as(epsilon, h.dtype)
            rho = 1.0 / cm.sqrt_ieee(tl.sum(h * h, axis=1) / n_hidden + eps)
            n = h * rho[:, None] * s[None, :]
        else:
            s = tl.full((BLOCK_HIDDEN,), 1.0, tl.float32)
            rho = tl.full((BLOCK_EDGES,), 1.0, tl.float32)
            n = h
        return e, em, h, n, rho, s, w1

    @triton.jit
    def radial_mlp_fwd_kernel(
        rbf_ptr,
        w1_ptr,
        scale_ptr,
        w2_ptr,
        env_ptr,
        out_ptr,
        n_edges,
        n_radial,
        n_hidden,
        n_out,
        epsilon: tl.float64,
        NORM: tl.constexpr,
        ENVELOPE: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        BLOCK_RADIAL: tl.constexpr,
        BLOCK_HIDDEN: tl.constexpr,
        BLOCK_OUT: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        """Write out = silu(norm(rbf @ w1)) @ w2 (· env) of BLOCK_EDGES edges per program."""
        e, em, _, n, _, _, _ = _hidden(
            rbf_ptr,
            w1_ptr,
            scale_ptr,
            n_edges,
            n_radial,
            n_hidden,
            epsilon,
            NORM,
            BLOCK_EDGES,
            BLOCK_RADIAL,
            BLOCK_HIDDEN,
            PRECISION,
        )
        w2 = cm.load_tile(w2_ptr, 0, n_hidden, n_out, n_out, BLOCK_HIDDEN, BLOCK_OUT)
        y = tl.dot(n / (1.0 + tl.exp(-n)), w2, input_precision=PRECISION)
        if ENVELOPE:
            y = y * tl.load(env_ptr + e, mask=em, other=0.0)[:, None]
        dc = tl.arange(0, BLOCK_OUT)
        tl.store(
            out_ptr + e[:, None] * n_out + dc[None, :], y, mask=em[:, None] & (dc < n_out)[None, :]
        )

    @triton.jit
    def radial_mlp_bwd_kernel(
        gout_ptr,
        rbf_ptr,
        w1_ptr,
        scale_ptr,
        w2_ptr,
        env_ptr,
        grbf_ptr,
        genv_ptr,
        n_edges,
        n_radial,
        n_hidden,
        n_out,
        epsilon: tl.float64,
        NORM: tl.constexpr,
        ENVELOPE: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        BLOCK_RADIAL: tl.constexpr,
        BLOCK_HIDDEN: tl.constexpr,
        BLOCK_OUT: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        """Write grbf (and g_env with ENVELOPE) of BLOCK_EDGES edges per program, closed form.

        The hidden layer is recomputed in registers.
        """
        e, em, h, n, rho, s, w1 = _hidden(
            rbf_ptr,
            w1_ptr,
            scale_ptr,
            n_edges,
            n_radial,
            n_hidden,
            epsilon,
            NORM,
            BLOCK_EDGES,
            BLOCK_RADIAL,
            BLOCK_HIDDEN,
            PRECISION,
        )
        w2 = cm.load_tile(w2_ptr, 0, n_hidden, n_out, n_out, BLOCK_HIDDEN, BLOCK_OUT)
        dc = tl.arange(0, BLOCK_OUT)
        go = tl.load(
            gout_ptr + e[:, None] * n_out + dc[None, :],
            mask=em[:, None] & (dc < n_out)[None, :],
            other=0.0,
        )
        sig = 1.0 / (1.0 + tl.exp(-n))
        if ENVELOPE:
            y = tl.dot(n * sig, w2, input_precision=PRECISION)
            tl.store(genv_ptr + e, tl.sum(go * y, axis=1), mask=em)
            go = go * tl.load(env_ptr + e, mask=em, other=0.0)[:, None]
        gn = tl.dot(go, tl.trans(w2), input_precision=PRECISION) * (sig + n * sig * (1.0 - sig))
        if NORM:
            sg = gn * s[None, :]
            r3 = rho * rho * rho
            gh = rho[:, None] * sg - h * (r3 * tl.sum(h * sg, axis=1) / n_hidden)[:, None]
        else:
            gh = gn
        grbf = tl.dot(gh, tl.trans(w1), input_precision=PRECISION)
        rc = tl.arange(0, BLOCK_RADIAL)
        tl.store(
            grbf_ptr + e[:, None] * n_radial + rc[None, :],
            grbf,
            mask=em[:, None] & (rc < n_radial)[None, :],
        )


def backend(device, dtype) -> tuple[str, str]:
    """Return (backend, reason): Triton on CUDA for float32 (or the interpreter when forced).

    float64 takes the torch path.
    """
    name = cm.select_backend(device, dtype, triton_ok=dtype == torch.float32)
    return name, f"{name} on {torch.device(device).type} ({dtype})"


def _launch(rbf, w1, w2, norm: bool, has_env: bool):
    """(grid, sizes, meta) of both kernels at the tuning table's radial_mlp launch."""
    E, R, C, D = rbf.shape[0], rbf.shape[1], w1.shape[1], w2.shape[1]
    launch = tuning.current().radial_mlp
    p2 = cm.dot_width
    meta = dict(
        NORM=norm,
        ENVELOPE=has_env,
        BLOCK_EDGES=launch.edges,
        BLOCK_RADIAL=p2(R),
        BLOCK_HIDDEN=p2(C),
        BLOCK_OUT=p2(D),
        PRECISION=cm.dot_precision(launch.precision, rbf.device),
        num_warps=launch.warps,
    )
    return (triton.cdiv(E, launch.edges),), (E, R, C, D), meta


@torch.library.triton_op(OP, mutates_args=())
def _radial_mlp_op(
    rbf: Tensor,
    w1: Tensor,
    scale: Tensor,
    w2: Tensor,
    env: Tensor,
    norm: bool,
    has_env: bool,
    eps: float,
) -> Tensor:
    if cm.chosen_backend("radial_mlp", backend(rbf.device, rbf.dtype)) == "reference":
        return radial_mlp_reference(
            rbf, w1, scale if norm else None, w2, env if has_env else None, eps
        )
    out = rbf.new_empty(rbf.shape[0], w2.shape[1])
    if not cm.has_no_items(rbf.shape[0]):
        grid, sizes, meta = _launch(rbf, w1, w2, norm, has_env)
        cm.wrap(radial_mlp_fwd_kernel)[grid](rbf, w1, scale, w2, env, out, *sizes, eps, **meta)
    return out


@_radial_mlp_op.register_fake
def _(rbf, w1, scale, w2, env, norm, has_env, eps):
    return rbf.new_empty(rbf.shape[0], w2.shape[1])


@torch.library.triton_op(OP_BWD, mutates_args=())
def _radial_mlp_bwd_op(
    go: Tensor,
    rbf: Tensor,
    w1: Tensor,
    scale: Tensor,
    w2: Tensor,
    env: Tensor,
    norm: bool,
    has_env: bool,
    eps: float,
) -> tuple[Tensor, Tensor]:
    if cm.chosen_backend("radial_mlp", backend(rbf.device, rbf.dtype)) == "reference":
        grbf, g_env = radial_mlp_bwd_reference(
            go, rbf, w1, scale if norm else None, w2, env if has_env else None, eps
        )
        return grbf, torch.zeros_like(env) if g_env is None else g_env
    grbf, g_env = torch.empty_like(rbf), torch.zeros_like(env)
    if not cm.has_no_items(rbf.shape[0]):
        grid, sizes, meta = _launch(rbf, w1, w2, norm, has_env)
        cm.wrap(radial_mlp_bwd_kernel)[grid](
            go, rbf, w1, scale, w2, env, grbf, g_env, *sizes, eps, **meta
        )
    return grbf, g_env


@_radial_mlp_bwd_op.register_fake
def _(go, rbf, w1, scale, w2, env, norm, has_env, eps):
    return torch.empty_like(rbf), torch.empty_like(env)


def _setup(ctx, inputs, output):
    rbf, w1, scale, w2, env, norm, has_env, eps = inputs
    ctx.save_for_backward(rbf, w1, scale, w2, env)
    ctx.flags = (norm, has_env, eps)


def _backward(ctx, go):
    grbf, g_env = torch.ops.mdband.radial_mlp_bwd(go.contiguous(), *ctx.saved_tensors, *ctx.flags)
    return grbf, None, None, None, g_env if ctx.flags[1] else None, None, None, None


_radial_mlp_op.register_autograd(_backward, setup_context=_setup)


def radial_mlp(
    rbf: Tensor,
    w1: Tensor,
    scale: Tensor | None,
    w2: Tensor,
    env: Tensor | None,
    eps: float = 1e-7,
    fused: bool = True,
) -> Tensor:
    """Compute out (E, D) of the radial MLP with one hidden layer, times ``env`` when given.

    See the module docstring. ``fused``: the op (differentiable once in rbf and env: force
    evaluation); else the torch reference (any order, also in the weights: training).
    """
    E, C = rbf.shape[0], w1.shape[-1]
    ok = (
        rbf.dim() == 2
        and w1.dim() == 2
        and w1.shape[0] == rbf.shape[1]
        and w2.dim() == 2
        and w2.shape[0] == C
        and (scale is None or scale.shape == (C,))
        and (env is None or env.shape == (E, 1))
    )
    if not ok:
        shapes = [None if t is None else tuple(t.shape) for t in (rbf, w1, scale, w2, env)]
        raise ValueError(
            f"radial_mlp: rbf (E, R), w1 (R, C), scale (C,) or None, w2 (C, D), "
            f"env (E, 1) or None expected, got {shapes}"
        )
    cm.check_dtypes("radial_mlp", rbf=rbf, w1=w1, w2=w2)
    if not fused:
        return radial_mlp_reference(rbf, w1, scale, w2, env, eps)
    norm, has_env = scale is not None, env is not None
    s = (scale if scale is not None else w1.new_ones(C)).contiguous()
    ev = (env if env is not None else rbf.new_zeros(E, 1)).contiguous()
    return _radial_mlp_op(
        rbf.contiguous(), w1.contiguous(), s, w2.contiguous(), ev, norm, has_env, float(eps)
    )
