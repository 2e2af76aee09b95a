"""Split-precision tensor-core products of the SO(2) linear kernel (Triton device functions).

An fp32 product x·Wᵀ as three lower-precision products of hi/lo parts: ``tf32x3`` (MODE 0,
TF32 parts rounded to nearest, relative error ≈ 2⁻²¹ per product), ``fp16x3`` (MODE 1, fp16
parts, lo scaled by 2¹¹, each edge's row scaled by a power of two: the same 22 bits at twice
the tensor-core rate) and ``fp16`` (MODE 2, one fp16 product, ≈ 2⁻¹¹). x is split once per
tile (:func:`split_x`) and the parts reused for every output row that reads it
(:func:`row_dot`); the weights come pre-split from :func:`.weights.pack_weights`.
"""

from __future__ import annotations

from mdband.kernels import _common as cm

if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    @triton.jit
    def rna_tf32(x):
        """Round x to the nearest TF32 value (ties away from zero), as ``cvt.rna.tf32.f32``."""
        bits = x.to(tl.int32, bitcast=True) + 0x1000
        return (bits & -8192).to(tl.float32, bitcast=True)

    @triton.jit
    def row_scales(tile):
        """Return (s, 1/s) per row of the tile (BE, C).

        Powers of two (from the exponent bits of the row's largest |x|, so s·(1/s) = 1 exactly) that
        put max|x·s| in [2¹³, 2¹⁴), where fp16 holds the row's 11 + 11 bits with no subnormals; an
        all-zero row gets s = 2¹²⁶.
        """
        top = tl.max(tl.abs(tile), axis=1)
        exponent = ((top.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
        s_bits = tl.minimum(tl.maximum(127 + 13 - exponent, 1), 253)
        s = (s_bits << 23).to(tl.float32, bitcast=True)
        inv = ((254 - s_bits) << 23).to(tl.float32, bitcast=True)
        return s, inv

    @triton.jit
    def split_x(tile, MODE: tl.constexpr):
        """Split an x tile (BE, C) into (hi, lo, 1/s) for the products of mode MODE.

        See :func:`.linear.so2_linear_kernel`; lo is unused by fp16 and 1/s by tf32x3; tf32x3 rounds
        both parts to the nearest TF32 value.
        """
        # one return at the end: the compiler types every return of a function, also those
        # after a constexpr branch that returned
        if MODE == 0:
            xh = rna_tf32(tile)
            xl = rna_tf32(tile - xh)
            inv = tl.zeros((tile.shape[0],), tl.float32)
        else:
            s, inv = row_scales(tile)
            xs = tile * s[:, None]
            xh = xs.to(tl.float16)
            if MODE == 1:
                xl = ((xs - xh.to(tl.float32)) * 2048.0).to(tl.float16)  # FP16_LO_SCALE
            else:
                xl = xh
        return xh, xl, inv

    @triton.jit
    def row_dot(xh, xl, inv, w_hi, w_lo_desc, w_row, acc, MODE: tl.constexpr):
        """Return acc + x·Wᵀ of one output row's weight tile.

        The tile is w_hi and, but for fp16, w_lo = w_lo_desc[w_row].
        """
        if MODE == 0:
            acc = tl.dot(xl, w_hi.T, acc, input_precision="tf32")
            w_lo = w_lo_desc.load([w_row, 0])
            acc = tl.dot(xh, w_lo.T, acc, input_precision="tf32")
            acc = tl.dot(xh, w_hi.T, acc, input_precision="tf32")
        elif MODE == 1:
            lo = tl.dot(xl, w_hi.T)  # the cross products, 2¹¹ × their value
            w_lo = w_lo_desc.load([w_row, 0])
            lo = tl.dot(xh, w_lo.T, lo)
            part = tl.dot(xh, w_hi.T)
            acc = acc + (part + lo * (1.0 / 2048.0)) * inv[:, None]
        else:
            acc = acc + tl.dot(xh, w_hi.T) * inv[:, None]
        return acc
