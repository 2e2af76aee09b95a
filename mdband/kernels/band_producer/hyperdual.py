"""The band producer's arithmetic, shared by its torch reference and its Triton kernel.

* :func:`coef_list`: the coefficient table of the solid-harmonic recursions (normalisation,
  the three-term recursion's A, B, the double factorials, the ladder factors c_l and eps²),
  in the order the kernel indexes it;
* hyper-dual numbers (value, gradient (x, y, z), Hessian (xx, xy, xz, yy, yz, zz)) of functions
  of û: :func:`t_hd`, :func:`t_mul`, :func:`t_lin` and :func:`hessian` in torch (the closed-form
  reference backward), ``hd_var``/``hd_r2``/``hd_mul``/``hd_lin``/``hd_scale`` in Triton (the
  kernel; a hyper-dual is a tuple of its ten components, and with ``HESS`` false the Hessian
  slots carry a copy of the value, unused).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from mdband.kernels import _common as cm
from mdband.so3.frames import EPS, unit_vectors


def _norm_factor(l: int, m: int) -> float:
    f = math.factorial(l - m) / math.factorial(l + m)
    return math.sqrt((2.0 if m else 1.0) * f)


@lru_cache(maxsize=32)
def coef_list(lmax: int) -> tuple:
    """norm[l,m], A[l,m], B[l,m] (each (L+1)²), dfact[m], ladder[l] (each L+1), eps²."""
    P = lmax + 1
    norm, A, B = [0.0] * (P * P), [0.0] * (P * P), [0.0] * (P * P)
    for l in range(P):
        for m in range(l + 1):
            norm[l * P + m] = _norm_factor(l, m)
            if l >= m + 2:
                A[l * P + m] = (2 * l - 1.0) / (l - m)
                B[l * P + m] = (l + m - 1.0) / (l - m)
    dfact = []
    for m in range(P):
        d = 1.0
        for k in range(1, 2 * m, 2):
            d *= k
        dfact.append((-1.0) ** m * d)
    ladder = [math.sqrt(2.0 / (l * (l + 1))) if l else 0.0 for l in range(P)]
    return tuple(norm + A + B + dfact + ladder + [EPS * EPS])


@lru_cache(maxsize=32)
def coef_tensor(lmax: int, dtype, device_str: str) -> torch.Tensor:
    """:func:`coef_list` as a tensor of ``dtype`` on a device (what the kernel reads)."""
    return torch.tensor(coef_list(lmax), dtype=dtype, device=torch.device(device_str))


# ---------------------------------------------------------------------------- torch
def t_hd(val, g=None, h=None):
    """Hyper-dual number: value, gradient (3 tensors), Hessian (xx, xy, xz, yy, yz, zz)."""
    z = torch.zeros_like(val)
    return [val, *(g or (z, z, z)), *(h or (z, z, z, z, z, z))]


HI = ((0, 1, 2), (1, 3, 4), (2, 4, 5))  # Hessian slot of (i, j)


def t_mul(a, b):
    """Multiply two hyper-dual numbers (torch): value, gradient and Hessian of a · b."""
    out = [a[0] * b[0]] + [a[0] * b[1 + i] + b[0] * a[1 + i] for i in range(3)]
    for i, j in ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)):
        k = 4 + HI[i][j]
        out.append(a[0] * b[k] + b[0] * a[k] + a[1 + i] * b[1 + j] + a[1 + j] * b[1 + i])
    return out


def t_lin(ca, a, cb, b):
    """Return the hyper-dual linear combination ca · a + cb · b (torch)."""
    return [ca * p + cb * q for p, q in zip(a, b)]


def hessian(v: torch.Tensor, lmax: int):
    """Per (l, m_col): value, gradient, Hessian of Y_{l,m}(û), û = v/r (closed-form reference)."""
    u, _ = unit_vectors(v)
    x, y, z = u.unbind(-1)
    one, zero = torch.ones_like(x), torch.zeros_like(x)
    X = t_hd(x, (one, zero, zero))
    Yv = t_hd(y, (zero, one, zero))
    Z = t_hd(z, (zero, zero, one))
    two = 2 * one
    R2 = t_hd(x * x + y * y + z * z, (2 * x, 2 * y, 2 * z), (two, zero, zero, two, zero, two))
    coef = coef_list(lmax)
    P = lmax + 1
    out = {}
    C, S = t_hd(one), t_hd(zero)
    for m in range(P):
        if m:
            C, S = (
                t_lin(1.0, t_mul(X, C), -1.0, t_mul(Yv, S)),
                t_lin(1.0, t_mul(X, S), 1.0, t_mul(Yv, C)),
            )
        q1 = t_hd(coef[3 * P * P + m] * one)
        q2 = None
        for l in range(m, P):
            if l == m:
                q = q1
            elif l == m + 1:
                q = [(2 * m + 1.0) * t for t in t_mul(Z, q1)]
                q2, q1 = q1, q
            else:
                q = t_lin(
                    coef[P * P + l * P + m],
                    t_mul(Z, q1),
                    -coef[2 * P * P + l * P + m],
                    t_mul(R2, q2),
                )
                q2, q1 = q1, q
            n = coef[l * P + m]
            if m == 0:
                out[(l, 0)] = [n * t for t in q]
            else:
                out[(l, m)] = [n * t for t in t_mul(q, C)]
                out[(l, -m)] = [-n * t for t in t_mul(q, S)]
    return out


# ---------------------------------------------------------------------------- Triton
if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    @triton.jit
    def hd_var(p, w, AXIS: tl.constexpr, HESS: tl.constexpr):
        """Multiply a hyper-dual p by a coordinate w: w · p.

        w is the coordinate AXIS (0 x, 1 y, 2 z).
        """
        p0, px, py, pz, pxx, pxy, pxz, pyy, pyz, pzz = p
        r0 = w * p0
        rx = w * px
        ry = w * py
        rz = w * pz
        if AXIS == 0:
            rx = rx + p0
        elif AXIS == 1:
            ry = ry + p0
        else:
            rz = rz + p0
        if HESS:
            rxx = w * pxx
            rxy = w * pxy
            rxz = w * pxz
            ryy = w * pyy
            ryz = w * pyz
            rzz = w * pzz
            if AXIS == 0:
                rxx = rxx + 2 * px
                rxy = rxy + py
                rxz = rxz + pz
            elif AXIS == 1:
                rxy = rxy + px
                ryy = ryy + 2 * py
                ryz = ryz + pz
            else:
                rxz = rxz + px
                ryz = ryz + py
                rzz = rzz + 2 * pz
        else:
            rxx, rxy, rxz, ryy, ryz, rzz = p0, p0, p0, p0, p0, p0
        return r0, rx, ry, rz, rxx, rxy, rxz, ryy, ryz, rzz

    @triton.jit
    def hd_r2(p, x, y, z, r2, HESS: tl.constexpr):
        """r² · p, r² = x² + y² + z² (as a polynomial: ∇r² = 2u, H = 2I)."""
        p0, px, py, pz, pxx, pxy, pxz, pyy, pyz, pzz = p
        r0 = r2 * p0
        rx = r2 * px + (2 * x) * p0
        ry = r2 * py + (2 * y) * p0
        rz = r2 * pz + (2 * z) * p0
        if HESS:
            rxx = r2 * pxx + (4 * x) * px + 2 * p0
            rxy = r2 * pxy + (2 * x) * py + (2 * y) * px
            rxz = r2 * pxz + (2 * x) * pz + (2 * z) * px
            ryy = r2 * pyy + (4 * y) * py + 2 * p0
            ryz = r2 * pyz + (2 * y) * pz + (2 * z) * py
            rzz = r2 * pzz + (4 * z) * pz + 2 * p0
        else:
            rxx, rxy, rxz, ryy, ryz, rzz = p0, p0, p0, p0, p0, p0
        return r0, rx, ry, rz, rxx, rxy, rxz, ryy, ryz, rzz

    @triton.jit
    def hd_mul(a, b, HESS: tl.constexpr):
        """Multiply two hyper-dual numbers: a · b."""
        a0, ax, ay, az, axx, axy, axz, ayy, ayz, azz = a
        b0, bx, by, bz, bxx, bxy, bxz, byy, byz, bzz = b
        r0 = a0 * b0
        rx = a0 * bx + b0 * ax
        ry = a0 * by + b0 * ay
        rz = a0 * bz + b0 * az
        if HESS:
            rxx = a0 * bxx + b0 * axx + 2 * (ax * bx)
            rxy = a0 * bxy + b0 * axy + ax * by + ay * bx
            rxz = a0 * bxz + b0 * axz + ax * bz + az * bx
            ryy = a0 * byy + b0 * ayy + 2 * (ay * by)
            ryz = a0 * byz + b0 * ayz + ay * bz + az * by
            rzz = a0 * bzz + b0 * azz + 2 * (az * bz)
        else:
            rxx, rxy, rxz, ryy, ryz, rzz = a0, a0, a0, a0, a0, a0
        return r0, rx, ry, rz, rxx, rxy, rxz, ryy, ryz, rzz

    @triton.jit
    def hd_lin(ca, a, cb, b, HESS: tl.constexpr):
        """Return the linear combination ca · a + cb · b of two hyper-dual numbers."""
        a0, ax, ay, az, axx, axy, axz, ayy, ayz, azz = a
        b0, bx, by, bz, bxx, bxy, bxz, byy, byz, bzz = b
        r0 = ca * a0 + cb * b0
        rx = ca * ax + cb * bx
        ry = ca * ay + cb * by
        rz = ca * az + cb * bz
        if HESS:
            rxx = ca * axx + cb * bxx
            rxy = ca * axy + cb * bxy
            rxz = ca * axz + cb * bxz
            ryy = ca * ayy + cb * byy
            ryz = ca * ayz + cb * byz
            rzz = ca * azz + cb * bzz
        else:
            rxx, rxy, rxz, ryy, ryz, rzz = r0, r0, r0, r0, r0, r0
        return r0, rx, ry, rz, rxx, rxy, rxz, ryy, ryz, rzz

    @triton.jit
    def hd_scale(c, a, HESS: tl.constexpr):
        """Scale a hyper-dual number ``a`` by ``c``: c · a."""
        a0, ax, ay, az, axx, axy, axz, ayy, ayz, azz = a
        r0 = c * a0
        if HESS:
            rxx = c * axx
            rxy = c * axy
            rxz = c * axz
            ryy = c * ayy
            ryz = c * ayz
            rzz = c * azz
        else:
            rxx, rxy, rxz, ryy, ryz, rzz = r0, r0, r0, r0, r0, r0
        return r0, c * ax, c * ay, c * az, rxx, rxy, rxz, ryy, ryz, rzz
