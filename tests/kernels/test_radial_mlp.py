"""radial_mlp: the Triton kernels against the float64 torch reference (values, d/d rbf, d/d env)."""

from __future__ import annotations

import pytest
import torch

from mdband.kernels import _common as cm
from mdband.kernels import radial_mlp as rm
from mdband.kernels import tuning

F64, F32 = torch.float64, torch.float32
TOL = 3e-6  # float32 against float64, relative to the largest element


def _case(E, R, C, D, norm, env, seed=0):
    g = torch.Generator().manual_seed(seed)
    rbf = torch.rand(E, R, generator=g, dtype=F64)
    w1 = torch.randn(R, C, generator=g, dtype=F64) / R**0.5
    scale = 1 + 0.2 * torch.randn(C, generator=g, dtype=F64) if norm else None
    w2 = torch.randn(C, D, generator=g, dtype=F64) / C**0.5
    ev = torch.rand(E, 1, generator=g, dtype=F64) if env else None
    return rbf, w1, scale, w2, ev


def _close(got, want):
    scale = float(want.abs().max()) if want.numel() else 1.0
    torch.testing.assert_close(got.detach().cpu().double(), want, rtol=0, atol=TOL * scale)


def _f32(t, dev):
    return None if t is None else t.to(F32).to(dev)


@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("env", [True, False])
@pytest.mark.parametrize("E,R,C,D", [(0, 16, 32, 96), (1, 16, 32, 96), (70, 16, 32, 96),
                                     (33, 6, 64, 256), (40, 5, 20, 50)])  # fmt: skip
def test_values_and_gradients_match_float64(kdev, norm, env, E, R, C, D):
    """out, grbf and g_env of a random cotangent against float64 autograd of the torch path:
    DPA4-Mini's widths (16, 32, 96), the default's (C 64, D 256), widths not powers of two,
    with and without the RMS norm and the envelope, one edge, none, several programs."""
    args = _case(E, R, C, D, norm, env, seed=E + C)
    go = torch.randn(E, D, generator=torch.Generator().manual_seed(1), dtype=F64)
    rbf = args[0].clone().requires_grad_()
    ev = None if args[4] is None else args[4].clone().requires_grad_()
    want = rm.radial_mlp_reference(rbf, args[1], args[2], args[3], ev)
    wants = torch.autograd.grad(want, [t for t in (rbf, ev) if t is not None], go)
    rk = _f32(args[0], kdev).requires_grad_()
    ek = None if ev is None else _f32(args[4], kdev).requires_grad_()
    with cm.force_triton():
        got = rm.radial_mlp(rk, _f32(args[1], kdev), _f32(args[2], kdev), _f32(args[3], kdev), ek)
        gots = torch.autograd.grad(got, [t for t in (rk, ek) if t is not None],
                                   go.to(F32).to(kdev))  # fmt: skip
    assert got.shape == (E, D) and got.dtype == F32
    _close(got, want.detach())
    for g_got, g_want in zip(gots, wants):
        _close(g_got, g_want)


@pytest.mark.parametrize("norm", [False, True])
def test_reference_backend_closed_form(norm):
    """float64 (the torch backend): the op's closed-form backward equals autograd."""
    rbf, w1, scale, w2, env = _case(30, 7, 12, 20, norm, True, seed=3)
    go = torch.randn(30, 20, generator=torch.Generator().manual_seed(2), dtype=F64)
    r1, e1 = rbf.clone().requires_grad_(), env.clone().requires_grad_()
    want = torch.autograd.grad(rm.radial_mlp_reference(r1, w1, scale, w2, e1), (r1, e1), go)
    r2, e2 = rbf.clone().requires_grad_(), env.clone().requires_grad_()
    got = torch.autograd.grad(rm.radial_mlp(r2, w1, scale, w2, e2), (r2, e2), go)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12 * float(b.abs().max()))


def test_switch_and_bad_inputs():
    rbf, w1, scale, w2, env = _case(10, 4, 8, 16, True, True, seed=4)
    with pytest.raises(ValueError, match="radial_mlp"):
        rm.radial_mlp(rbf, w1, scale[1:], w2, env)
    with pytest.raises(ValueError, match="radial_mlp"):
        rm.radial_mlp(rbf, w1, scale, w2, env[1:])
    widest = tuning.current().radial_mlp.max_width
    assert rm.enabled() and rm.applies(widest, F32)  # the default
    assert not rm.applies(widest + 1, F32)  # wider outputs spill: the torch path
    assert not rm.applies(16, F64)  # float32 kernels only
    with tuning.override(radial_mlp={"kernels": "torch"}):
        assert not rm.enabled() and not rm.applies(16, F32)
    with tuning.override(radial_mlp={"max_width": 15}):
        assert not rm.applies(16, F32) and rm.applies(15, F32)
    with pytest.raises(ValueError, match="EdgeMlpTuning.kernels"):
        with tuning.override(radial_mlp={"kernels": "fused"}):
            pass


@pytest.mark.parametrize("key,value,match", [("warps", 8, "warps"), ("precision", "tf32", "tf32")])
def test_launch_settings_refused(key, value, match):
    """8 warps per program (faulted on a GPU) and an unknown dot precision: ValueError, and the
    table in force is unchanged."""
    with pytest.raises(ValueError, match=match):
        with tuning.override(radial_mlp={key: value}):
            pass
    assert tuning.current() is tuning.DEFAULTS
