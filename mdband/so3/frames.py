"""Edge frames: an orthonormal, right-handed (x', y', û) for every edge direction.

Two charts, each smooth on its hemisphere with denominators ≥ 1 (no pole singularity):

* z ≥ 0 (regular away from −z): ``x' = (1 − x²/(1+z), −xy/(1+z), −x)``,
  ``y' = (−xy/(1+z), 1 − y²/(1+z), −y)`` — the minimal rotation taking û to +z;
* z < 0: the same construction after a 180° turn about x.

The roll of the frame about û is irrelevant to SeZM's outputs (every edge operator commutes with
rotations about the local z axis), so the chart switch changes no energy or force; it only has to
be finite and differentiable everywhere, which both charts are.
"""

from __future__ import annotations

import torch

EPS = 1e-7


def unit_vectors(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``û = v / sqrt(|v|² + eps²)`` and ``r = sqrt(|v|² + eps²)`` (deepmd-kit's safe norm)."""
    r = torch.sqrt((v * v).sum(-1, keepdim=True) + EPS * EPS)
    return v / r, r


def edge_frame(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Local axes x', y' (each (..., 3)) of unit vectors ``u`` with x' × y' = û."""
    x, y, z = u[..., 0], u[..., 1], u[..., 2]
    north = z >= 0
    s = torch.where(north, 1.0 + z, 1.0 - z)  # ≥ 1 on each chart's hemisphere
    s = torch.where(s < 0.5, torch.ones_like(s), s)  # never used, keeps the other branch finite
    a = x * x / s
    b = x * y / s
    c = y * y / s
    sg = torch.where(north, -torch.ones_like(z), torch.ones_like(z))
    xp = torch.stack([1 - a, -b, sg * x], dim=-1)
    yp_n = torch.stack([-b, 1 - c, -y], dim=-1)
    yp_s = torch.stack([b, c - 1, -y], dim=-1)
    yp = torch.where(north[..., None], yp_n, yp_s)
    return xp, yp
