"""split_matmul: the tf32x3 kernel against float64 torch (values, both gradients, strides)."""

from __future__ import annotations

import pytest
import torch

from mdband.kernels import _common as cm
from mdband.kernels import split_matmul as smm

F64, F32 = torch.float64, torch.float32
#: relative to the largest |x|·|w| sum of a row: tf32x3 drops the lo·lo term (≈ 2⁻²² each)
TOL = 2e-6


def _case(M, K, N, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g, dtype=F64), torch.randn(K, N, generator=g, dtype=F64)


def _close(got, want, scale):
    torch.testing.assert_close(got.detach().cpu().double(), want, rtol=0, atol=TOL * scale)


@pytest.mark.parametrize(
    "M,K,N", [(1, 16, 16), (37, 13, 96), (130, 96, 13), (64, 48, 64), (200, 33, 150), (5, 1, 7)]
)
def test_product_and_gradients_match_float64(kdev, M, K, N):
    """y, gx and gw against float64: widths below a tile (K = 13: one masked k step), not
    powers of two, more than one row and column block (M = 200, N = 150), K of one."""
    x, w = _case(M, K, N, seed=M + K + N)
    g = torch.randn(M, N, generator=torch.Generator().manual_seed(1), dtype=F64)
    xk, wk = (t.to(F32).to(kdev).requires_grad_() for t in (x, w))
    with cm.force_triton():
        y = smm.split_matmul(xk, wk)
        gx, gw = torch.autograd.grad(y, (xk, wk), g.to(F32).to(kdev))
    assert y.shape == (M, N) and y.dtype == F32
    scale = float((x.abs() @ w.abs()).max())
    _close(y, x @ w, scale)
    _close(gx, g @ w.t(), float((g.abs() @ w.abs().t()).max()))
    _close(gw, x.t() @ g, float((x.abs().t() @ g.abs()).max()))  # torch's fp32 product


def test_the_kernel_runs_and_reads_views_in_place(kdev, monkeypatch):
    """A transposed x and a sliced w go to the kernel without copies and give x @ w; the
    backward's gx comes from the kernel too (two launches)."""
    x, w = _case(24, 40, 20, seed=3)
    xt = x.t().contiguous().t()  # column-major (24, 40)
    wide = torch.cat([w, w], dim=1)[:, 5:25]  # (40, 20) inside a (40, 40)
    launches = []
    real = cm.wrap

    def spy(kernel):
        launches.append(kernel.__name__ if hasattr(kernel, "__name__") else str(kernel))
        return real(kernel)

    monkeypatch.setattr(cm, "wrap", spy)
    xk = xt.to(F32).to(kdev).requires_grad_()
    wk = torch.cat([w, w], dim=1).to(F32).to(kdev)[:, 5:25]
    assert xk.stride() != (40, 1) and wk.stride() != (20, 1)
    with cm.force_triton():
        y = smm.split_matmul(xk, wk)
        (gx,) = torch.autograd.grad(y.sum(), (xk,))
    assert len(launches) == 2
    _close(y, xt @ wide, float((x.abs() @ w.abs()).max()))
    _close(gx, torch.ones(24, 20, dtype=F64) @ wide.t(), float(w.abs().sum(1).max()))


def test_leading_dims_and_fallbacks(kdev):
    """(..., K) inputs keep their leading shape; float64, fused=False and KERNELS "torch" are
    torch's product exactly."""
    x, w = _case(30, 12, 8, seed=4)
    x3 = x.reshape(5, 6, 12)
    with cm.force_triton():
        y = smm.split_matmul(x3.to(F32).to(kdev), w.to(F32).to(kdev))
        assert y.shape == (5, 6, 8)
        _close(y.reshape(30, 8), x @ w, float((x.abs() @ w.abs()).max()))
        assert torch.equal(smm.split_matmul(x3, w), x3 @ w)  # float64: torch
        x32, w32 = x.to(F32), w.to(F32)
        assert torch.equal(smm.split_matmul(x32, w32, fused=False), x32 @ w32)
        saved = dict(smm.KERNELS)
        try:
            smm.KERNELS["fwd"] = "torch"
            assert torch.equal(smm.split_matmul(x32, w32), x32 @ w32)
        finally:
            smm.KERNELS.update(saved)


def test_rows_do_not_depend_on_the_other_rows(kdev):
    """On a GPU a row's result is the same bits whether it is computed alone or among others,
    at another position of its tile (what keeps chunked evaluation equal to the unchunked
    one); the interpreter's numpy products round by position, so there to fp32 rounding."""
    x, w = _case(150, 40, 24, seed=5)
    xk, wk = x.to(F32).to(kdev), w.to(F32).to(kdev)
    with cm.force_triton():
        full = smm.split_matmul(xk, wk)
        part = smm.split_matmul(xk[77:141], wk)
    if kdev.type == "cuda":
        assert torch.equal(full[77:141], part)
    else:
        torch.testing.assert_close(full[77:141], part, rtol=0, atol=1e-6 * float(full.abs().max()))


def test_twice_differentiable(kdev):
    """The backward is built of the op and torch products: a second derivative exists and
    equals float64's."""
    x, w = _case(20, 16, 16, seed=6)
    xk = x.to(F32).to(kdev).requires_grad_()
    wk = w.to(F32).to(kdev).requires_grad_()
    with cm.force_triton():
        y = smm.split_matmul(xk, wk)
        (gx,) = torch.autograd.grad((y * y).sum(), (xk,), create_graph=True)
        (gw,) = torch.autograd.grad(gx.sum(), (wk,))
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    yr = xr @ wr
    (gxr,) = torch.autograd.grad((yr * yr).sum(), (xr,), create_graph=True)
    (gwr,) = torch.autograd.grad(gxr.sum(), (wr,))
    torch.testing.assert_close(
        gw.cpu().double(), gwr, rtol=1e-5, atol=1e-5 * float(gwr.abs().max())
    )


def test_bad_inputs_raise():
    x, w = _case(4, 5, 6, seed=0)
    with pytest.raises(ValueError, match="split_matmul"):
        smm.split_matmul(x, w[:4])
    with pytest.raises(ValueError, match="split_matmul"):
        smm.split_matmul(x, w[None])
    saved = dict(smm.KERNELS)
    try:
        smm.KERNELS["fwd"] = "cublas"
        with pytest.raises(ValueError, match="split_matmul.KERNELS"):
            smm.split_matmul(x.to(F32), w.to(F32))
    finally:
        smm.KERNELS.update(saved)
