"""radial_basis: the edge envelope and the radial basis of every edge in one pass.

Shapes (E edges, n basis functions)::

    r      (E, 1)   float32 or float64, edge lengths (r > 0)
    freqs  (1, n)   the basis' ``adam_freqs`` (Bessel frequencies w or Gaussian centres μ)
    env    (E, 1)   envelope(r; p_env)
    rbf    (E, n)   Bessel: sin(w r) / r · envelope(r; p_rbf)  (= w·sinc(w r / π) · envelope)
                    Gaussian: exp(c (r − μ)²) · envelope(r; p_rbf)

with ``envelope(r; p) = u⁴ Σ_{k<p} C(k+3, 3) x^k``, ``x = r / rcut``, ``u = 1 − x`` clamped to
[0, 1] (sezm-architecture.md §2.2), and ``envelope(r; 0) = 1``: no envelope (deepmd-kit's
exponent 0, what an integer ``env_exp`` gives the radial basis). Backward (closed form,
recomputed from r): ``g_r = g_env · env' + Σ_n g_rbf,n · rbf'_n`` with
``env' = (u⁴ S'(x) − 4 u³ S(x)) / rcut`` (Horner for S and S' together), Bessel
``raw' = (w cos(w r) − raw) / r`` (a series below w r = 0.5), Gaussian ``raw' = 2 c (r − μ) raw``.
No gradient for ``freqs``: the op serves force evaluation (frozen weights); training takes the
torch path (:func:`radial_basis_reference`, any order).

The torch path runs about twenty elementwise kernels forward and as many backward over (E, n)
and (E, 1) tensors; here one program handles BLOCK_EDGES edges (the tuning table's
``radial_basis`` record): forward reads r (4 B per edge, float32) and writes env and
rbf (4·(n + 1) B), backward reads r, g_env, g_rbf and writes g_r (4·(n + 3) B). sin and cos are
libdevice's (accurate to a few ulp) on the GPU and numpy's under the interpreter; results agree
with the torch path to rounding (tests: 1e-6 relative in float32, 1e-12 in float64).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from mdband.kernels import _common as cm
from mdband.kernels import tuning

OP = "mdband::radial_basis"
OP_BWD = "mdband::radial_basis_bwd"
#: basis kinds, in the order of the kernel's constexpr BASIS (0 Bessel, 1 Gaussian)
BASES = ("bessel", "gaussian")


def envelope_reference(r: Tensor, rcut: float, p: int) -> Tensor:
    """``u⁴ Σ_{k<p} C(k+3, 3) x^k``, 1 for p = 0 (torch; the model's ``cutoff_envelope``)."""
    if p == 0:
        return torch.ones_like(r)
    u = ((rcut - r) / rcut).clamp(0.0, 1.0)
    x = 1.0 - u
    coeffs = [float(math.comb(k + 3, 3)) for k in range(p)]
    series = torch.full_like(x, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        series = c + x * series
    return u.pow(4) * series


def raw_basis_reference(r: Tensor, freqs: Tensor, basis: str, gauss_coeff: float) -> Tensor:
    """Return the basis before its envelope, (E, n): ``w·sinc(w r / π)`` or ``exp(c (r − μ)²)``."""
    if basis == "bessel":
        return freqs * torch.sinc(r * freqs / math.pi)
    d = r - freqs
    return torch.exp(d * d * gauss_coeff)


def radial_basis_reference(
    r: Tensor,
    freqs: Tensor,
    rcut: float,
    p_env: int,
    p_rbf: int,
    basis: str,
    gauss_coeff: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """(env (E, 1), rbf (E, n)) by torch (differentiable to any order)."""
    raw = raw_basis_reference(r, freqs, basis, gauss_coeff)
    return envelope_reference(r, rcut, p_env), raw * envelope_reference(r, rcut, p_rbf)


def _envelope_slope(r: Tensor, rcut: float, p: int) -> tuple[Tensor, Tensor]:
    """(envelope(r; p), d envelope / dr) by Horner's rule for the series and its derivative."""
    if p == 0:
        return torch.ones_like(r), torch.zeros_like(r)
    u = ((rcut - r) / rcut).clamp(0.0, 1.0)
    x = 1.0 - u
    s, ds = torch.zeros_like(x), torch.zeros_like(x)
    for k in reversed(range(p)):
        ds = ds * x + s
        s = s * x + float(math.comb(k + 3, 3))
    u3 = u * u * u
    return u3 * u * s, (u3 * u * ds - 4.0 * u3 * s) / rcut


def radial_basis_bwd_reference(
    g_env: Tensor,
    g_rbf: Tensor,
    r: Tensor,
    freqs: Tensor,
    rcut: float,
    p_env: int,
    p_rbf: int,
    basis: str,
    gauss_coeff: float = 0.0,
) -> Tensor:
    """g_r (E, 1) for the cotangents (g_env, g_rbf), closed form (the kernel's formulas)."""
    _, denv = _envelope_slope(r, rcut, p_env)
    envr, denvr = _envelope_slope(r, rcut, p_rbf)
    raw = raw_basis_reference(r, freqs, basis, gauss_coeff)
    if basis == "bessel":
        a = r * freqs
        a2 = a * a
        series = a * (
            -1.0 / 3 + a2 * (1.0 / 30 + a2 * (-1.0 / 840 + a2 * (1.0 / 45360 - a2 / 3991680)))
        )
        draw = torch.where(a.abs() < 0.5, freqs * freqs * series, (freqs * torch.cos(a) - raw) / r)
    else:
        draw = 2.0 * gauss_coeff * (r - freqs) * raw
    return g_env * denv + (g_rbf * (draw * envr + raw * denvr)).sum(-1, keepdim=True)


if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    try:  # libdevice's sin/cos on the GPU (tl.sin may lower to the approximate instructions)
        from triton.language.extra import libdevice as _libdevice
    except ImportError:  # pragma: no cover - an older Triton
        _libdevice = None

    def _accurate_trig() -> bool:
        """Tell whether the kernels take libdevice's sin/cos (on a GPU).

        The interpreter has numpy's.
        """
        return _libdevice is not None and not cm.interpret_mode()

    @triton.jit
    def _envelope(r, inv_rcut, POLY_ORDER: tl.constexpr):
        """(envelope(r; POLY_ORDER), d envelope / dr) of a block of r; (1, 0) for order 0."""
        if POLY_ORDER == 0:
            return tl.full(r.shape, 1.0, r.dtype), tl.zeros_like(r)
        u = tl.minimum(tl.maximum(1.0 - r * inv_rcut, 0.0), 1.0)
        x = 1.0 - u
        s = tl.zeros_like(r)
        ds = tl.zeros_like(r)
        for j in tl.static_range(POLY_ORDER):
            k = POLY_ORDER - 1 - j
            ds = ds * x + s
            s = s * x + ((k + 1) * (k + 2) * (k + 3) // 6)
        u2 = u * u
        u3 = u2 * u
        return u3 * u * s, (u3 * u * ds - 4.0 * u3 * s) * inv_rcut

    @triton.jit
    def _raw(r, freqs, gauss_coeff, BASIS: tl.constexpr, ACCURATE_TRIG: tl.constexpr):
        """(raw basis, d raw / dr) for r (BE, 1) and freqs (1, NP)."""
        f = freqs
        if BASIS == 0:
            a = r * f
            if ACCURATE_TRIG:
                sn, cs = _libdevice.sin(a), _libdevice.cos(a)
            else:
                sn, cs = tl.sin(a), tl.cos(a)
            raw = sn / r
            # raw' = w² sinc'(a): the closed form cancels for small a = w r, where the series
            # -a/3 + a³/30 - a⁵/840 + a⁷/45360 - a⁹/3991680 takes over (error < 1e-11 at 0.5)
            a2 = a * a
            series = a * (
                -1.0 / 3 + a2 * (1.0 / 30 + a2 * (-1.0 / 840 + a2 * (1.0 / 45360 - a2 / 3991680)))
            )
            draw = tl.where(tl.abs(a) < 0.5, f * f * series, (f * cs - raw) / r)
        else:
            d = r - f
            raw = tl.exp(d * d * gauss_coeff)
            draw = 2.0 * gauss_coeff * d * raw
        return raw, draw

    @triton.jit
    def _edge_block(
        r_ptr, freqs_ptr, n_edges, n_basis, BLOCK_EDGES: tl.constexpr, BLOCK_BASIS: tl.constexpr
    ):
        """Load the program's edges and the basis columns.

        Returns (e, edge mask, n, column mask, r (BE,), freqs (NP,)); masked lengths read as 1 (no
        division by zero).
        """
        e = tl.program_id(0).to(tl.int64) * BLOCK_EDGES + tl.arange(0, BLOCK_EDGES)
        em = e < n_edges
        n = tl.arange(0, BLOCK_BASIS)
        nm = n < n_basis
        r = tl.load(r_ptr + e, mask=em, other=1.0)
        f = tl.load(freqs_ptr + n, mask=nm, other=0.0)
        return e, em, n, nm, r, f

    @triton.jit
    def radial_basis_fwd_kernel(
        r_ptr,
        freqs_ptr,
        env_ptr,
        rbf_ptr,
        n_edges,
        n_basis,
        inv_rcut: tl.float64,
        gauss_coeff: tl.float64,
        ENV_ORDER: tl.constexpr,
        RBF_ORDER: tl.constexpr,
        BASIS: tl.constexpr,
        ACCURATE_TRIG: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        BLOCK_BASIS: tl.constexpr,
    ):
        """Write env (E, 1) and rbf (E, n) of BLOCK_EDGES edges per program."""
        e, em, n, nm, r, f = _edge_block(
            r_ptr, freqs_ptr, n_edges, n_basis, BLOCK_EDGES, BLOCK_BASIS
        )
        inv_rcut = cm.scalar_as(inv_rcut, r.dtype)
        gauss_coeff = cm.scalar_as(gauss_coeff, r.dtype)
        env, _ = _envelope(r, inv_rcut, ENV_ORDER)
        envr, _ = _envelope(r, inv_rcut, RBF_ORDER)
        raw, _ = _raw(r[:, None], f[None, :], gauss_coeff, BASIS, ACCURATE_TRIG)
        tl.store(env_ptr + e, env, mask=em)
        tl.store(
            rbf_ptr + e[:, None] * n_basis + n[None, :],
            raw * envr[:, None],
            mask=em[:, None] & nm[None, :],
        )

    @triton.jit
    def radial_basis_bwd_kernel(
        r_ptr,
        freqs_ptr,
        genv_ptr,
        grbf_ptr,
        gr_ptr,
        n_edges,
        n_basis,
        inv_rcut: tl.float64,
        gauss_coeff: tl.float64,
        ENV_ORDER: tl.constexpr,
        RBF_ORDER: tl.constexpr,
        BASIS: tl.constexpr,
        ACCURATE_TRIG: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        BLOCK_BASIS: tl.constexpr,
    ):
        """Write g_r = g_env · env' + Σ_n g_rbf,n · rbf'_n of BLOCK_EDGES edges per program.

        Closed form, recomputed from r.
        """
        e, em, n, nm, r, f = _edge_block(
            r_ptr, freqs_ptr, n_edges, n_basis, BLOCK_EDGES, BLOCK_BASIS
        )
        inv_rcut = cm.scalar_as(inv_rcut, r.dtype)
        gauss_coeff = cm.scalar_as(gauss_coeff, r.dtype)
        _, denv = _envelope(r, inv_rcut, ENV_ORDER)
        envr, denvr = _envelope(r, inv_rcut, RBF_ORDER)
        raw, draw = _raw(r[:, None], f[None, :], gauss_coeff, BASIS, ACCURATE_TRIG)
        g_env = tl.load(genv_ptr + e, mask=em, other=0.0)
        g_rbf = tl.load(
            grbf_ptr + e[:, None] * n_basis + n[None, :], mask=em[:, None] & nm[None, :], other=0.0
        )
        drbf = draw * envr[:, None] + raw * denvr[:, None]
        g = g_env * denv + tl.sum(g_rbf * drbf, axis=1)
        tl.store(gr_ptr + e, g, mask=em)


def backend(device, dtype) -> tuple[str, str]:
    """(backend, reason): Triton on CUDA for float32/float64 (or the interpreter when forced)."""
    name = cm.select_backend(device, dtype)
    return name, f"{name} on {torch.device(device).type} ({dtype})"


def _launch(r, freqs, rcut, p_env, p_rbf, basis, gc):
    """(grid, sizes, meta) of both kernels at the tuning table's radial_basis launch."""
    E, N = r.shape[0], freqs.shape[-1]
    launch = tuning.current().radial_basis
    meta = dict(
        ENV_ORDER=p_env,
        RBF_ORDER=p_rbf,
        BASIS=BASES.index(basis),
        ACCURATE_TRIG=_accurate_trig(),
        BLOCK_EDGES=launch.fwd_edges,
        BLOCK_BASIS=max(2, cm.next_pow2(N)),
        num_warps=launch.warps,
    )
    return (triton.cdiv(E, launch.fwd_edges),), (E, N, 1.0 / rcut, gc), meta


@torch.library.triton_op(OP, mutates_args=())
def _radial_op(
    r: Tensor, freqs: Tensor, rcut: float, p_env: int, p_rbf: int, basis: str, gc: float
) -> tuple[Tensor, Tensor]:
    if cm.chosen_backend("radial_basis", backend(r.device, r.dtype)) == "reference":
        return radial_basis_reference(r, freqs, rcut, p_env, p_rbf, basis, gc)
    env, rbf = r.new_empty(r.shape[0], 1), r.new_empty(r.shape[0], freqs.shape[-1])
    if not cm.has_no_items(r.shape[0]):
        grid, sizes, meta = _launch(r, freqs, rcut, p_env, p_rbf, basis, gc)
        cm.wrap(radial_basis_fwd_kernel)[grid](r, freqs, env, rbf, *sizes, **meta)
    return env, rbf


@_radial_op.register_fake
def _(r, freqs, rcut, p_env, p_rbf, basis, gc):
    return r.new_empty(r.shape[0], 1), r.new_empty(r.shape[0], freqs.shape[-1])


@torch.library.triton_op(OP_BWD, mutates_args=())
def _radial_bwd_op(
    g_env: Tensor,
    g_rbf: Tensor,
    r: Tensor,
    freqs: Tensor,
    rcut: float,
    p_env: int,
    p_rbf: int,
    basis: str,
    gc: float,
) -> Tensor:
    if cm.chosen_backend("radial_basis", backend(r.device, r.dtype)) == "reference":
        return radial_basis_bwd_reference(g_env, g_rbf, r, freqs, rcut, p_env, p_rbf, basis, gc)
    g_r = torch.empty_like(r)
    if not cm.has_no_items(r.shape[0]):
        grid, sizes, meta = _launch(r, freqs, rcut, p_env, p_rbf, basis, gc)
        cm.wrap(radial_basis_bwd_kernel)[grid](r, freqs, g_env, g_rbf, g_r, *sizes, **meta)
    return g_r


@_radial_bwd_op.register_fake
def _(g_env, g_rbf, r, freqs, rcut, p_env, p_rbf, basis, gc):
    return torch.empty_like(r)


def _setup(ctx, inputs, output):
    r, freqs, *params = inputs
    ctx.save_for_backward(r, freqs)
    ctx.params = params


def _backward(ctx, g_env, g_rbf):
    r, freqs = ctx.saved_tensors
    g_env = torch.zeros_like(r) if g_env is None else g_env.contiguous()
    g_rbf = r.new_zeros(r.shape[0], freqs.shape[-1]) if g_rbf is None else g_rbf.contiguous()
    g_r = torch.ops.mdband.radial_basis_bwd(g_env, g_rbf, r, freqs, *ctx.params)
    return g_r, None, None, None, None, None, None


_radial_op.register_autograd(_backward, setup_context=_setup)


def radial_basis(
    r: Tensor,
    freqs: Tensor,
    rcut: float,
    p_env: int,
    p_rbf: int,
    basis: str,
    gauss_coeff: float = 0.0,
    fused: bool = True,
) -> tuple[Tensor, Tensor]:
    """(env (E, 1), rbf (E, n)) of edge lengths r (module docstring).

    ``fused``: the op (differentiable once in r, not in freqs: force evaluation); else the
    torch reference (differentiable to any order, also in freqs: training).
    """
    if r.dim() != 2 or r.shape[1] != 1 or freqs.dim() != 2 or freqs.shape[0] != 1:
        raise ValueError(
            f"radial_basis: r (E, 1) and freqs (1, n) expected, got "
            f"{tuple(r.shape)} and {tuple(freqs.shape)}"
        )
    if basis not in BASES:
        raise ValueError(f"radial_basis: basis must be one of {BASES}, got {basis!r}")
    cm.check_dtypes("radial_basis", r=r, freqs=freqs)
    if not fused:
        return radial_basis_reference(r, freqs, rcut, p_env, p_rbf, basis, gauss_coeff)
    return _radial_op(
        r.contiguous(),
        freqs.contiguous(),
        float(rcut),
        int(p_env),
        int(p_rbf),
        basis,
        float(gauss_coeff),
    )
