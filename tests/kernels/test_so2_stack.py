"""so2_mix_layer: Triton vs float64 reference, closed-form backward, model layer equivalence."""

from __future__ import annotations

import pytest
import torch

from mdband.kernels import _common as cm
from mdband.kernels import so2_stack as ss
from mdband.kernels._stack_launch import ELEMENTWISE_BE
from mdband.kernels.so2_stack import (
    so2_mix_layer,
    so2_mix_layer_bwd_reference,
    so2_mix_layer_reference,
)
from mdband.model.so2 import GatedActivation, SO2Linear

F64, F32 = torch.float64, torch.float32


def _inputs(L, C, F, E, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(F, E, 3 * L + 1, C, generator=g, dtype=F64)
    w0 = torch.randn((L + 1) * C, F * (L + 1) * C, generator=g, dtype=F64) / ((L + 1) * C) ** 0.5
    wm = torch.randn(L * C, F * 2 * L * C, generator=g, dtype=F64) / (L * C) ** 0.5
    wg = torch.randn(C, F * L * C, generator=g, dtype=F64) / C**0.5
    gy = torch.randn(F, E, 3 * L + 1, C, generator=g, dtype=F64)
    return x, w0, wm, wg, gy


def _modules(L, C, F, w0, wm, wg):
    lin = SO2Linear(L, C, C, F).to(F64)
    act = GatedActivation(L, C, F).to(F64)
    with torch.no_grad():
        lin.weight_m0.copy_(w0)
        lin.weight_m[0].copy_(wm)
        act.gate_linear.weight.copy_(wg)
    return lin, act


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("L,F", [(1, 1), (2, 2), (3, 1), (4, 1)])
def test_reference_equals_model_layer(L, F, gated):
    """The op's reference is the model's layer x + act(SO2Linear(x)), forward and backward."""
    C = 3
    x, w0, wm, wg, gy = _inputs(L, C, F, 7)
    lin, act = _modules(L, C, F, w0, wm, wg)
    xa = x.clone().requires_grad_(True)
    want = xa + (act(lin(xa)) if gated else lin(xa))
    (gwant,) = torch.autograd.grad(want, xa, gy)
    y, h = so2_mix_layer_reference(x, w0, wm, wg, L, gated)
    torch.testing.assert_close(y, want, rtol=1e-13, atol=1e-13)
    if gated:
        torch.testing.assert_close(h, lin(x), rtol=1e-13, atol=1e-13)
    gx = so2_mix_layer_bwd_reference(gy, h, w0, wm, wg, L, gated)
    torch.testing.assert_close(gx, gwant, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("precision", ss.PRECISIONS)
@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("L,C,F,E", [(1, 16, 1, 5), (2, 16, 2, 40), (3, 32, 1, 33), (4, 16, 1, 17)])
def test_triton_matches_float64_reference(kdev, L, C, F, E, gated, precision, monkeypatch):
    cfg = {"BE": 16, "warps": 4, "stages": 2}  # several programs, a ragged tail
    monkeypatch.setitem(ss.CONFIG, "tf32x3", cfg)
    x, w0, wm, wg, gy = _inputs(L, C, F, E)
    xa = x.clone().requires_grad_(True)
    want, _ = so2_mix_layer_reference(xa, w0, wm, wg, L, gated)
    (gwant,) = torch.autograd.grad(want, xa, gy)
    x32 = x.to(F32, copy=True).to(kdev).requires_grad_(True)
    w = [t.to(F32).to(kdev) for t in (w0, wm, wg)]
    with cm.force_triton():
        y = so2_mix_layer(x32, w[0], w[1], w[2] if gated else None, L, precision)
        (gx,) = torch.autograd.grad(y, x32, gy.to(F32).to(kdev))
    scale = float(want.detach().abs().max())
    torch.testing.assert_close(y.cpu().double(), want.detach(), rtol=0, atol=2e-6 * scale)
    gscale = float(gwant.abs().max())
    torch.testing.assert_close(gx.cpu().double(), gwant, rtol=0, atol=2e-6 * gscale)


def test_zero_edges(kdev):
    x, w0, wm, wg, _ = _inputs(2, 16, 1, 0)
    x = x.to(F32).to(kdev).requires_grad_(True)
    w = [t.to(F32).to(kdev) for t in (w0, wm, wg)]
    with cm.force_triton():
        y = so2_mix_layer(x, *w, 2, "ieee")
        (g,) = torch.autograd.grad(y.sum(), x)
    assert y.shape == x.shape and g.shape == x.shape


def test_backend_choice_and_bad_input():
    assert ss.backend("cpu", F32, lmax=3, channels=64)[0] == "reference"
    assert ss.backend("cpu", F32, lmax=0, channels=64)[0] is None
    assert not ss.kernel_supports(F64, 64) and not ss.kernel_supports(F32, 48)
    x, w0, wm, wg, _ = _inputs(2, 16, 1, 3)
    with pytest.raises(ValueError, match="precision"):
        so2_mix_layer(x, w0, wm, wg, 2, "tf32")
    with pytest.raises(ValueError, match="wm must be"):
        so2_mix_layer(x, w0, wm[:, :-1], wg, 2)
    with pytest.raises(ValueError, match=r"x must be \(F, E, 3L\+1, C\)"):
        so2_mix_layer(x[:, :, :-1], w0, wm, wg, 2)


def test_reference_op_on_cpu_is_differentiable():
    """On CPU the registered op runs its reference and the closed-form backward."""
    x, w0, wm, wg, gy = _inputs(2, 4, 2, 9)
    xa = x.clone().requires_grad_(True)
    y = so2_mix_layer(xa, w0, wm, wg, 2)
    (g,) = torch.autograd.grad(y, xa, gy)
    xb = x.clone().requires_grad_(True)
    want, _ = so2_mix_layer_reference(xb, w0, wm, wg, 2, True)
    (gwant,) = torch.autograd.grad(want, xb, gy)
    torch.testing.assert_close(y, want, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(g, gwant, rtol=1e-12, atol=1e-12)


def test_smaller_launch_when_shared_memory_runs_out(kdev, monkeypatch):
    """A GPU with less shared memory than the tuned launch needs gets the next one that fits."""
    from triton.runtime.errors import OutOfResources

    real = ss.cm.wrap

    def wrap(kernel):
        launcher = real(kernel)

        class Grid:
            def __getitem__(self, grid):
                def run(*args, **kw):
                    if kernel is ss._linear_kernel and kw["BE"] == 32:
                        raise OutOfResources(200_000, 100_000, "shared memory")
                    return launcher[grid](*args, **kw)

                return run

        return Grid()

    monkeypatch.setattr(ss.cm, "wrap", wrap)
    monkeypatch.setattr(ss, "_WORKING", {})
    monkeypatch.setitem(ss.CONFIG, "tf32x3", {"BE": 32, "warps": 4, "stages": 2})
    small = {"BE": 16, "warps": 4, "stages": 1}
    monkeypatch.setattr(ss, "FALLBACK_CONFIGS", ({"BE": 32, "warps": 4, "stages": 1}, small))
    x, w0, wm, wg, _ = _inputs(2, 16, 1, 40)
    want, _ = so2_mix_layer_reference(x, w0, wm, wg, 2, True)
    w = [t.to(F32).to(kdev) for t in (w0, wm, wg)]
    with cm.force_triton():
        y = so2_mix_layer(x.to(F32).to(kdev), *w, 2, "tf32x3")
    torch.testing.assert_close(y.cpu().double(), want, rtol=0, atol=2e-6 * float(want.abs().max()))
    assert list(ss._WORKING.values()) == [small]


def test_packed_weights_follow_in_place_edits():
    """The per-call weight tiles are cached per weight tensor and rebuilt after an in-place edit."""
    _, w0, wm, _, _ = _inputs(2, 16, 1, 3)
    w0, wm = w0.float(), wm.float()
    a = ss._packed_weights(w0, wm, 1, 2, 16, False)
    assert ss._packed_weights(w0, wm, 1, 2, 16, False) is a
    assert ss._packed_weights(w0, wm, 1, 2, 16, True) is not a
    with torch.no_grad():
        wm.mul_(2.0)
    b = ss._packed_weights(w0, wm, 1, 2, 16, False)
    assert b is not a
    want = ss._pack_weights(w0, wm, 1, 2, 16, False)
    assert all(torch.equal(u, v) for u, v in zip(b, want))
    wm2 = wm.clone()
    assert ss._packed_weights(w0, wm2, 1, 2, 16, False) is not b


def test_weight_tiles_split_exactly():
    """Every packed tile pair is two TF32 values whose sum is the fp32 weight to 2^-21."""
    _, w0, wm, _, _ = _inputs(2, 16, 1, 3)
    w0, wm = w0.float(), wm.float()
    wh, wl = ss._pack_weights(w0, wm, 1, 2, 16, False)
    for t in (wh, wl):
        assert not (t.view(torch.int32) & 0x1FFF).any()  # 10 mantissa bits at most
    tiles = (wh.double() + wl.double()).view(1, 7, 4, 16, 16)
    W0, Wu, Wv = ss._oriented(w0, wm, 1, 2, False)
    # row j = 1 (m = 0, l = 1), k = 2: W0[x row 2 -> out row 1], stored [c_out][c_in]
    want = W0[0, 32:48, 16:32].T.double()
    torch.testing.assert_close(tiles[0, 1, 2], want, rtol=2**-20, atol=0)
    # row j = 2L + 1 = 5 (m = +1, l = 1), k = L = 2 (x₊ of l = 1): Q₊ = Wu
    torch.testing.assert_close(tiles[0, 5, 2], Wu[0, 0:16, 0:16].T.double(), rtol=2**-20, atol=0)


def test_packed_weights_released_with_the_weights():
    _, w0, wm, _, _ = _inputs(1, 16, 1, 3)
    w0, wm = w0.float(), wm.float()
    ss._packed_weights(w0, wm, 1, 1, 16, False)
    key = (id(w0), id(wm), False)
    assert key in ss._PACKED
    del w0
    assert key not in ss._PACKED


def test_shape_config_sets_the_launch(kdev, monkeypatch):
    """A per-(L, C) entry of SHAPE_CONFIG is the launch of both kernels, and the result is the
    reference's whatever the launch."""
    seen = []
    real = ss.cm.wrap

    def wrap(kernel):
        launcher = real(kernel)

        class Grid:
            def __getitem__(self, grid):
                def run(*args, **kw):
                    seen.append((kernel.__name__, kw["BE"], kw.get("num_warps")))
                    return launcher[grid](*args, **kw)

                return run

        return Grid()

    monkeypatch.setattr(ss.cm, "wrap", wrap)
    monkeypatch.setattr(ss, "_WORKING", {})
    shape = {"linear": {"BE": 16, "warps": 2, "stages": 1},
             "gate": {"BE": 16, "fwd_warps": 2, "bwd_warps": 1}}  # fmt: skip
    monkeypatch.setitem(ss.SHAPE_CONFIG, (2, 16), shape)
    assert ss.linear_config("tf32x3", 2, 16) == shape["linear"]
    assert ss.gate_config(2, 16) == shape["gate"]
    assert ss.gate_config(3, 16)["BE"] == ELEMENTWISE_BE  # other shapes keep the default
    x, w0, wm, wg, gy = _inputs(2, 16, 1, 37)
    xa = x.clone().requires_grad_(True)
    want, _ = so2_mix_layer_reference(xa, w0, wm, wg, 2, True)
    (gwant,) = torch.autograd.grad(want, xa, gy)
    x32 = x.to(F32).to(kdev).requires_grad_(True)
    w = [t.to(F32).to(kdev) for t in (w0, wm, wg)]
    with cm.force_triton():
        y = so2_mix_layer(x32, *w, 2, "tf32x3")
        (gx,) = torch.autograd.grad(y, x32, gy.to(F32).to(kdev))
    assert ("_linear_kernel", 16, 2) in seen
    assert ("_gate_fwd_kernel", 16, 2) in seen and ("_gate_bwd_kernel", 16, 1) in seen
    torch.testing.assert_close(y.detach().cpu().double(), want.detach(), rtol=0,
                               atol=2e-6 * float(want.abs().max()))  # fmt: skip
    torch.testing.assert_close(
        gx.cpu().double(), gwant, rtol=0, atol=2e-6 * float(gwant.abs().max())
    )


def test_backward_without_output_cotangent_gives_none():
    """Cotangents are not materialised (no zero-filled (F, E, Dm, C) tensor for h): a backward
    with neither output used returns no gradient instead of running the kernels on zeros."""
    assert ss._backward(None, None, None) == (None,) * 7
