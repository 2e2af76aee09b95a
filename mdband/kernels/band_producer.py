"""band_producer: edge vectors → the (E, 3D−2) band of Wigner-D rows, and its backward.

Shapes (E edges, L = ``lmax``, D = (L+1)²)::

    edge_vec (E, 3) → band (E, 3D−2), layout BAND built for L (``storage.band_offset``)

Equal to ``wigner.band_from_unit(frames.unit_vectors(v)[0], L)``: with û = v / sqrt(|v|² + 1e-14)
and the chart frame (x', y') of ``frames.edge_frame``,

    band[(l, 0), j]  = Y_l(û)[j]
    band[(l, −1), j] = +sqrt(2/(l(l+1))) · (y'·∇) Y_l(û)[j]
    band[(l, +1), j] = −sqrt(2/(l(l+1))) · (x'·∇) Y_l(û)[j]

The kernel evaluates the solid harmonics with the recursions of ``harmonics.py`` (C_m + i S_m =
(x + i y)^m times the associated-Legendre part Q_l^m(z, r²)), carrying value and gradient
(forward) or value, gradient and Hessian (backward, "hyper-dual" numbers), all unrolled at
compile time for the given L. The backward is closed form:

    dL/dû = Σ g0·∇Y + H_Y·(w_y y' + w_x x') + J_{y'}ᵀ Σ w_y ∇Y + J_{x'}ᵀ Σ w_x ∇Y,
    w_y = c_l · g(l,−1), w_x = −c_l · g(l,+1),  dL/dv = dL/dû / r − v (v·dL/dû) / r³.

Accuracy: fp32 or fp64 FMAs in the input dtype; vs the torch reference: rounding only (fp64
agrees to ~1e-14). Bytes per edge: 12 read + (3D−2)·4 written (fp32); backward (3D−2)·4 + 12
read, 12 written. No dense (E, D, D) tensor anywhere.
"""

from __future__ import annotations

import torch

from mdband.kernels import _band_math as bm
from mdband.kernels import _common as cm
from mdband.so3 import storage as st
from mdband.so3.frames import edge_frame, unit_vectors
from mdband.so3.wigner import band_from_unit

OP = "mdband::band_producer"
OP_BWD = "mdband::band_producer_bwd"

#: largest degree the Triton kernel is compiled for (beyond it the reference runs)
TRITON_MAX_LMAX = 8


# ---------------------------------------------------------------------------- references
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


# ---------------------------------------------------------------------------- Triton kernels
if cm.TRITON_AVAILABLE:
    triton, tl = cm.triton, cm.tl
    _div = cm.div_ieee
    _sqrt = cm.sqrt_ieee
    _hd_var, _hd_r2, _hd_mul, _hd_lin = bm.hd_var, bm.hd_r2, bm.hd_mul, bm.hd_lin
    _hd_scale = bm.hd_scale

    @triton.jit
    def _bp_emit(
        band_ptr, gb_ptr, ea_t, coef_ptr, e, em, sb0, sb1, sg0, sg1,
        p0, px, py, pz, pxx, pxy, pxz, pyy, pyz, pzz,
        xp0, xp1, xp2, yp0, yp1, yp2,
        gux, guy, guz, a0, a1, a2, b0, b1, b2,
        l: tl.constexpr, j: tl.constexpr, L: tl.constexpr, JP: tl.constexpr, SP: tl.constexpr,
        BWD: tl.constexpr,
    ):  # fmt: skip
        """Write (forward) or pull back (backward) the three band entries of Y_{l, j−l}."""
        P: tl.constexpr = L + 1
        i0 = tl.load(ea_t + (l * SP) * JP + j).to(tl.int64)
        if l > 0:
            lad = tl.load(coef_ptr + 3 * P * P + P + l)
            i1 = tl.load(ea_t + (l * SP + 1) * JP + j).to(tl.int64)
            i2 = tl.load(ea_t + (l * SP + 2) * JP + j).to(tl.int64)
        if not BWD:
            tl.store(band_ptr + e * sb0 + i0 * sb1, p0, mask=em)
            if l > 0:
                dy = px * yp0 + py * yp1 + pz * yp2
                dx = px * xp0 + py * xp1 + pz * xp2
                tl.store(band_ptr + e * sb0 + i1 * sb1, lad * dy, mask=em)
                tl.store(band_ptr + e * sb0 + i2 * sb1, -(lad * dx), mask=em)
        else:
            g0 = tl.load(gb_ptr + e * sg0 + i0 * sg1, mask=em, other=0.0)
            gux += g0 * px
            guy += g0 * py
            guz += g0 * pz
            if l > 0:
                wy = tl.load(gb_ptr + e * sg0 + i1 * sg1, mask=em, other=0.0) * lad
                wx = -(tl.load(gb_ptr + e * sg0 + i2 * sg1, mask=em, other=0.0) * lad)
                w0 = wy * yp0 + wx * xp0
                w1 = wy * yp1 + wx * xp1
                w2 = wy * yp2 + wx * xp2
                gux += pxx * w0 + pxy * w1 + pxz * w2
                guy += pxy * w0 + pyy * w1 + pyz * w2
                guz += pxz * w0 + pyz * w1 + pzz * w2
                a0 += wy * px
                a1 += wy * py
                a2 += wy * pz
                b0 += wx * px
                b1 += wx * py
                b2 += wx * pz
        return gux, guy, guz, a0, a1, a2, b0, b1, b2

    @triton.jit
    def _bp_kernel(
        v_ptr, coef_ptr, ea_t, band_ptr, gb_ptr, gv_ptr,
        E, sv0, sv1, sb0, sb1, sg0, sg1, sw0, sw1,
        L: tl.constexpr, JP: tl.constexpr, SP: tl.constexpr, BE: tl.constexpr,
        BWD: tl.constexpr,
    ):  # fmt: skip
        # fmt: off
        # (hyper-dual tuples of 10 components stay packed, several per line)
        P: tl.constexpr = L + 1
        e = tl.program_id(0).to(tl.int64) * BE + tl.arange(0, BE).to(tl.int64)
        em = e < E
        dt = v_ptr.dtype.element_ty
        vx = tl.load(v_ptr + e * sv0, mask=em, other=0.0)
        vy = tl.load(v_ptr + e * sv0 + sv1, mask=em, other=0.0)
        vz = tl.load(v_ptr + e * sv0 + 2 * sv1, mask=em, other=1.0)
        eps2 = tl.load(coef_ptr + 3 * P * P + 2 * P)
        rr = _sqrt(vx * vx + vy * vy + vz * vz + eps2)
        x = _div(vx, rr)
        y = _div(vy, rr)
        z = _div(vz, rr)
        r2 = x * x + y * y + z * z
        one = tl.full((BE,), 1.0, dt)
        zero = tl.full((BE,), 0.0, dt)
        # chart frame of frames.edge_frame: ty = -1 on z >= 0, +1 below
        north = z >= 0
        ty = tl.where(north, -1.0, 1.0).to(dt)
        s = tl.where(north, 1.0 + z, 1.0 - z)
        fa = _div(x * x, s)
        fb = _div(x * y, s)
        fc = _div(y * y, s)
        xp0 = 1.0 - fa
        xp1 = -fb
        xp2 = ty * x
        yp0 = ty * fb
        yp1 = ty * (fc - 1.0)
        yp2 = -y
        gux, guy, guz = zero, zero, zero
        a0, a1, a2, b0, b1, b2 = zero, zero, zero, zero, zero, zero
        # C_m + i S_m = (x + i y)^m, as hyper-duals
        c0, cx, cy, cz, cxx, cxy, cxz, cyy, cyz, czz = (
            one, zero, zero, zero, zero, zero, zero, zero, zero, zero,
        )
        s0, sx, sy, sz, sxx, sxy, sxz, syy, syz, szz = (
            zero, zero, zero, zero, zero, zero, zero, zero, zero, zero,
        )
        for m in tl.static_range(P):
            if m > 0:
                t0, tx, ty_, tz, txx, txy, txz, tyy, tyz, tzz = _hd_var(
                    c0, cx, cy, cz, cxx, cxy, cxz, cyy, cyz, czz, x, 0, BWD
                )
                u0, ux, uy, uz, uxx, uxy, uxz, uyy, uyz, uzz = _hd_var(
                    s0, sx, sy, sz, sxx, sxy, sxz, syy, syz, szz, y, 1, BWD
                )
                w0, wx, wy, wz, wxx, wxy, wxz, wyy, wyz, wzz = _hd_var(
                    s0, sx, sy, sz, sxx, sxy, sxz, syy, syz, szz, x, 0, BWD
                )
                k0, kx, ky, kz, kxx, kxy, kxz, kyy, kyz, kzz = _hd_var(
                    c0, cx, cy, cz, cxx, cxy, cxz, cyy, cyz, czz, y, 1, BWD
                )
                c0, cx, cy, cz, cxx, cxy, cxz, cyy, cyz, czz = _hd_lin(
                    1.0, t0, tx, ty_, tz, txx, txy, txz, tyy, tyz, tzz, -1.0, u0, ux, uy, uz, uxx,
                    uxy, uxz, uyy, uyz, uzz, BWD,
                )
                s0, sx, sy, sz, sxx, sxy, sxz, syy, syz, szz = _hd_lin(
                    1.0, w0, wx, wy, wz, wxx, wxy, wxz, wyy, wyz, wzz, 1.0, k0, kx, ky, kz, kxx,
                    kxy, kxz, kyy, kyz, kzz, BWD,
                )
            dfm = tl.load(coef_ptr + 3 * P * P + m)
            q0, qx, qy, qz, qxx, qxy, qxz, qyy, qyz, qzz = (
                dfm * one,
                zero, zero, zero, zero, zero, zero, zero, zero, zero,
            )
            for l in tl.static_range(m, P):
                if l == m + 1:
                    p0, px, py, pz, pxx, pxy, pxz, pyy, pyz, pzz = (
                        q0, qx, qy, qz, qxx, qxy, qxz, qyy, qyz, qzz,
                    )
                    f0, fx, fy, fz, fxx, fxy, fxz, fyy, fyz, fzz = _hd_var(
                        q0, qx, qy, qz, qxx, qxy, qxz, qyy, qyz, qzz, z, 2, BWD
                    )
                    q0, qx, qy, qz, qxx, qxy, qxz, qyy, qyz, qzz = _hd_scale(
                        2 * m + 1, f0, fx, fy, fz, fxx, fxy, fxz, fyy, fyz, fzz, BWD
                    )
                elif l > m + 1:
                    ca = tl.load(coef_ptr + P * P + l * P + m)
                    cb = tl.load(coef_ptr + 2 * P * P + l * P + m)
                    f0, fx, fy, fz, fxx, fxy, fxz, fyy, fyz, fzz = _hd_var(
                        q0, qx, qy, qz, qxx, qxy, qxz, qyy, qyz, qzz, z, 2, BWD
                    )
                    h0, hx, hy, hz, hxx, hxy, hxz, hyy, hyz, hzz = _hd_r2(
                        p0, px, py, pz, pxx, pxy, pxz, pyy, pyz, pzz, x, y, z, r2, BWD
                    )
                    p0, px, py, pz, pxx, pxy, pxz, pyy, pyz, pzz = (
                        q0, qx, qy, qz, qxx, qxy, qxz, qyy, qyz, qzz,
                    )
                    q0, qx, qy, qz, qxx, qxy, qxz, qyy, qyz, qzz = _hd_lin(
                        ca, f0, fx, fy, fz, fxx, fxy, fxz, fyy, fyz, fzz, -cb, h0, hx, hy, hz, hxx,
                        hxy, hxz, hyy, hyz, hzz, BWD,
                    )
                nrm = tl.load(coef_ptr + l * P + m)
                if m == 0:
                    y0, yx, yy, yz, yxx, yxy, yxz, yyy, yyz, yzz = _hd_scale(
                        nrm, q0, qx, qy, qz, qxx, qxy, qxz, qyy, qyz, qzz, BWD
                    )
                    gux, guy, guz, a0, a1, a2, b0, b1, b2 = _bp_emit(
                        band_ptr, gb_ptr, ea_t, coef_ptr, e, em, sb0, sb1, sg0, sg1, y0, yx, yy, yz,
                        yxx, yxy, yxz, yyy, yyz, yzz, xp0, xp1, xp2, yp0, yp1, yp2, gux, guy, guz,
                        a0, a1, a2, b0, b1, b2, l, l, L, JP, SP, BWD,
                    )
                else:
                    g0, gx, gy, gz, gxx, gxy, gxz, gyy, gyz, gzz = _hd_mul(
                        q0, qx, qy, qz, qxx, qxy, qxz, qyy, qyz, qzz, c0, cx, cy, cz, cxx, cxy, cxz,
                        cyy, cyz, czz, BWD,
                    )
                    y0, yx, yy, yz, yxx, yxy, yxz, yyy, yyz, yzz = _hd_scale(
                        nrm, g0, gx, gy, gz, gxx, gxy, gxz, gyy, gyz, gzz, BWD
                    )
                    gux, guy, guz, a0, a1, a2, b0, b1, b2 = _bp_emit(
                        band_ptr, gb_ptr, ea_t, coef_ptr, e, em, sb0, sb1, sg0, sg1, y0, yx, yy, yz,
                        yxx, yxy, yxz, yyy, yyz, yzz, xp0, xp1, xp2, yp0, yp1, yp2, gux, guy, guz,
                        a0, a1, a2, b0, b1, b2, l,
                        l + m,
                        L, JP, SP, BWD,
                    )
                    g0, gx, gy, gz, gxx, gxy, gxz, gyy, gyz, gzz = _hd_mul(
                        q0, qx, qy, qz, qxx, qxy, qxz, qyy, qyz, qzz, s0, sx, sy, sz, sxx, sxy, sxz,
                        syy, syz, szz, BWD,
                    )
                    y0, yx, yy, yz, yxx, yxy, yxz, yyy, yyz, yzz = _hd_scale(
                        -nrm, g0, gx, gy, gz, gxx, gxy, gxz, gyy, gyz, gzz, BWD
                    )
                    gux, guy, guz, a0, a1, a2, b0, b1, b2 = _bp_emit(
                        band_ptr, gb_ptr, ea_t, coef_ptr, e, em, sb0, sb1, sg0, sg1, y0, yx, yy, yz,
                        yxx, yxy, yxz, yyy, yyz, yzz, xp0, xp1, xp2, yp0, yp1, yp2, gux, guy, guz,
                        a0, a1, a2, b0, b1, b2, l,
                        l - m,
                        L, JP, SP, BWD,
                    )
        if BWD:
            # frame Jacobians: s = 1 + σ z (σ = ds/dz), x' = (1 − a, −b, t x),
            # y' = (t b, t (c − 1), −y) with a = x²/s, b = xy/s, c = y²/s, t = ty
            sig = -ty
            s2 = s * s
            dax = _div(2 * x, s)
            daz = -_div(sig * x * x, s2)
            dbx = _div(y, s)
            dby = _div(x, s)
            dbz = -_div(sig * x * y, s2)
            dcy = _div(2 * y, s)
            dcz = -_div(sig * y * y, s2)
            gux += ty * (a0 * dbx) - b0 * dax - b1 * dbx + ty * b2
            guy += ty * (a0 * dby + a1 * dcy) - a2 - b1 * dby
            guz += ty * (a0 * dbz + a1 * dcz) - b0 * daz - b1 * dbz
            vg = vx * gux + vy * guy + vz * guz
            r3 = rr * rr * rr
            tl.store(gv_ptr + e * sw0, _div(gux, rr) - _div(vx * vg, r3), mask=em)
            tl.store(gv_ptr + e * sw0 + sw1, _div(guy, rr) - _div(vy * vg, r3), mask=em)
            tl.store(gv_ptr + e * sw0 + 2 * sw1, _div(guz, rr) - _div(vz * vg, r3), mask=em)
        # fmt: on


# ---------------------------------------------------------------------------- dispatch
def backend(device, dtype, *, lmax: int) -> tuple[str | None, str]:
    """(backend, reason) shared by the dispatch and ``capability.spec_for_band_producer``."""
    if lmax < 0:
        return None, f"lmax must be >= 0 (got {lmax})"
    name = cm.select_backend(device, dtype, triton_ok=lmax <= TRITON_MAX_LMAX)
    return name, f"{name} on {torch.device(device).type} ({dtype}); writes the band directly"


def _block(E: int) -> tuple[int, int]:
    if cm.interpret_mode():
        return min(64, cm.next_pow2(max(E, 1))), 1
    return 64, 2


def _launch(v, lmax, out, gband=None):
    """Forward (``gband`` None: out = band) or backward (out = dL/dv) launch."""
    E = v.shape[0]
    bwd = gband is not None
    t = st.kernel_tables(st.RotationLayout.BAND, lmax, lmax, v.device)
    coef = bm.coef_tensor(lmax, v.dtype, str(v.device))
    BE, warps = _block(E)
    gb = gband if bwd else out
    so = out.stride()
    cm.wrap(_bp_kernel)[((E + BE - 1) // BE,)](
        v, coef, t["ent_a"], out, gb, out,
        E, *v.stride(), *so, *gb.stride(), *so,
        L=lmax, JP=t["jp"], SP=t["sp"], BE=BE, BWD=bwd, num_warps=warps,
    )  # fmt: skip


def _dispatch(v, lmax) -> str:
    return cm.chosen_backend("band_producer", backend(v.device, v.dtype, lmax=lmax))


@torch.library.triton_op(OP, mutates_args=())
def _band_op(v: torch.Tensor, lmax: int) -> torch.Tensor:
    E = v.shape[0]
    if _dispatch(v, lmax) == "reference":
        return band_producer_reference(v, lmax)
    band = v.new_empty(E, st.band_width(lmax))
    if not cm.has_no_items(E):
        _launch(v, lmax, band)
    return band


@_band_op.register_fake
def _(v, lmax):
    return v.new_empty(v.shape[0], st.band_width(lmax))


@torch.library.triton_op(OP_BWD, mutates_args=())
def _band_bwd_op(gband: torch.Tensor, v: torch.Tensor, lmax: int) -> torch.Tensor:
    E = v.shape[0]
    if _dispatch(v, lmax) == "reference":
        return band_producer_bwd_reference(gband, v, lmax)
    gv = torch.empty_like(v)
    if not cm.has_no_items(E):
        _launch(v, lmax, gv, gband)
    return gv


@_band_bwd_op.register_fake
def _(gband, v, lmax):
    return torch.empty_like(v)


def _setup(ctx, inputs, output):
    v, lmax = inputs
    ctx.save_for_backward(v)
    ctx.lmax = lmax


def _backward(ctx, gband):
    (v,) = ctx.saved_tensors
    return torch.ops.mdband.band_producer_bwd(gband, v, ctx.lmax), None


_band_op.register_autograd(_backward, setup_context=_setup)


# ---------------------------------------------------------------------------- public API
def band_producer(edge_vec: torch.Tensor, lmax: int) -> torch.Tensor:
    """Band (E, 3(lmax+1)² − 2) of the edge vectors (E, 3); differentiable in ``edge_vec``."""
    if edge_vec.dim() != 2 or edge_vec.shape[1] != 3:
        raise ValueError(f"band_producer: edge_vec must be (E, 3), got {tuple(edge_vec.shape)}")
    if lmax < 0:
        raise ValueError(f"band_producer: lmax must be >= 0, got {lmax}")
    return _band_op(edge_vec, lmax)


def band_storage(edge_vec: torch.Tensor, lmax: int) -> st.RotationStorage:
    """A BAND RotationStorage built by :func:`band_producer`."""
    return st.RotationStorage(st.RotationLayout.BAND, lmax, band_producer(edge_vec, lmax))
