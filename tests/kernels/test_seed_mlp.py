"""seed_mlp: the Triton kernels against the float64 torch reference (values, d/d rbf)."""

from __future__ import annotations

import pytest
import torch

from mdband.kernels import _common as cm
from mdband.kernels import seed_mlp as sm
from mdband.kernels import tuning

F64, F32 = torch.float64, torch.float32
TOL = 3e-6  # float32 against float64, relative to the largest element


def _case(E, R, P, T, H, Q, n_types=3, seed=0):
    g = torch.Generator().manual_seed(seed)

    def m(*shape):
        return torch.randn(*shape, generator=g, dtype=F64) / shape[0] ** 0.5

    rbf = torch.rand(E, R, generator=g, dtype=F64)
    t_src = torch.randint(0, n_types, (E,), generator=g)
    t_dst = torch.randint(0, n_types, (E,), generator=g)
    table = torch.randn(n_types + 1, T, generator=g, dtype=F64)
    return rbf, t_src, t_dst, table, m(R, P), m(P, P), m(P + 2 * T, H), m(H, Q)


def _close(got, want):
    scale = float(want.abs().max()) if want.numel() else 1.0
    torch.testing.assert_close(got.detach().cpu().double(), want, rtol=0, atol=TOL * scale)


@pytest.mark.parametrize("E,R,P,T,H,Q", [(0, 16, 32, 8, 64, 32), (1, 16, 32, 8, 64, 32),
                                         (70, 16, 32, 8, 64, 32), (45, 5, 20, 3, 40, 12),
                                         (33, 16, 32, 16, 128, 64)])  # fmt: skip
def test_values_and_gradient_match_float64(kdev, E, R, P, T, H, Q):
    """g and grbf of a random cotangent against float64 autograd of the torch path: DPA4-Mini's
    widths (16, 32, 8, 64, 32), the default config's (T 16, H 128, Q 64), widths that are not
    powers of two, one edge, none, more than one program of edges."""
    args = _case(E, R, P, T, H, Q, seed=E + H)
    gg = torch.randn(E, Q, generator=torch.Generator().manual_seed(1), dtype=F64)
    rbf = args[0].clone().requires_grad_()
    want = sm.seed_mlp_reference(rbf, *args[1:])
    (want_g,) = torch.autograd.grad(want, (rbf,), gg)
    k = [a.to(kdev) if a.dtype != F64 else a.to(F32).to(kdev) for a in args]
    rk = k[0].requires_grad_()
    with cm.force_triton():
        got = sm.seed_mlp(rk, *k[1:])
        (got_g,) = torch.autograd.grad(got, (rk,), gg.to(F32).to(kdev))
    assert got.shape == (E, Q) and got.dtype == F32
    _close(got, want.detach())
    _close(got_g, want_g)


def test_reference_backend_and_closed_form():
    """float64 (the torch backend): the op's closed-form backward equals autograd."""
    args = _case(40, 7, 12, 4, 24, 10, seed=3)
    gg = torch.randn(40, 10, generator=torch.Generator().manual_seed(2), dtype=F64)
    rbf = args[0].clone().requires_grad_()
    (want,) = torch.autograd.grad(sm.seed_mlp_reference(rbf, *args[1:]), (rbf,), gg)
    rk = args[0].clone().requires_grad_()
    (got,) = torch.autograd.grad(sm.seed_mlp(rk, *args[1:]), (rk,), gg)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12 * float(want.abs().max()))


def test_switch_and_bad_inputs():
    args = _case(10, 4, 8, 2, 16, 6, seed=4)
    with pytest.raises(ValueError, match="seed_mlp"):
        sm.seed_mlp(args[0], *args[1:6], args[6][1:], args[7])
    assert sm.enabled() and sm.applies(F32) and not sm.applies(F64)  # the default, float32
    with tuning.override(seed_mlp={"kernels": "torch"}):
        assert not sm.enabled() and not sm.applies(F32)
    with pytest.raises(ValueError, match="EdgeMlpTuning.kernels"):
        with tuning.override(seed_mlp={"kernels": "cuda"}):
            pass


@pytest.mark.parametrize("key,value,match", [("warps", 8, "warps"), ("precision", "fp16", "fp16")])
def test_launch_settings_refused(key, value, match):
    """8 warps per program (faulted on a GPU) and an unknown dot precision: ValueError, and the
    table in force is unchanged."""
    with pytest.raises(ValueError, match=match):
        with tuning.override(seed_mlp={key: value}):
            pass
    assert tuning.current() is tuning.DEFAULTS
