"""Wigner-D rotations of edges: the band producer and the dense reference.

For an edge with unit direction û and local axes (x', y') from :func:`edge_frame`, ``R`` has rows
(x', y', û) and rotates û onto +z. ``D(R)`` is the block-diagonal real Wigner matrix with
``Y(R v) = D(R) Y(v)``. Its band rows have a closed form (sezm-architecture.md §3):

* row (l, 0)  = Y_l(û);
* row (l, +1) = −sqrt(2 / (l(l+1))) · (x'·∇) Y_l(û);
* row (l, −1) = +sqrt(2 / (l(l+1))) · (y'·∇) Y_l(û),

so :func:`band_from_edges` builds the (E, 3D−2) band from polynomials and their gradients, never
from a dense matrix. :func:`dense_from_edges` projects ``Y(R p)`` on a quadrature grid
(``D = (2l+1)·Σ_g w_g Y(R p_g) Y(p_g)ᵀ``), an independent construction used as the dense layout and
as the reference the band is tested against; the dense *layout* embeds the closed-form band rows
(:func:`dense_with_band`) so both layouts feed consumers identical numbers.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from mdband.so3.frames import edge_frame, unit_vectors
from mdband.so3.harmonics import spherical_harmonics
from mdband.so3.quadrature import sphere_rule
from mdband.so3.storage import RotationLayout, RotationStorage, dim_of, tables


@lru_cache(maxsize=32)
def _ladder(lmax: int, dtype, device) -> torch.Tensor:
    """sqrt(2/(l(l+1))) for the packed columns of degrees 1..lmax, shape (D−1,)."""
    vals = [math.sqrt(2.0 / (l * (l + 1))) for l in range(1, lmax + 1) for _ in range(2 * l + 1)]
    return torch.tensor(vals, dtype=dtype, device=device)


@lru_cache(maxsize=32)
def _dense_rule(lmax: int, dtype, device):
    """Return the sphere rule exact to degree 2·lmax, with the tables that go with it.

    Quadrature points (G, 3), weights (G,), Y at the points (G, D) and the (D, D) block mask
    scaled by 2l+1, on ``device`` (cached: no host copies inside a captured CUDA graph).
    """
    pts, w = sphere_rule(2 * lmax)
    pts = pts.to(dtype=dtype, device=device)
    w = w.to(dtype=dtype, device=device)
    deg = tables(lmax, device)["deg"]
    mask = (deg[:, None] == deg[None, :]).to(dtype) * (2 * deg + 1).to(dtype)[:, None]
    return pts, w, spherical_harmonics(lmax, pts), mask


def band_from_unit(u: torch.Tensor, lmax: int) -> torch.Tensor:
    """Band (E, 3D−2) from unit edge directions ``u`` (E, 3)."""
    if lmax == 0:
        return torch.ones(u.shape[0], 1, dtype=u.dtype, device=u.device)
    Y, G = spherical_harmonics(lmax, u, with_grad=True)
    xp, yp = edge_frame(u)
    c = _ladder(lmax, u.dtype, u.device)
    dx = (G[:, 1:] * xp[:, None, :]).sum(-1)
    dy = (G[:, 1:] * yp[:, None, :]).sum(-1)
    return torch.cat([Y, c * dy, -c * dx], dim=1)


def rotation_matrices(u: torch.Tensor) -> torch.Tensor:
    """R (E, 3, 3) with rows (x', y', û)."""
    xp, yp = edge_frame(u)
    return torch.stack([xp, yp, u], dim=-2)


def dense_from_unit(u: torch.Tensor, lmax: int) -> torch.Tensor:
    """Dense block-diagonal Wigner-D (E, D, D) by exact quadrature projection."""
    R = rotation_matrices(u)
    pts, w, Yp, mask = _dense_rule(lmax, u.dtype, u.device)
    Yrp = spherical_harmonics(lmax, torch.einsum("eij,gj->egi", R, pts))  # (E, G, D)
    D = dim_of(lmax)
    full = torch.einsum("egi,gj->eij", Yrp * w[None, :, None], Yp)
    return (full * mask).reshape(-1, D, D)


def dense_with_band(u: torch.Tensor, lmax: int, band: torch.Tensor) -> torch.Tensor:
    """Dense Wigner-D whose band rows are exactly ``band`` (the rest from quadrature).

    Consumers read only the band rows, so a dense model sees the same numbers as a band model
    and the two give bitwise-identical results when their arithmetic is the same.
    """
    D = dim_of(lmax)
    flat = tables(lmax, u.device)["flat"]
    dense = dense_from_unit(u, lmax).reshape(-1, D * D)
    return dense.index_copy(1, flat, band.to(dense.dtype)).reshape(-1, D, D)


def rotation_storage(
    edge_vec: torch.Tensor, lmax: int, layout: RotationLayout, band: torch.Tensor | None = None
) -> RotationStorage:
    """Build the per-edge rotations of ``edge_vec`` (E, 3) directly in ``layout``.

    ``band`` (E, 3D−2), if given, is a band already produced for these edges (e.g. by the fused
    producer); the dense layout embeds it, the band layout uses it as is.
    """
    u, _ = unit_vectors(edge_vec)
    if band is None:
        band = band_from_unit(u, lmax)
    if layout is RotationLayout.BAND:
        return RotationStorage(layout, lmax, band)
    return RotationStorage(layout, lmax, dense_with_band(u, lmax, band))
