"""Real spherical harmonics in SeZM's basis, as polynomials of a unit vector.

Basis (sezm-architecture.md §3): real, z-polar, "norm"-normalised (``Σ_m Y_lm(û)² = 1``),
m = −l..l inside each degree block. Cosine-type (m > 0) rows carry the Condon–Shortley phase
``(−1)^m``, sine-type (m < 0) rows the opposite sign, so that ``Y_1 = (u_y, u_z, −u_x)`` and
``Y_2 = (−√3xy, √3yz, (3z²−1)/2, −√3xz, √3/2(x²−y²))``.

The polynomials are evaluated with the stable solid-harmonic recursions, optionally carrying
their Cartesian gradient (forward mode) for the band's m = ±1 rows. Everything is plain torch,
so autograd differentiates it to any order.
"""

from __future__ import annotations

import math
from typing import Literal, overload

import torch


def _norm_factor(l: int, m: int) -> float:
    am = abs(m)
    f = math.factorial(l - am) / math.factorial(l + am)
    return math.sqrt((2.0 if am else 1.0) * f)


@overload
def spherical_harmonics(
    lmax: int, u: torch.Tensor, with_grad: Literal[False] = False
) -> torch.Tensor: ...
@overload
def spherical_harmonics(
    lmax: int, u: torch.Tensor, with_grad: Literal[True]
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def spherical_harmonics(
    lmax: int, u: torch.Tensor, with_grad: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]: ...
def spherical_harmonics(
    lmax: int, u: torch.Tensor, with_grad: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Y_lm(u) for l ≤ lmax, packed ``l² + l + m``.

    Parameters
    ----------
    lmax : int
    u : (..., 3) tensor
        Unit vectors (the polynomials are homogeneous of degree l; pass ``|u| = 1``).
    with_grad : bool
        Also return ∇_u of the polynomials, shape (..., (lmax+1)², 3).

    Returns
    -------
    Y : (..., (lmax+1)²) tensor, and optionally its gradient.
    """
    x, y, z = u[..., 0], u[..., 1], u[..., 2]
    r2 = x * x + y * y + z * z
    one = torch.ones_like(x)
    zero = torch.zeros_like(x)
    # each polynomial is carried as (value, d/dx, d/dy, d/dz)
    P1 = (one, zero, zero, zero)
    X = (x, one, zero, zero)
    Y_ = (y, zero, one, zero)
    Z = (z, zero, zero, one)
    R2 = (r2, 2 * x, 2 * y, 2 * z)

    def mul(a, b):
        return (a[0] * b[0],) + tuple(a[0] * b[k] + a[k] * b[0] for k in (1, 2, 3))

    def lin(ca, a, cb, b):
        return tuple(ca * a[k] + cb * b[k] for k in range(4))

    def scale(c, a):
        return tuple(c * a[k] for k in range(4))

    # C_m + i S_m = (x + i y)^m
    C = [P1]
    S = [scale(0.0, P1)]
    for m in range(1, lmax + 1):
        C.append(lin(1.0, mul(X, C[m - 1]), -1.0, mul(Y_, S[m - 1])))
        S.append(lin(1.0, mul(X, S[m - 1]), 1.0, mul(Y_, C[m - 1])))
    # Q_l^m(z, r²): associated Legendre part with Condon–Shortley phase
    out: list = [None] * ((lmax + 1) ** 2)
    for m in range(lmax + 1):
        dfact = 1.0
        for k in range(1, 2 * m, 2):
            dfact *= k
        q_prev2 = None
        q_prev = scale((-1.0) ** m * dfact, P1)  # Q_m^m
        for l in range(m, lmax + 1):
            if l == m:
                q = q_prev
            elif l == m + 1:
                q = scale(2 * m + 1.0, mul(Z, q_prev))
                q_prev2, q_prev = q_prev, q
            else:
                q = lin(
                    (2 * l - 1.0) / (l - m),
                    mul(Z, q_prev),
                    -(l + m - 1.0) / (l - m),
                    mul(R2, q_prev2),
                )
                q_prev2, q_prev = q_prev, q
            n = _norm_factor(l, m)
            if m == 0:
                out[l * l + l] = scale(n, q)
            else:
                out[l * l + l + m] = scale(n, mul(q, C[m]))
                out[l * l + l - m] = scale(-n, mul(q, S[m]))
    val = torch.stack([o[0] for o in out], dim=-1)
    if not with_grad:
        return val
    grad = torch.stack([torch.stack([o[1], o[2], o[3]], dim=-1) for o in out], dim=-2)
    return val, grad
