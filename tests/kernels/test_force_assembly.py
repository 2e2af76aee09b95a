"""force_assembly: float64 forces and virial, deterministic CSR reduction."""

from __future__ import annotations

import pytest
import torch

from mdband.kernels import _common as cm
from mdband.kernels.force_assembly import force_assembly


def _inputs(E, N, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    grad = torch.randn(E, 3, generator=g, dtype=torch.float64).to(dtype).to(device)
    vec = torch.randn(E, 3, generator=g, dtype=torch.float64).to(dtype).to(device)
    src = torch.randint(0, N - 1, (E,), generator=g).to(device)  # last node isolated
    dst = torch.randint(0, N - 1, (E,), generator=g).to(device)
    return grad, vec, src, dst


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("E", [0, 1, 23])
def test_triton_matches_definition(kdev, dtype, E):
    N = 6
    g, v, src, dst = _inputs(E, N, dtype, kdev)
    with cm.force_triton():
        f, w = force_assembly(g, v, src, dst, N)
    assert f.dtype == torch.float64 and w.dtype == torch.float64
    assert f.shape == (N, 3) and w.shape == (3, 3)
    g64, v64 = g.double().cpu(), v.double().cpu()
    want_f = torch.zeros(N, 3, dtype=torch.float64)
    for e in range(E):
        want_f[dst[e]] += g64[e]
        want_f[src[e]] -= g64[e]
    want_w = -(g64[:, :, None] * v64[:, None, :]).sum(0)
    torch.testing.assert_close(f.cpu(), want_f, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w.cpu(), want_w, rtol=1e-12, atol=1e-12)
    f_ref, w_ref = force_assembly(g.cpu(), v.cpu(), src.cpu(), dst.cpu(), N)
    torch.testing.assert_close(f.cpu(), f_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w.cpu(), w_ref, rtol=1e-12, atol=1e-12)
    assert torch.count_nonzero(f[N - 1]) == 0


def test_not_differentiable():
    g, v, src, dst = _inputs(5, 4, torch.float64, "cpu")
    g.requires_grad_(True)
    f, w = force_assembly(g, v, src, dst, 4)
    assert not f.requires_grad and not w.requires_grad
