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
over (E, C) and (E, D) tensors, and as many backward (DPA4-Mini, 647,154 edges, D = 96: about
0.8 ms of an H200's time per call). Here a program keeps BE edges' chain in registers: forward
reads rbf and env (4·(R + 1) B per edge in float32) and writes out (4·D B); backward reads rbf,
env and go and writes grbf and g_env (4·(2R + D + 2) B). Products are tl.dot tiles (widths
padded to powers of two ≥ 16) at ``tf32x3`` (relative error ≈ 2⁻²¹ each); float32 only
(float64 takes the torch path). Measured on an H200 (647,154 edges, fwd + bwd, 64 edges and 4
warps per program): D = 96 0.86 ms against the torch path's 1.28; D = 256 slower (see
:data:`MAX_WIDTH`).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn.functional import silu

from mdband.kernels import _common as cm

OP = "mdband::radial_mlp"
OP_BWD = "mdband::radial_mlp_bwd"
#: "op" (the default): the radial MLP by this op where the fused ops run and the output width
#: is at most :data:`MAX_WIDTH`; "torch": the torch path (``gpu_warps.py --radial-mlp``)
KERNELS = {"fwd": "op"}
#: widest output D the op takes: D = 96 (DPA4-Mini) measured 0.86 ms against torch's 1.28,
#: D = 256 (the default config) 5.2 ms against 3.2 (the (BE, D) tiles spill registers)
MAX_WIDTH = 128
#: edges per program, warps (1, 2 or 4: 8 warps faulted on an H200 with triton 3.6) and the
#: dots' precision (auto: tf32x3 on tensor cores, else ieee)
LAUNCH = {"BE": 64, "warps": 4, "precision": "auto"}


def radial_mlp_reference(rbf: Tensor, w1: Tensor, scale: Tensor | None, w2: Tensor,
                         env: Tensor | None, eps: float = 1e-7) -> Tensor:  # fmt: skip
    """out (E, D) by torch (differentiable to any order, also in the weights)."""
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
    """Whether :data:`KERNELS` asks for the op ("op") or the torch path ("torch")."""
    return cm.kernel_choice(KERNELS, "fwd", ("op", "torch"), "radial_mlp") == "op"


def applies(width: int, dtype: torch.dtype) -> bool:
    """Whether a model calls the op for outputs of width D: :func:`enabled`, D ≤
    :data:`MAX_WIDTH` and float32 (the kernels' one dtype)."""
    return enabled() and width <= MAX_WIDTH and dtype == torch.float32


if cm.TRITON_AVAILABLE:
    triton, tl = cm.triton, cm.tl

    @triton.jit
    def _hidden(
        rbf_ptr, w1_ptr, s_ptr, E, R, C, eps,
        NORM: tl.constexpr, BE: tl.constexpr, RP: tl.constexpr, CP: tl.constexpr,
        PREC: tl.constexpr,
    ):  # fmt: skip
        """This program's edges (e, mask), the hidden pre-activation h, its normalised n, the
        norm's ρ and scale s (ones without a norm), and w1's tile."""
        e = tl.program_id(0).to(tl.int64) * BE + tl.arange(0, BE)
        em = e < E
        rc, cc = tl.arange(0, RP), tl.arange(0, CP)
        x = tl.load(rbf_ptr + e[:, None] * R + rc[None, :], mask=em[:, None] & (rc < R)[None, :],
                    other=0.0)  # fmt: skip
        w1 = cm.load_tile(w1_ptr, 0, R, C, C, RP, CP)
        h = tl.dot(x, w1, input_precision=PREC)
        if NORM:
            s = tl.load(s_ptr + cc, mask=cc < C, other=0.0)
            rho = 1.0 / cm.sqrt_ieee(tl.sum(h * h, axis=1) / C + eps)
            n = h * rho[:, None] * s[None, :]
        else:
            s = tl.full((CP,), 1.0, tl.float32)
            rho = tl.full((BE,), 1.0, tl.float32)
            n = h
        return e, em, h, n, rho, s, w1

    @triton.jit
    def _radial_mlp_fwd_kernel(
        rbf_ptr, w1_ptr, s_ptr, w2_ptr, env_ptr, out_ptr, E, R, C, D, eps,
        NORM: tl.constexpr, ENV: tl.constexpr, BE: tl.constexpr, RP: tl.constexpr,
        CP: tl.constexpr, DP: tl.constexpr, PREC: tl.constexpr,
    ):  # fmt: skip
        e, em, _, n, _, _, _ = _hidden(rbf_ptr, w1_ptr, s_ptr, E, R, C, eps, NORM, BE, RP, CP,
                                       PREC)  # fmt: skip
        w2 = cm.load_tile(w2_ptr, 0, C, D, D, CP, DP)
        y = tl.dot(n / (1.0 + tl.exp(-n)), w2, input_precision=PREC)
        if ENV:
            y = y * tl.load(env_ptr + e, mask=em, other=0.0)[:, None]
        dc = tl.arange(0, DP)
        tl.store(out_ptr + e[:, None] * D + dc[None, :], y, mask=em[:, None] & (dc < D)[None, :])

    @triton.jit
    def _radial_mlp_bwd_kernel(
        go_ptr, rbf_ptr, w1_ptr, s_ptr, w2_ptr, env_ptr, grbf_ptr, genv_ptr, E, R, C, D, eps,
        NORM: tl.constexpr, ENV: tl.constexpr, BE: tl.constexpr, RP: tl.constexpr,
        CP: tl.constexpr, DP: tl.constexpr, PREC: tl.constexpr,
    ):  # fmt: skip
        e, em, h, n, rho, s, w1 = _hidden(rbf_ptr, w1_ptr, s_ptr, E, R, C, eps, NORM, BE, RP,
                                          CP, PREC)  # fmt: skip
        w2 = cm.load_tile(w2_ptr, 0, C, D, D, CP, DP)
        dc = tl.arange(0, DP)
        go = tl.load(go_ptr + e[:, None] * D + dc[None, :], mask=em[:, None] & (dc < D)[None, :],
                     other=0.0)  # fmt: skip
        sig = 1.0 / (1.0 + tl.exp(-n))
        if ENV:
            y = tl.dot(n * sig, w2, input_precision=PREC)
            tl.store(genv_ptr + e, tl.sum(go * y, axis=1), mask=em)
            go = go * tl.load(env_ptr + e, mask=em, other=0.0)[:, None]
        gn = tl.dot(go, tl.trans(w2), input_precision=PREC) * (sig + n * sig * (1.0 - sig))
        if NORM:
            sg = gn * s[None, :]
            r3 = rho * rho * rho
            gh = rho[:, None] * sg - h * (r3 * tl.sum(h * sg, axis=1) / C)[:, None]
        else:
            gh = gn
        grbf = tl.dot(gh, tl.trans(w1), input_precision=PREC)
        rc = tl.arange(0, RP)
        tl.store(grbf_ptr + e[:, None] * R + rc[None, :], grbf,
                 mask=em[:, None] & (rc < R)[None, :])  # fmt: skip


def backend(device, dtype) -> tuple[str, str]:
    """(backend, reason): Triton on CUDA for float32 (or the interpreter when forced); float64
    takes the torch path."""
    name = cm.select_backend(device, dtype, triton_ok=dtype == torch.float32)
    return name, f"{name} on {torch.device(device).type} ({dtype})"


def _launch(rbf, w1, w2, norm: bool, has_env: bool):
    E, R, C, D = rbf.shape[0], rbf.shape[1], w1.shape[1], w2.shape[1]
    p2 = cm.dot_width
    prec = cm.dot_precision(LAUNCH["precision"], rbf.device)
    if LAUNCH["warps"] not in (1, 2, 4):
        raise ValueError(f"{OP}: {LAUNCH['warps']} warps per program (1, 2 or 4 allowed)")
    meta = dict(NORM=norm, ENV=has_env, BE=LAUNCH["BE"], RP=p2(R), CP=p2(C), DP=p2(D),
                PREC=prec, num_warps=LAUNCH["warps"])  # fmt: skip
    return (triton.cdiv(E, LAUNCH["BE"]),), (E, R, C, D), meta


@torch.library.triton_op(OP, mutates_args=())
def _radial_mlp_op(rbf: Tensor, w1: Tensor, scale: Tensor, w2: Tensor, env: Tensor, norm: bool,
                   has_env: bool, eps: float) -> Tensor:  # fmt: skip
    if cm.chosen_backend("radial_mlp", backend(rbf.device, rbf.dtype)) == "reference":
        return radial_mlp_reference(rbf, w1, scale if norm else None, w2,
                                    env if has_env else None, eps)  # fmt: skip
    out = rbf.new_empty(rbf.shape[0], w2.shape[1])
    if not cm.has_no_items(rbf.shape[0]):
        grid, sizes, meta = _launch(rbf, w1, w2, norm, has_env)
        cm.wrap(_radial_mlp_fwd_kernel)[grid](rbf, w1, scale, w2, env, out, *sizes, eps, **meta)
    return out


@_radial_mlp_op.register_fake
def _(rbf, w1, scale, w2, env, norm, has_env, eps):
    return rbf.new_empty(rbf.shape[0], w2.shape[1])


@torch.library.triton_op(OP_BWD, mutates_args=())
def _radial_mlp_bwd_op(go: Tensor, rbf: Tensor, w1: Tensor, scale: Tensor, w2: Tensor,
                       env: Tensor, norm: bool, has_env: bool,
                       eps: float) -> tuple[Tensor, Tensor]:  # fmt: skip
    if cm.chosen_backend("radial_mlp", backend(rbf.device, rbf.dtype)) == "reference":
        grbf, g_env = radial_mlp_bwd_reference(go, rbf, w1, scale if norm else None, w2,
                                               env if has_env else None, eps)  # fmt: skip
        return grbf, torch.zeros_like(env) if g_env is None else g_env
    grbf, g_env = torch.empty_like(rbf), torch.zeros_like(env)
    if not cm.has_no_items(rbf.shape[0]):
        grid, sizes, meta = _launch(rbf, w1, w2, norm, has_env)
        cm.wrap(_radial_mlp_bwd_kernel)[grid](go, rbf, w1, scale, w2, env, grbf, g_env, *sizes,
                                              eps, **meta)  # fmt: skip
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


def radial_mlp(rbf: Tensor, w1: Tensor, scale: Tensor | None, w2: Tensor, env: Tensor | None,
               eps: float = 1e-7, fused: bool = True) -> Tensor:  # fmt: skip
    """out (E, D) of the radial MLP with one hidden layer, times ``env`` when given (module
    docstring). ``fused``: the op (differentiable once in rbf and env: force evaluation); else
    the torch reference (any order, also in the weights: training)."""
    E, C = rbf.shape[0], w1.shape[-1]
    ok = (rbf.dim() == 2 and w1.dim() == 2 and w1.shape[0] == rbf.shape[1] and w2.dim() == 2
          and w2.shape[0] == C and (scale is None or scale.shape == (C,))
          and (env is None or env.shape == (E, 1)))  # fmt: skip
    if not ok:
        shapes = [None if t is None else tuple(t.shape) for t in (rbf, w1, scale, w2, env)]
        raise ValueError(f"radial_mlp: rbf (E, R), w1 (R, C), scale (C,) or None, w2 (C, D), "
                         f"env (E, 1) or None expected, got {shapes}")  # fmt: skip
    cm.check_dtypes("radial_mlp", rbf=rbf, w1=w1, w2=w2)
    if not fused:
        return radial_mlp_reference(rbf, w1, scale, w2, env, eps)
    norm, has_env = scale is not None, env is not None
    s = (scale if norm else w1.new_ones(C)).contiguous()
    ev = (env if has_env else rbf.new_zeros(E, 1)).contiguous()
    return _radial_mlp_op(rbf.contiguous(), w1.contiguous(), s, w2.contiguous(), ev, norm,
                          has_env, float(eps))  # fmt: skip
