"""The band producer's torch reference: the forward and the closed-form backward.

The forward is ``wigner.band_from_unit``; the closed-form backward goes through the hyper-duals
of :mod:`.hyperdual`.
"""

from __future__ import annotations

import torch

from mdband.kernels.band_producer import hyperdual as bm
from mdband.so3 import storage as st
from mdband.so3.frames import edge_frame, unit_vectors
from mdband.so3.wigner import band_from_unit


def band_producer_reference(v: torch.Tensor, lmax: int) -> torch.Tensor:
    """Torch reference: ``band_from_unit(unit_vectors(v)[0], lmax)`` (differentiable)."""
    u, _ = unit_vectors(v)
    return band_from_unit(u, lmax)


def band_producer_bwd_reference(gband: torch.Tensor, v: torch.Tensor, lmax: int) -> torch.Tensor:
    """Closed-form backward (torch): dL/dv (E, 3) from dL/dband (E, 3D−2)."""
    u, r = unit_vectors(v)
    xp, yp = edge_frame(u)
    coef = bm.coef_list(lmax)
    P = lmax + 1
    gu = torch.zeros_like(u)
    Aw = torch.zeros_like(u)
    Bw = torch.zeros_like(u)
    for (l, mc), p in bm.hessian(v, lmax).items():
        j = l + mc
        grad = torch.stack(p[1:4], -1)
        h = p[4:]
        H = torch.stack([torch.stack([h[bm.HI[i][k]] for k in range(3)], -1) for i in range(3)], -2)
        g0 = gband[:, st.band_offset(lmax, l, 0, j)]
        gu = gu + g0[:, None] * grad
        if l == 0:
            continue
        c = coef[3 * P * P + P + l]
        wy = c * gband[:, st.band_offset(lmax, l, -1, j)]
        wx = -c * gband[:, st.band_offset(lmax, l, 1, j)]
        w = wy[:, None] * yp + wx[:, None] * xp
        gu = gu + (H @ w[:, :, None])[:, :, 0]
        Aw = Aw + wy[:, None] * grad
        Bw = Bw + wx[:, None] * grad
    # frame Jacobians (chart of frames.edge_frame)
    x, y, z = u.unbind(-1)
    north = z >= 0
    sig = torch.where(north, 1.0, -1.0).to(u.dtype)
    s = 1.0 + sig * z
    da = torch.stack([2 * x / s, torch.zeros_like(x), -sig * x * x / (s * s)], -1)
    db = torch.stack([y / s, x / s, -sig * x * y / (s * s)], -1)
    dc = torch.stack([torch.zeros_like(x), 2 * y / s, -sig * y * y / (s * s)], -1)
    ty = -sig
    e0 = torch.zeros_like(u)
    ex = e0.clone()
    ex[:, 0] = 1.0
    ey = e0.clone()
    ey[:, 1] = 1.0
    Jx = torch.stack([-da, -db, ty[:, None] * ex], -2)  # rows: d x'_i / d u
    Jy = torch.stack([ty[:, None] * db, ty[:, None] * dc, -ey], -2)
    gu = gu + (Jy.transpose(1, 2) @ Aw[:, :, None])[:, :, 0]
    gu = gu + (Jx.transpose(1, 2) @ Bw[:, :, None])[:, :, 0]
    return gu / r - v * (v * gu).sum(-1, keepdim=True) / r**3
