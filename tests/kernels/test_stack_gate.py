"""The gate kernels of so2_mix_layer: both backward kernels against the float64 reference."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import intercept_launches

from mdband.kernels import _common as cm
from mdband.kernels import _stack_gate as sg
from mdband.kernels import so2_stack as ss

F64, F32 = torch.float64, torch.float32
TOL = 2e-6  # relative to the largest element: fp32 rounding and tf32x3's 2⁻²¹ per product


def _case(L, C, F, E, seed):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(F, E, 3 * L + 1, C, generator=g, dtype=F64)
    gy = torch.randn(F, E, 3 * L + 1, C, generator=g, dtype=F64)
    w0 = torch.randn((L + 1) * C, F * (L + 1) * C, generator=g, dtype=F64) / ((L + 1) * C) ** 0.5
    wm = torch.randn(L * C, F * 2 * L * C, generator=g, dtype=F64) / (L * C) ** 0.5
    wg = torch.randn(C, F * L * C, generator=g, dtype=F64) / C**0.5
    return gy, h, w0, wm, wg


def _op_bwd(kdev, gy, h, w0, wm, wg, L):
    args = [t.to(F32).to(kdev) for t in (gy, h, w0, wm, wg)]
    with cm.force_triton():
        return torch.ops.mdband.so2_mix_layer_bwd(*args, L, True, "tf32x3").cpu().double()


@pytest.mark.parametrize("kernel", sg.BWD_KERNELS)
@pytest.mark.parametrize("BE,warps", [(16, 4), (32, 2)])
@pytest.mark.parametrize("L,C,F,E", [(1, 16, 1, 21), (2, 16, 2, 40), (3, 16, 1, 37)])
def test_backward_kernels_match_float64(kdev, L, C, F, E, BE, warps, kernel, monkeypatch):
    """gx = gy + (act'(h)ᵀ gy)·Wᵀ of either gate kernel (per degree; all degrees in one tile,
    L·C padded to a power of two at L = 3) within fp32 level of float64, several programs and
    a ragged tail of edges, one and two focus streams."""
    gy, h, w0, wm, wg = _case(L, C, F, E, seed=L + F)
    seen = []
    intercept_launches(monkeypatch, lambda k, grid, kw: seen.append((k.__name__, kw["BE"])))
    monkeypatch.setitem(sg.BWD, "kernel", kernel)
    monkeypatch.setitem(sg.BWD, "BE", BE)
    monkeypatch.setitem(sg.BWD, "warps", warps)
    got = _op_bwd(kdev, gy, h, w0, wm, wg, L)
    want = ss.so2_mix_layer_bwd_reference(gy, h, w0, wm, wg, L, True)
    name = "_gate_bwd_all_kernel" if kernel == "all" else "_gate_bwd_kernel"
    assert (name, BE) in seen
    torch.testing.assert_close(got, want, rtol=0, atol=TOL * float(want.abs().max()))


def test_backward_kernels_agree(kdev, monkeypatch):
    """The two kernels give the same gradient to fp32 rounding (their sums differ in order)."""
    gy, h, w0, wm, wg = _case(2, 32, 1, 50, seed=9)
    out = {}
    for kernel in sg.BWD_KERNELS:
        monkeypatch.setitem(sg.BWD, "kernel", kernel)
        out[kernel] = _op_bwd(kdev, gy, h, w0, wm, wg, 2)
    scale = float(out["degree"].abs().max())
    torch.testing.assert_close(out["all"], out["degree"], rtol=0, atol=1e-6 * scale)


def test_launch_defaults_and_bad_kernel(monkeypatch):
    """Without overrides the backward takes BWD_SHAPES' launch, else the shape's gate launch;
    a kernel name not in BWD_KERNELS is refused by name."""
    gate = {"BE": 32, "fwd_warps": 4, "bwd_warps": 8}
    monkeypatch.setitem(sg.BWD_SHAPES, (3, 64), {"BE": 64, "warps": 4})
    assert sg.bwd_launch(3, 32, gate) == ("degree", 32, 8)
    assert sg.bwd_launch(3, 64, gate) == ("degree", 64, 4)  # BWD_SHAPES
    monkeypatch.setitem(sg.BWD, "warps", 2)
    assert sg.bwd_launch(3, 64, gate) == ("degree", 64, 2)
    monkeypatch.setitem(sg.BWD, "kernel", "fused")
    with pytest.raises(ValueError, match="gate backward kernel must be one of"):
        sg.bwd_launch(3, 64, gate)
