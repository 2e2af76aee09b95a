"""The gate kernels of so2_mix_layer: the backward kernel against the float64 reference."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import intercept_launches

from mdband.kernels import _common as cm
from mdband.kernels import so2_stack as ss
from mdband.kernels import tuning

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


@pytest.mark.parametrize("BE,warps", [(16, 4), (32, 2)])
@pytest.mark.parametrize("L,C,F,E", [(1, 16, 1, 21), (2, 16, 2, 40), (3, 16, 1, 37)])
def test_backward_kernel_matches_float64(kdev, L, C, F, E, BE, warps, monkeypatch):
    """gx = gy + (act'(h)ᵀ gy)·Wᵀ with the gate kernel at the shape's launch (the tuning
    table's so2_stack shapes) within fp32 level of float64: several programs and a ragged tail
    of edges, one and two focus streams."""
    gy, h, w0, wm, wg = _case(L, C, F, E, seed=L + F)
    seen = []
    intercept_launches(
        monkeypatch,
        lambda k, grid, kw: seen.append((k.__name__, kw["BLOCK_EDGES"], kw["num_warps"])),
    )
    gate = tuning.GateLaunch(edges=BE, fwd_warps=4, bwd_warps=warps)
    with tuning.override(so2_stack={"shapes": {(L, C): tuning.StackShape(gate=gate)}}):
        got = _op_bwd(kdev, gy, h, w0, wm, wg, L)
    want = ss.so2_mix_layer_bwd_reference(gy, h, w0, wm, wg, L, True)
    assert ("so2_gate_bwd_kernel", BE, warps) in seen
    torch.testing.assert_close(got, want, rtol=0, atol=TOL * float(want.abs().max()))
