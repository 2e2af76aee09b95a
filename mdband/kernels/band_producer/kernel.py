"""The band producer's kernel: edge vectors → the band, or its cotangent → the edge vectors'.

Forward: edge vectors → the band; backward: the band's cotangent → the edge vectors'. BLOCK_EDGES
edges per program, every degree unrolled at compile time.

Math: :mod:`mdband.kernels.band_producer`. The solid harmonics come from the recursions of
``harmonics.py`` (C_m + i S_m = (x + i y)^m times the associated-Legendre part Q_l^m(z, r²)),
each value a hyper-dual number (:mod:`.hyperdual`: value and gradient in the forward, also the
Hessian in the backward). :func:`_emit` writes (forward) or pulls back (backward) the three band
entries of each Y_{l,m}.
"""

from __future__ import annotations

from mdband.kernels import _common as cm

if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    from mdband.kernels.band_producer.hyperdual import hd_lin, hd_mul, hd_r2, hd_scale, hd_var

    _div = cm.div_ieee
    _sqrt = cm.sqrt_ieee

    @triton.jit
    def _emit(
        tables,
        y,
        frame,
        acc,
        l: tl.constexpr,
        j: tl.constexpr,
        LMAX: tl.constexpr,
        COL_LANES: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        BACKWARD: tl.constexpr,
    ):
        """Write (forward) or pull back (backward) the three band entries of Y_{l, j−l}.

        Its hyper-dual is ``y``. ``tables``: (the band, band cotangent, entry table and coefficient
        pointers, the band's and its cotangent's (edge, entry) strides, the edges e and their mask);
        ``frame``: the chart frame (x', y') of each edge; ``acc``: the backward's sums (dL/dû, and
        the Jacobian weights A, B), returned updated.
        """
        band_ptr, gband_ptr, entry_a_ptr, coef_ptr, sb0, sb1, sg0, sg1, e, em = tables
        p0, px, py, pz, pxx, pxy, pxz, pyy, pyz, pzz = y
        xp0, xp1, xp2, yp0, yp1, yp2 = frame
        gux, guy, guz, a0, a1, a2, b0, b1, b2 = acc
        P: tl.constexpr = LMAX + 1
        i0 = tl.load(entry_a_ptr + (l * SLOT_LANES) * COL_LANES + j).to(tl.int64)
        if l > 0:
            lad = tl.load(coef_ptr + 3 * P * P + P + l)
            i1 = tl.load(entry_a_ptr + (l * SLOT_LANES + 1) * COL_LANES + j).to(tl.int64)
            i2 = tl.load(entry_a_ptr + (l * SLOT_LANES + 2) * COL_LANES + j).to(tl.int64)
        if not BACKWARD:
            tl.store(band_ptr + e * sb0 + i0 * sb1, p0, mask=em)
            if l > 0:
                dy = px * yp0 + py * yp1 + pz * yp2
                dx = px * xp0 + py * xp1 + pz * xp2
                tl.store(band_ptr + e * sb0 + i1 * sb1, lad * dy, mask=em)
                tl.store(band_ptr + e * sb0 + i2 * sb1, -(lad * dx), mask=em)
        else:
            g0 = tl.load(gband_ptr + e * sg0 + i0 * sg1, mask=em, other=0.0)
            gux += g0 * px
            guy += g0 * py
            guz += g0 * pz
            if l > 0:
                wy = tl.load(gband_ptr + e * sg0 + i1 * sg1, mask=em, other=0.0) * lad
                wx = -(tl.load(gband_ptr + e * sg0 + i2 * sg1, mask=em, other=0.0) * lad)
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
    def band_producer_kernel(
        # pointers: inputs, the band's entry table and the recursions' coefficients, outputs
        edge_vec_ptr,
        coef_ptr,
        entry_a_ptr,
        band_ptr,
        gband_ptr,
        gvec_ptr,
        # sizes and strides
        n_edges,
        stride_vec_edge,
        stride_vec_comp,
        stride_band_edge,
        stride_band_entry,
        stride_gband_edge,
        stride_gband_entry,
        stride_gvec_edge,
        stride_gvec_comp,
        # meta-parameters
        LMAX: tl.constexpr,
        COL_LANES: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        BACKWARD: tl.constexpr,
    ):
        """Produce the band of BLOCK_EDGES edges per program, or (BACKWARD) pull its cotangent back.

        The forward writes the band entries of each edge vector; the backward writes dL/dv (the edge
        vectors' cotangent) from the band's cotangent. Every degree up to LMAX is unrolled at
        compile time.
        """
        BWD: tl.constexpr = BACKWARD
        P: tl.constexpr = LMAX + 1
        e = tl.program_id(0).to(tl.int64) * BLOCK_EDGES + tl.arange(0, BLOCK_EDGES).to(tl.int64)
        em = e < n_edges
        dt = edge_vec_ptr.dtype.element_ty
        vx = tl.load(edge_vec_ptr + e * stride_vec_edge, mask=em, other=0.0)
        vy = tl.load(edge_vec_ptr + e * stride_vec_edge + stride_vec_comp, mask=em, other=0.0)
        vz = tl.load(edge_vec_ptr + e * stride_vec_edge + 2 * stride_vec_comp, mask=em, other=1.0)
        eps2 = tl.load(coef_ptr + 3 * P * P + 2 * P)
        rr = _sqrt(vx * vx + vy * vy + vz * vz + eps2)
        x = _div(vx, rr)
        y = _div(vy, rr)
        z = _div(vz, rr)
        r2 = x * x + y * y + z * z
        one = tl.full((BLOCK_EDGES,), 1.0, dt)
        zero = tl.full((BLOCK_EDGES,), 0.0, dt)
        # chart frame of frames.edge_frame: ty = -1 on z >= 0, +1 below
        north = z >= 0
        ty = tl.where(north, -1.0, 1.0).to(dt)
        s = tl.where(north, 1.0 + z, 1.0 - z)
        fa = _div(x * x, s)
        fb = _div(x * y, s)
        fc = _div(y * y, s)
        frame = (1.0 - fa, -fb, ty * x, ty * fb, ty * (fc - 1.0), -y)
        tables = (
            band_ptr,
            gband_ptr,
            entry_a_ptr,
            coef_ptr,
            stride_band_edge,
            stride_band_entry,
            stride_gband_edge,
            stride_gband_entry,
            e,
            em,
        )
        acc = (zero, zero, zero, zero, zero, zero, zero, zero, zero)
        # C_m + i S_m = (x + i y)^m, as hyper-duals
        cos_m = (one, zero, zero, zero, zero, zero, zero, zero, zero, zero)
        sin_m = (zero, zero, zero, zero, zero, zero, zero, zero, zero, zero)
        for m in tl.static_range(P):
            if m > 0:
                xc = hd_var(cos_m, x, 0, BWD)
                ys = hd_var(sin_m, y, 1, BWD)
                xs = hd_var(sin_m, x, 0, BWD)
                yc = hd_var(cos_m, y, 1, BWD)
                cos_m = hd_lin(1.0, xc, -1.0, ys, BWD)
                sin_m = hd_lin(1.0, xs, 1.0, yc, BWD)
            dfm = tl.load(coef_ptr + 3 * P * P + m)
            q = (dfm * one, zero, zero, zero, zero, zero, zero, zero, zero, zero)
            for l in tl.static_range(m, P):
                if l == m + 1:
                    q_prev = q
                    q = hd_scale(2 * m + 1, hd_var(q, z, 2, BWD), BWD)
                elif l > m + 1:
                    ca = tl.load(coef_ptr + P * P + l * P + m)
                    cb = tl.load(coef_ptr + 2 * P * P + l * P + m)
                    zq = hd_var(q, z, 2, BWD)
                    r2q = hd_r2(q_prev, x, y, z, r2, BWD)
                    q_prev = q
                    q = hd_lin(ca, zq, -cb, r2q, BWD)
                nrm = tl.load(coef_ptr + l * P + m)
                if m == 0:
                    y_lm = hd_scale(nrm, q, BWD)
                    acc = _emit(tables, y_lm, frame, acc, l, l, LMAX, COL_LANES, SLOT_LANES, BWD)
                else:
                    y_lm = hd_scale(nrm, hd_mul(q, cos_m, BWD), BWD)
                    acc = _emit(
                        tables, y_lm, frame, acc, l, l + m, LMAX, COL_LANES, SLOT_LANES, BWD
                    )
                    y_lm = hd_scale(-nrm, hd_mul(q, sin_m, BWD), BWD)
                    acc = _emit(
                        tables, y_lm, frame, acc, l, l - m, LMAX, COL_LANES, SLOT_LANES, BWD
                    )
        if BWD:
            gux, guy, guz, a0, a1, a2, b0, b1, b2 = acc
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
            gv_at = gvec_ptr + e * stride_gvec_edge
            tl.store(gv_at, _div(gux, rr) - _div(vx * vg, r3), mask=em)
            tl.store(gv_at + stride_gvec_comp, _div(guy, rr) - _div(vy * vg, r3), mask=em)
            tl.store(gv_at + 2 * stride_gvec_comp, _div(guz, rr) - _div(vz * vg, r3), mask=em)
