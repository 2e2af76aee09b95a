"""radial_basis: the Triton kernels against the torch reference (values, d/dr), both bases."""

from __future__ import annotations

import math

import pytest
import torch

from mdband.kernels import _common as cm
from mdband.kernels import radial_basis as rb
from mdband.model.radial import RadialBasis, cutoff_envelope

F64, F32 = torch.float64, torch.float32
TOL = {F64: 1e-12, F32: 2e-6}  # relative to the largest element


def _lengths(E, rcut, seed):
    """Edge lengths across (0, 1.3 rcut]: inside, at and beyond the cutoff, and short ones."""
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(E, 1, generator=g, dtype=F64) * 1.3 * rcut + 0.05
    if E > 3:
        r[0], r[1], r[2] = rcut, 0.7, 1e-3
    return r


def _freqs(basis, n, rcut, seed):
    """The module's initial frequencies / centres, perturbed (as a trained checkpoint)."""
    init = RadialBasis(rcut, n, basis, 7).adam_freqs.detach()
    g = torch.Generator().manual_seed(seed)
    return init * (1 + 0.05 * torch.randn(init.shape, generator=g, dtype=F64))


def _close(got, want, dtype):
    scale = float(want.abs().max()) if want.numel() else 1.0
    torch.testing.assert_close(got.detach().cpu().double(), want, rtol=0, atol=TOL[dtype] * scale)


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("basis", ["bessel", "gaussian"])
@pytest.mark.parametrize("E,n,p_env,p_rbf", [(0, 8, 5, 7), (1, 16, 5, 7), (300, 16, 5, 7),
                                             (130, 5, 3, 6), (70, 20, 1, 2),
                                             (130, 16, 5, 0), (70, 5, 6, 0)])  # fmt: skip
def test_values_and_gradient_match_the_reference(kdev, dtype, basis, E, n, p_env, p_rbf):
    """env, rbf and d/dr of a random cotangent against float64 autograd of the torch path:
    edges past the cutoff (zero), at it, tiny lengths, widths not powers of two, more than one
    program of edges, and envelope orders 1–7 (0 for the basis: no envelope, an integer
    env_exp)."""
    rcut = 6.0
    r, f = _lengths(E, rcut, seed=E + n), _freqs(basis, n, rcut, seed=n)
    gc = -0.5 / (rcut / (n - 1)) ** 2
    g = torch.Generator().manual_seed(3)
    g_env, g_rbf = torch.randn(E, 1, generator=g, dtype=F64), torch.randn(E, n, generator=g,
                                                                           dtype=F64)  # fmt: skip
    rr = r.clone().requires_grad_()
    want_env, want_rbf = rb.radial_basis_reference(rr, f, rcut, p_env, p_rbf, basis, gc)
    (want_g,) = torch.autograd.grad((want_env, want_rbf), (rr,), (g_env, g_rbf))
    rk = r.to(dtype).to(kdev).requires_grad_()
    with cm.force_triton():
        env, rbf = rb.radial_basis(rk, f.to(dtype).to(kdev), rcut, p_env, p_rbf, basis, gc)
        (got_g,) = torch.autograd.grad((env, rbf), (rk,), (g_env.to(dtype).to(kdev),
                                                           g_rbf.to(dtype).to(kdev)))  # fmt: skip
    assert env.shape == (E, 1) and rbf.shape == (E, n) and env.dtype == dtype
    _close(env, want_env.detach(), dtype)
    _close(rbf, want_rbf.detach(), dtype)
    _close(got_g, want_g, dtype)
    if E > 3:
        beyond = r[:, 0] >= rcut
        assert float(env.detach()[beyond.to(kdev)].abs().max()) == 0.0
        if p_rbf:
            assert float(got_g[beyond.to(kdev)].abs().max()) == 0.0
        else:  # the raw basis: only the edge envelope (and the edge list) ends the edge
            assert float(rbf.detach()[beyond.to(kdev)].abs().max()) > 0.0


@pytest.mark.parametrize("basis", ["bessel", "gaussian"])
@pytest.mark.parametrize("p_rbf", [7, 0])
def test_reference_backend_matches_autograd(basis, p_rbf):
    """The op on its torch backend (a CPU tensor, Triton not forced): the closed-form backward
    reference equals autograd of the torch path (tiny, ordinary and beyond-cutoff lengths; a
    basis envelope of order 7, or none: exponent 0)."""
    rcut, n = 6.0, 12
    r, f = _lengths(90, rcut, seed=4), _freqs(basis, n, rcut, seed=4)
    gc = -0.5 / (rcut / (n - 1)) ** 2
    g_rbf = torch.randn(90, n, generator=torch.Generator().manual_seed(5), dtype=F64)
    rr = r.clone().requires_grad_()
    _, want_rbf = rb.radial_basis_reference(rr, f, rcut, 5, p_rbf, basis, gc)
    (want,) = torch.autograd.grad(want_rbf, (rr,), g_rbf)
    rk = r.clone().requires_grad_()
    with cm.force_backend("reference"):
        env, rbf = rb.radial_basis(rk, f, rcut, 5, p_rbf, basis, gc)
        (got,) = torch.autograd.grad((rbf * g_rbf).sum(), (rk,))  # env unused: no cotangent
    _close(got, want, F64)


def test_one_output_used(kdev):
    """Only rbf (or only env) carrying a cotangent: the other counts as zero."""
    r, f = _lengths(50, 5.0, seed=1), _freqs("bessel", 8, 5.0, seed=1)
    rr = r.clone().requires_grad_()
    _, want_rbf = rb.radial_basis_reference(rr, f, 5.0, 5, 7, "bessel")
    (want,) = torch.autograd.grad(want_rbf.sum(), (rr,))
    rk = r.to(kdev).requires_grad_()
    with cm.force_triton():
        _, rbf = rb.radial_basis(rk, f.to(kdev), 5.0, 5, 7, "bessel")
        (got,) = torch.autograd.grad(rbf.sum(), (rk,))
    _close(got, want, F64)


@pytest.mark.parametrize("basis", ["bessel", "gaussian"])
@pytest.mark.parametrize("p_env,p_rbf", [(5, 7), (5, 0), (0, 0)])
def test_reference_is_the_models_torch_path(basis, p_env, p_rbf):
    """The reference equals the model's own torch functions (cutoff_envelope, RadialBasis),
    envelope orders 0 (none: an integer env_exp) included."""
    rcut, n = 6.0, 16
    r = _lengths(40, rcut, seed=2)
    mod = RadialBasis(rcut, n, basis, p_rbf).double()
    env, rbf = rb.radial_basis_reference(r, mod.adam_freqs, rcut, p_env, p_rbf, basis,
                                         mod.gauss_coeff)  # fmt: skip
    assert torch.equal(env, cutoff_envelope(r, rcut, p_env))
    assert torch.equal(rbf, mod(r))


def test_bad_inputs_raise():
    r, f = _lengths(10, 6.0, seed=0), _freqs("bessel", 4, 6.0, seed=0)
    with pytest.raises(ValueError, match="radial_basis"):
        rb.radial_basis(r[:, 0], f, 6.0, 5, 7, "bessel")
    with pytest.raises(ValueError, match="radial_basis"):
        rb.radial_basis(r, f[0], 6.0, 5, 7, "bessel")
    with pytest.raises(ValueError, match="basis must be one of"):
        rb.radial_basis(r, f, 6.0, 5, 7, "chebyshev")
    assert math.isfinite(float(rb.radial_basis(r, f, 6.0, 5, 7, "bessel", fused=False)[1].sum()))
