"""Band producer vs dense Wigner-D, harmonics convention and frame smoothness (float64)."""

import math

import pytest
import torch

from mdband.errors import LayoutMismatchError
from mdband.so3 import storage as st
from mdband.so3.frames import edge_frame
from mdband.so3.harmonics import spherical_harmonics
from mdband.so3.wigner import band_from_unit, dense_from_unit, rotation_storage

F64 = torch.float64

AXES = torch.tensor(
    [[0, 0, 1.0], [0, 0, -1.0], [1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, -1.0, 0]], dtype=F64
)


def directions(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(n, 3, generator=g, dtype=F64)
    u = torch.cat([u, AXES, torch.tensor([[1e-9, 0, 1.0], [0, 1e-9, -1.0]], dtype=F64)])
    return u / u.norm(dim=1, keepdim=True)


@pytest.mark.parametrize("lmax", range(0, 9))
def test_band_equals_dense_rows(lmax):
    u = directions()
    band = band_from_unit(u, lmax)
    dense = dense_from_unit(u, lmax)
    assert band.shape == (u.shape[0], st.band_width(lmax))
    torch.testing.assert_close(band, st.dense_to_band(dense, lmax), rtol=0, atol=1e-13)
    # dense is orthogonal and maps Y(u) to e_(l,0)
    eye = torch.eye(st.dim_of(lmax), dtype=F64).expand_as(dense)
    torch.testing.assert_close(dense @ dense.transpose(1, 2), eye, rtol=0, atol=1e-13)
    e0 = torch.zeros(st.dim_of(lmax), dtype=F64)
    e0[[l * l + l for l in range(lmax + 1)]] = 1
    y = spherical_harmonics(lmax, u)
    torch.testing.assert_close((dense @ y[..., None])[..., 0], e0.expand_as(y), rtol=0, atol=1e-13)


@pytest.mark.parametrize("lmax", [1, 3, 5])
def test_band_to_dense_roundtrip(lmax):
    u = directions(10)
    band = band_from_unit(u, lmax)
    dense = st.band_to_dense(band, lmax)
    torch.testing.assert_close(st.dense_to_band(dense, lmax), band, rtol=0, atol=0)
    full = dense_from_unit(u, lmax)
    mask = dense != 0
    torch.testing.assert_close(dense[mask], full[mask], rtol=0, atol=1e-13)


def test_harmonics_known_values():
    u = directions(20)
    x, y, z = u.unbind(-1)
    Y = spherical_harmonics(2, u)
    s3 = math.sqrt(3.0)
    ref = torch.stack(
        [
            torch.ones_like(x),
            y,
            z,
            -x,
            -s3 * x * y,
            s3 * y * z,
            (3 * z * z - 1) / 2,
            -s3 * x * z,
            s3 / 2 * (x * x - y * y),
        ],
        dim=-1,
    )
    torch.testing.assert_close(Y, ref, rtol=0, atol=1e-14)
    # norm normalisation: sum_m Y_lm^2 = 1 for every l
    Y8 = spherical_harmonics(8, u)
    for l in range(9):
        torch.testing.assert_close(
            (Y8[:, l * l : (l + 1) ** 2] ** 2).sum(-1),
            torch.ones(u.shape[0], dtype=F64),
            rtol=0,
            atol=1e-13,
        )


def test_harmonics_gradient_matches_autograd():
    u = directions(8).requires_grad_(True)
    Y, G = spherical_harmonics(4, u, with_grad=True)
    for k in range(Y.shape[1]):
        (g,) = torch.autograd.grad(Y[:, k].sum(), u, retain_graph=True)
        torch.testing.assert_close(G[:, k], g, rtol=0, atol=1e-12)


def test_frame_is_orthonormal_right_handed():
    u = directions()
    xp, yp = edge_frame(u)
    torch.testing.assert_close(torch.linalg.cross(xp, yp), u, rtol=0, atol=1e-14)
    for a, b in ((xp, xp), (yp, yp)):
        torch.testing.assert_close(
            (a * b).sum(-1), torch.ones(u.shape[0], dtype=F64), rtol=0, atol=1e-14
        )
    torch.testing.assert_close(
        (xp * yp).sum(-1), torch.zeros(u.shape[0], dtype=F64), rtol=0, atol=1e-14
    )


@pytest.mark.parametrize("lmax", [2, 4])
def test_band_gradient_finite_along_axes(lmax):
    v = (AXES * 1.7).clone().requires_grad_(True)
    band = rotation_storage(v, lmax, st.RotationLayout.BAND).data
    w = torch.randn(band.shape, generator=torch.Generator().manual_seed(1), dtype=F64)
    (g,) = torch.autograd.grad((band * w).sum(), v)
    assert torch.isfinite(g).all()


def test_storage_rejects_wrong_shape_and_layout():
    band = torch.zeros(3, st.band_width(3), dtype=F64)
    s = st.RotationStorage(st.RotationLayout.BAND, 3, band)
    with pytest.raises(LayoutMismatchError):
        s.require(st.RotationLayout.DENSE, "test-consumer")
    with pytest.raises(LayoutMismatchError):
        st.RotationStorage(st.RotationLayout.DENSE, 3, band)


@pytest.mark.parametrize("lmax_storage,lmax", [(3, 3), (3, 2), (4, 1)])
def test_rotations_band_vs_dense(lmax_storage, lmax):
    g = torch.Generator().manual_seed(3)
    v = torch.randn(12, 3, generator=g, dtype=F64)
    band = rotation_storage(v, lmax_storage, st.RotationLayout.BAND)
    dense = rotation_storage(v, lmax_storage, st.RotationLayout.DENSE)
    x = torch.randn(12, st.dim_of(lmax), 5, generator=g, dtype=F64)
    xl_b = st.rotate_to_local(band, x, lmax)
    xl_d = st.rotate_to_local(dense, x, lmax)
    torch.testing.assert_close(xl_b, xl_d, rtol=0, atol=1e-12)
    y = torch.randn(12, st.reduced_dim(lmax), 5, generator=g, dtype=F64)
    torch.testing.assert_close(
        st.rotate_back(band, y, lmax), st.rotate_back(dense, y, lmax), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(st.zonal(band, lmax), st.zonal(dense, lmax), rtol=0, atol=1e-12)
