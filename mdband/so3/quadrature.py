"""Quadrature rules on S² and SO(3) used by the Wigner reference and the grid layers.

A product rule — Gauss–Legendre in cos θ times uniform φ — with ``n_θ = ⌈(p+1)/2⌉`` and
``n_φ = p + 1`` points integrates every spherical polynomial of degree ≤ ``p`` exactly (weights
sum to 1, i.e. the rule averages over the sphere). SeZM's grid layers only project products of two
band-limited functions, so any rule exact to degree 3L gives the same coefficients as deepmd-kit's
Lebedev tables, up to rounding (sezm-architecture.md, "Notes added for mdband").
"""

from __future__ import annotations

import math

import numpy as np
import torch


def sphere_rule(precision: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Points (G, 3) and weights (G,) (float64, Σw = 1), exact to degree ``precision``."""
    n_t = (precision + 2) // 2
    n_p = precision + 1
    ct, wt = np.polynomial.legendre.leggauss(n_t)
    phi = 2 * math.pi * np.arange(n_p) / n_p
    st = np.sqrt(1 - ct * ct)
    pts = np.stack(
        [
            (st[:, None] * np.cos(phi)[None]).ravel(),
            (st[:, None] * np.sin(phi)[None]).ravel(),
            np.repeat(ct, n_p),
        ],
        axis=-1,
    )
    w = np.repeat(wt / 2.0, n_p) / n_p
    return torch.from_numpy(pts), torch.from_numpy(w)
