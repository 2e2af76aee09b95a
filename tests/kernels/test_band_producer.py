"""band_producer: equals wigner.band_from_unit(unit_vectors(v)), backward equals autograd."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import edge_vectors, grads

from mdband.kernels import _common as cm
from mdband.kernels.band_producer import (
    band_producer,
    band_producer_bwd_reference,
    band_producer_reference,
    band_storage,
)
from mdband.so3 import storage as st
from mdband.so3.frames import unit_vectors
from mdband.so3.wigner import band_from_unit, dense_from_unit

F64, F32 = torch.float64, torch.float32
TRITON_CASES = [(L, F64) for L in range(7)] + [(1, F32), (3, F32), (6, F32)]


def _autograd_grad(v, L, gband):
    v = v.detach().clone().requires_grad_(True)
    ref = band_producer_reference(v, L)
    if not ref.requires_grad:  # L = 0: the band is the constant 1
        return ref, torch.zeros_like(v)
    return ref, grads(ref, (v,), gband)[0]


@pytest.mark.parametrize("L,dtype", TRITON_CASES)
def test_triton_matches_reference(kdev, L, dtype):
    E = 16
    v = edge_vectors(E, dtype, kdev, seed=L)
    g = torch.Generator().manual_seed(100 + L)
    gband = torch.randn(E, st.band_width(L), generator=g, dtype=F64).to(dtype).to(kdev)
    ref, gref = _autograd_grad(v, L, gband)
    vv = v.clone().requires_grad_(True)
    with cm.force_triton():
        out = band_producer(vv, L)
        gout = grads(out, (vv,), gband)[0]
    t = {"rtol": 1e-12, "atol": 1e-12} if dtype == F64 else {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(out, ref, **t)
    scale = float(gref.abs().max()) + 1.0
    torch.testing.assert_close(gout, gref, rtol=t["rtol"], atol=t["atol"] * scale * 10)


@pytest.mark.parametrize("L", range(7))
def test_closed_form_backward_matches_autograd(L):
    E = 12
    v = edge_vectors(E, F64, seed=20 + L)
    gband = torch.randn(E, st.band_width(L), generator=torch.Generator().manual_seed(L), dtype=F64)
    _, gref = _autograd_grad(v, L, gband)
    torch.testing.assert_close(
        band_producer_bwd_reference(gband, v, L), gref, rtol=1e-12, atol=1e-12
    )


def test_matches_dense_wigner_rows():
    """The band is the m ∈ {−1, 0, 1} rows of the (independently built) dense Wigner matrix."""
    L = 4
    v = edge_vectors(10, F64, seed=1)
    band = band_producer(v, L)
    u, _ = unit_vectors(v)
    torch.testing.assert_close(band, st.dense_to_band(dense_from_unit(u, L), L), atol=1e-12, rtol=0)
    torch.testing.assert_close(band, band_from_unit(u, L), atol=0, rtol=0)


def test_gradcheck_reference_op():
    v = edge_vectors(4, F64, seed=3).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: band_producer(x, 2), (v,), eps=1e-6, atol=1e-7)


def test_zero_edges_and_storage(kdev):
    v = torch.zeros(0, 3, dtype=F32, device=kdev, requires_grad=True)
    with cm.force_triton():
        b = band_producer(v, 3)
        (g,) = grads(b, (v,), torch.zeros_like(b))
    assert b.shape == (0, st.band_width(3)) and g.shape == (0, 3)
    S = band_storage(edge_vectors(5, F64), 2)
    assert S.layout is st.RotationLayout.BAND and S.lmax == 2
    with pytest.raises(ValueError):
        band_producer(torch.zeros(3, 2), 2)
