"""S2 / SO(3) grid projectors: layout, exactness and equivariance (no deepmd-kit needed)."""

from __future__ import annotations

import pytest
import torch

from mdband.model.grids import (
    build_s2_projector,
    build_so3_projector,
    grid_product,
    s2_projector,
    so3_frames,
    so3_projector,
    wigner_from_matrix,
)
from mdband.so3.harmonics import spherical_harmonics
from mdband.so3.quadrature import sphere_rule
from mdband.so3.wigner import dense_from_unit, rotation_matrices

F64 = torch.float64


def _random_rotations(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, 3, 3, generator=g, dtype=F64))
    return q * torch.sign(torch.linalg.det(q))[:, None, None]


def _valid_mask(lmax: int, kmax: int) -> torch.Tensor:
    frames = so3_frames(kmax)
    return torch.tensor(
        [abs(k) <= l for l in range(lmax + 1) for _ in range(2 * l + 1) for k in frames],
        dtype=F64,
    )


def test_frames_order():
    assert so3_frames(0) == [0]
    assert so3_frames(1) == [0, -1, 1]
    assert so3_frames(2) == [0, -1, 1, -2, 2]


@pytest.mark.parametrize("lmax", [1, 2, 3, 4])
def test_wigner_from_matrix(lmax):
    rot = _random_rotations(4, lmax)
    d = wigner_from_matrix(rot, lmax)
    eye = torch.eye((lmax + 1) ** 2, dtype=F64)
    assert torch.allclose(d @ d.transpose(-1, -2), eye, atol=1e-13)
    # homomorphism D(R1 R2) = D(R1) D(R2)
    d12 = wigner_from_matrix(rot[0] @ rot[1], lmax)
    assert torch.allclose(d12, d[0] @ d[1], atol=1e-13)
    # Y(R v) = D(R) Y(v)
    v = torch.nn.functional.normalize(torch.randn(7, 3, dtype=F64), dim=-1)
    y_rot = spherical_harmonics(lmax, v @ rot[2].T)
    assert torch.allclose(y_rot, spherical_harmonics(lmax, v) @ d[2].T, atol=1e-13)
    # agrees with the edge-frame construction
    u = torch.nn.functional.normalize(torch.randn(5, 3, dtype=F64), dim=-1)
    ref = dense_from_unit(u, lmax)
    assert torch.allclose(wigner_from_matrix(rotation_matrices(u), lmax), ref, atol=1e-13)


@pytest.mark.parametrize("lmax", [0, 1, 2, 3])
def test_s2_projector_layout(lmax):
    p = s2_projector(lmax)
    dim = (lmax + 1) ** 2
    assert p.to_grid.dtype == F64 and p.from_grid.dtype == F64
    assert p.to_grid.shape == (p.grid_size, dim) and p.from_grid.shape == (dim, p.grid_size)
    assert p.n_frames == 1
    # B·T = I (analysis inverts synthesis)
    assert torch.allclose(p.from_grid @ p.to_grid, torch.eye(dim, dtype=F64), atol=1e-13)
    # T = Y / sqrt(L+1) at the grid points: constant l = 0 column
    assert torch.allclose(
        p.to_grid[:, 0], torch.full((p.grid_size,), (lmax + 1) ** -0.5, dtype=F64)
    )
    assert s2_projector(lmax) is p


@pytest.mark.parametrize("lmax,kmax", [(1, 0), (1, 1), (2, 1), (3, 1), (3, 2)])
def test_so3_projector_layout(lmax, kmax):
    p = so3_projector(lmax, kmax)
    n_k = 2 * kmax + 1
    dim = (lmax + 1) ** 2
    assert p.n_frames == n_k
    assert p.to_grid.shape == (p.grid_size, dim * n_k)
    assert p.from_grid.shape == (dim * n_k, p.grid_size)
    valid = _valid_mask(lmax, kmax)
    # columns / rows with |k| > l are zero; B·T is the identity on the valid ones
    assert not p.to_grid[:, valid == 0].any()
    assert not p.from_grid[valid == 0].any()
    assert torch.allclose(p.from_grid @ p.to_grid, torch.diag(valid), atol=1e-13)
    # frame k = 0 column of (l, m) is Y_lm at the grid point (R_g maps it to +z)
    n_gamma = 1 if kmax == 0 else 3 * kmax + 1
    pts, _ = sphere_rule(3 * lmax)
    y = spherical_harmonics(lmax, pts).repeat_interleave(n_gamma, dim=0)
    assert torch.allclose(p.to_grid[:, 0::n_k], y, atol=1e-13)
    assert so3_projector(lmax, kmax) is p


def test_so3_projector_rejects_bad_kmax():
    with pytest.raises(ValueError):
        build_so3_projector(1, 2)


@pytest.mark.parametrize("lmax", [1, 2, 3])
def test_s2_product_is_exact(lmax):
    """The default rule gives the same product projection as a much finer rule."""
    g = torch.Generator().manual_seed(lmax)
    a = torch.randn(3, (lmax + 1) ** 2, 5, generator=g, dtype=F64)
    b = torch.randn(3, (lmax + 1) ** 2, 5, generator=g, dtype=F64)
    ref = grid_product(build_s2_projector(lmax, precision=3 * lmax + 7), a, b)
    assert torch.allclose(grid_product(s2_projector(lmax), a, b), ref, atol=1e-13)
    # an under-resolved rule is not exact (the test has teeth)
    low = grid_product(build_s2_projector(lmax, precision=2 * lmax), a, b)
    assert float((low - ref).abs().max()) > 1e-6


@pytest.mark.parametrize("lmax,kmax", [(1, 1), (2, 1), (3, 1), (3, 2), (2, 0)])
def test_so3_product_is_exact(lmax, kmax):
    g = torch.Generator().manual_seed(10 * lmax + kmax)
    n_k = 2 * kmax + 1
    shape = (3, (lmax + 1) ** 2, n_k * 4)
    a = torch.randn(*shape, generator=g, dtype=F64)
    b = torch.randn(*shape, generator=g, dtype=F64)
    fine = build_so3_projector(lmax, kmax, precision=3 * lmax + 5, n_gamma=3 * kmax + 6)
    ref = grid_product(fine, a, b)
    assert torch.allclose(grid_product(so3_projector(lmax, kmax), a, b), ref, atol=1e-13)
    if kmax > 0:
        low = grid_product(build_so3_projector(lmax, kmax, n_gamma=2 * kmax + 1), a, b)
        assert float((low - ref).abs().max()) > 1e-6


@pytest.mark.parametrize("lmax,kmax", [(0, 0), (2, 0), (2, 1), (3, 2)])
def test_grid_product_equivariant(lmax, kmax):
    proj = so3_projector(lmax, kmax)
    n_k = proj.n_frames
    g = torch.Generator().manual_seed(7)
    a = torch.randn(2, (lmax + 1) ** 2, n_k * 3, generator=g, dtype=F64)
    b = torch.randn(2, (lmax + 1) ** 2, n_k * 3, generator=g, dtype=F64)
    for d in wigner_from_matrix(_random_rotations(3, 11), lmax):
        rot_a, rot_b = d @ a, d @ b
        assert torch.allclose(
            grid_product(proj, rot_a, rot_b), d @ grid_product(proj, a, b), atol=1e-12
        )
    s2 = s2_projector(lmax)
    a1, b1 = a[..., :3], b[..., :3]
    for d in wigner_from_matrix(_random_rotations(3, 12), lmax):
        assert torch.allclose(
            grid_product(s2, d @ a1, d @ b1), d @ grid_product(s2, a1, b1), atol=1e-12
        )


def test_mats_cast_and_cache():
    p = so3_projector(2, 1)
    t32, b32 = p.mats(torch.float32, torch.device("cpu"))
    assert t32.dtype == torch.float32 and b32.dtype == torch.float32
    assert p.mats(torch.float32, torch.device("cpu"))[0] is t32
    assert p.to_grid.dtype == F64
    # analysis of only the first rows equals slicing the full result (to float64 rounding: a
    # GEMM of fewer rows may sum in another order; unseeded inputs found 1-ulp differences)
    x = torch.randn(2, p.grid_size, 6, dtype=F64, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(p.analyse(x, n_rows=1), p.analyse(x)[:, :1], rtol=1e-14, atol=1e-15)
