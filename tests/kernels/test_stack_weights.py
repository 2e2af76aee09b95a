"""The linear kernel's weight tiles: layout, the exact splits of each precision mode, the cache,
and fp16 modes kept accurate for weights and inputs far from 1."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import with_linear

from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.kernels.so2_stack import reference as ss
from mdband.kernels.so2_stack import so2_mix_layer
from mdband.kernels.so2_stack import weights as sw

F64, F32 = torch.float64, torch.float32
SMALL = dict(edges=16, warps=4, stages=2)  # a launch of several programs on the test's edges


def _weights(L, C, F=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    w0 = torch.randn((L + 1) * C, F * (L + 1) * C, generator=g, dtype=F64) / ((L + 1) * C) ** 0.5
    wm = torch.randn(L * C, F * 2 * L * C, generator=g, dtype=F64) / (L * C) ** 0.5
    wg = torch.randn(C, F * L * C, generator=g, dtype=F64) / C**0.5
    return w0, wm, wg


def test_packed_weights_follow_in_place_edits():
    """The per-call weight tiles are cached per weight tensor and mode and rebuilt after an
    in-place edit."""
    w0, wm, _ = (t.float() for t in _weights(2, 16))
    a = sw.packed_weights(w0, wm, 1, 2, 16, False)
    assert sw.packed_weights(w0, wm, 1, 2, 16, False) is a
    assert sw.packed_weights(w0, wm, 1, 2, 16, True) is not a
    assert sw.packed_weights(w0, wm, 1, 2, 16, False, "fp16x3") is not a
    with torch.no_grad():
        wm.mul_(2.0)
    b = sw.packed_weights(w0, wm, 1, 2, 16, False)
    assert b is not a
    want = sw.pack_weights(w0, wm, 1, 2, 16, False)
    assert all(torch.equal(u, v) for u, v in zip(b[:2], want[:2]))
    wm2 = wm.clone()
    assert sw.packed_weights(w0, wm2, 1, 2, 16, False) is not b


def test_weight_tiles_split_exactly():
    """Every packed tf32x3 tile pair is two TF32 values whose sum is the fp32 weight to 2^-21."""
    w0, wm, _ = (t.float() for t in _weights(2, 16))
    wh, wl, scale = sw.pack_weights(w0, wm, 1, 2, 16, False)
    assert scale == 1.0
    for t in (wh, wl):
        assert not (t.view(torch.int32) & 0x1FFF).any()  # 10 mantissa bits at most
    tiles = (wh.double() + wl.double()).view(1, 7, 4, 16, 16)
    W0, Wu, Wv = sw.oriented(w0, wm, 1, 2, False)
    # row j = 1 (m = 0, l = 1), k = 2: W0[x row 2 -> out row 1], stored [c_out][c_in]
    want = W0[0, 32:48, 16:32].T.double()
    torch.testing.assert_close(tiles[0, 1, 2], want, rtol=2**-20, atol=0)
    # row j = 2L + 1 = 5 (m = +1, l = 1), k = L = 2 (x₊ of l = 1): Q₊ = Wu
    torch.testing.assert_close(tiles[0, 5, 2], Wu[0, 0:16, 0:16].T.double(), rtol=2**-20, atol=0)


@pytest.mark.parametrize("magnitude", [1e-6, 1.0, 3e4, 1e7])
def test_fp16_split_keeps_22_bits_at_any_scale(magnitude):
    """W·scale = hi + lo/2¹¹ to 2⁻²¹ relative to the largest weight, no inf, the largest scaled
    weight in [2¹³, 2¹⁴) whatever the weights' magnitude."""
    w0, wm, _ = (t.float() * magnitude for t in _weights(3, 16))
    tiles = sw.weight_tiles(w0, wm, 1, 3, 16, False)
    hi, lo, scale = sw.pack_weights(w0, wm, 1, 3, 16, False, "fp16x3")
    assert hi.dtype == lo.dtype == torch.float16
    assert torch.isfinite(hi).all() and torch.isfinite(lo).all()
    top = float(tiles.abs().max()) * scale
    assert 2**13 <= top < 2**14
    back = (hi.double() + lo.double() / sw.FP16_LO_SCALE) / scale
    err = float((back - tiles.double()).abs().max())
    assert err <= 2**-21 * float(tiles.abs().max())
    single, _, s1 = sw.pack_weights(w0, wm, 1, 3, 16, False, "fp16")
    assert s1 == scale and torch.equal(single, hi)


def test_all_zero_weights_split():
    hi, lo, scale = sw.split_fp16(torch.zeros(4, 16))
    assert scale == 1.0 and not hi.any() and not lo.any()


def test_unknown_split_mode():
    w0, wm, _ = (t.float() for t in _weights(1, 16))
    with pytest.raises(ValueError, match="split mode"):
        sw.pack_weights(w0, wm, 1, 1, 16, False, "bf16x9")


def test_packed_weights_released_with_the_weights():
    w0, wm, _ = (t.float() for t in _weights(1, 16))
    sw.packed_weights(w0, wm, 1, 1, 16, False)
    key = (id(w0), id(wm), False, "tf32x3", 1)
    assert key in sw._PACKED
    del w0
    assert key not in sw._PACKED


@pytest.mark.parametrize(
    "x_scale,w_scale",
    [(1e-7, 1.0), (1e-5, 1.0), (1e-3, 1.0), (1e3, 1.0), (1e7, 1.0), (1.0, 1e3), (3e4, 1e-4)],
)
def test_fp16x3_accurate_far_from_one(kdev, x_scale, w_scale):
    """fp16x3 stays at fp32 rounding for inputs from 1e-7 to 1e7 and weights from 1e-4 to 1e3,
    forward and backward (the cotangents of a trained model's layers lie below 1e-3)."""
    L, C, E = 2, 16, 21
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, E, 3 * L + 1, C, generator=g, dtype=F64) * x_scale
    gy = torch.randn(1, E, 3 * L + 1, C, generator=g, dtype=F64) * x_scale
    w0, wm, _ = _weights(L, C, seed=4)
    w0, wm = w0 * w_scale, wm * w_scale
    lin_want = ss.linear_reference(x, w0, wm, L)
    glin_want = ss.linear_t_reference(gy, w0, wm, L)
    xa = x.to(F32).to(kdev).requires_grad_(True)
    w = (w0.to(F32).to(kdev), wm.to(F32).to(kdev))
    with cm.force_triton(), tuning.override(so2_stack=with_linear("fp16x3", **SMALL)):
        y = so2_mix_layer(xa, *w, None, L, "fp16x3")
        (gx,) = torch.autograd.grad(y, xa, gy.to(F32).to(kdev))
    # y = x + x·W, gx = gy + gy·Wᵀ: compare the linear parts, allowing the sum's fp32 rounding
    for got, res, want in ((y.detach(), x, lin_want), (gx, gy, glin_want)):
        lin = got.cpu().double() - res
        atol = 2e-6 * float(want.abs().max()) + 2**-23 * float((res + want).abs().max())
        torch.testing.assert_close(lin, want, rtol=0, atol=atol)


def test_fp16_modes_keep_tiny_rows_beside_large_ones(kdev):
    """Edges whose inputs are 1e-9 of the largest keep their own relative accuracy (each edge's
    row segment is scaled by its own power of two, not the call's largest element)."""
    L, C, E = 2, 16, 24
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, E, 3 * L + 1, C, generator=g, dtype=F64)
    x[:, ::2] *= 1e-9
    w0, wm, _ = _weights(L, C, seed=6)
    want = ss.linear_reference(x, w0, wm, L)
    for mode, rel in (("fp16x3", 2e-6), ("fp16", 2e-3)):
        with cm.force_triton(), tuning.override(so2_stack=with_linear(mode, **SMALL)):
            w = (w0.float().to(kdev), wm.float().to(kdev))
            y = so2_mix_layer(x.to(F32).to(kdev), *w, None, L, mode)
        lin = y.cpu().double() - x
        big = float(want.abs().max())
        torch.testing.assert_close(lin, want, rtol=0, atol=rel * big)
        # the tiny rows, to the mode's relative accuracy of their own largest output
        tiny = float(want[:, ::2].abs().max())
        assert float((lin - want)[:, ::2].abs().max()) <= rel * tiny
