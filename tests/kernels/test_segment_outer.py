"""segment_outer: the Triton kernels against the float64 torch reference (values, gradients)."""

from __future__ import annotations

import pytest
import torch

from mdband.kernels import _common as cm
from mdband.kernels import segment_outer as so

F64, F32 = torch.float64, torch.float32
TOL = {F64: 1e-12, F32: 1e-6}  # relative to the largest element: summation order only


def _case(E, n, P, Q, seed, empty_node=True):
    g = torch.Generator().manual_seed(seed)
    index = torch.randint(0, n, (E,), generator=g)
    if empty_node:
        index[index == n - 1] = 0  # the last node has no edges: its sum is zero
    a = torch.randn(E, P, generator=g, dtype=F64)
    b = torch.randn(E, Q, generator=g, dtype=F64)
    return a, b, index


def _close(got, want, dtype):
    scale = float(want.abs().max()) if want.numel() else 1.0
    torch.testing.assert_close(got.cpu().double(), want, rtol=0, atol=TOL[dtype] * scale)


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("E,n,P,Q", [(0, 3, 4, 8), (1, 2, 4, 8), (70, 5, 4, 32), (150, 9, 3, 20),
                                     (97, 4, 4, 64), (60, 5, 7, 8)])  # fmt: skip
def test_sums_and_gradients_match_float64(kdev, dtype, E, n, P, Q):
    """out, ga and gb against the float64 reference: segments of many edges (several loop steps
    of BLOCK_EDGES), one edge, none (a node without edges sums to zero), and widths that are
    not powers of two (P = 7: a native spin model's environment matrix)."""
    a, b, index = _case(E, n, P, Q, seed=E + Q)
    perm, ptr = cm.csr(index, n)
    want = so.segment_outer_reference(a, b, index, perm, ptr)
    gout = torch.randn(n, P, Q, generator=torch.Generator().manual_seed(1), dtype=F64)
    want_ga, want_gb = so.segment_outer_bwd_reference(gout, a, b, index)
    ak, bk = (t.to(dtype).to(kdev).requires_grad_() for t in (a, b))
    with cm.force_triton():
        got = so.segment_outer(ak, bk, index.to(kdev), (perm.to(kdev), ptr.to(kdev)))
        ga, gb = torch.autograd.grad(got, (ak, bk), gout.to(dtype).to(kdev))
    assert got.shape == (n, P, Q) and got.dtype == dtype
    _close(got.detach(), want, dtype)
    if E:
        assert float(got[n - 1].abs().max()) == 0.0
    _close(ga, want_ga, dtype)
    _close(gb, want_gb, dtype)


def test_reference_gradients_are_autograd_of_the_reference():
    """The closed-form backward is autograd's gradient of the materialised products."""
    a, b, index = _case(60, 6, 4, 12, seed=3)
    perm, ptr = cm.csr(index, 6)
    a.requires_grad_()
    b.requires_grad_()
    gout = torch.randn(6, 4, 12, generator=torch.Generator().manual_seed(2), dtype=F64)
    ga, gb = torch.autograd.grad(so.segment_outer_reference(a, b, index, perm, ptr), (a, b), gout)
    want_ga, want_gb = so.segment_outer_bwd_reference(gout, a.detach(), b.detach(), index)
    torch.testing.assert_close(ga, want_ga, rtol=0, atol=1e-12)
    torch.testing.assert_close(gb, want_gb, rtol=0, atol=1e-12)


def test_bad_shapes_raise():
    a, b, index = _case(10, 3, 4, 8, seed=0)
    perm, ptr = cm.csr(index, 3)
    with pytest.raises(ValueError, match="segment_outer"):
        so.segment_outer(a, b[:5], index, (perm, ptr))
    with pytest.raises(ValueError, match="segment_outer"):
        so.segment_outer(a[:, :, None], b, index, (perm, ptr))
