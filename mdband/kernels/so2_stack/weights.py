"""Weight tiles of the so2_mix_layer linear kernel, split into its precision mode's operand pairs.

The tiles are split into the operand pairs of the kernel's precision mode and cached per frozen
weight pair.

Precision modes of the kernel's products (x and W both split, accumulation in fp32):

=========  ====================  ===========================  ===========================
mode       operands              products per fp32 product    relative error per product
=========  ====================  ===========================  ===========================
tf32x3     TF32 hi + TF32 lo     3 (xl·wh + xh·wl + xh·wh)    ≈ 2⁻²¹
fp16x3     fp16 hi + fp16 lo     3 (same; lo scaled by 2¹¹)   ≈ 2⁻²¹ of max |x|·|w|
fp16       fp16 hi                1 (xh·wh)                    ≈ 2⁻¹¹ of max |x|·|w|
=========  ====================  ===========================  ===========================

fp16 has TF32's 11 significant bits and twice its tensor-core rate on sm90; its range is the
cost (bf16 has the range but 8 bits: bf16x3 would be ≈ 2⁻¹⁶ per product). So both operands are
scaled by powers of two that put their largest element in [2¹³, 2¹⁴): W once when packed, x on
every call from its largest element (:func:`input_scales`, on the device: a layer's inputs in the
forward and its cotangents in the backward, which in a trained model can lie entirely below
1e-3). Elements more than 2²⁷ below the call's largest are fp16 subnormals after scaling and carry
an absolute error ≈ 2⁻⁴⁰·max|x| instead of a relative one: below fp32 rounding of the large
terms. The kernel divides both scales out of the fp32 result. The lo parts are stored multiplied
by 2¹¹ (``FP16_LO_SCALE``) so they are normal fp16 numbers; their product sum is divided by it
once per output tile. Bytes: fp16 weight tiles are half the TF32 pairs' (≈ 0.5 MB per layer at
L = 3, C = 64); x is read as fp32 either way, plus one read for its largest element.
"""

from __future__ import annotations

import math
import weakref

import torch

from mdband.kernels.tuning import SPLIT_MODES

FP16_LO_SCALE = 2048.0  # 2**11: an fp16 lo part is (v - hi) * 2**11
#: the largest weight after scaling lies in [2**13, 2**14)
_FP16_W_TOP = 13


def mode_code(mode: str) -> int:
    """Return the kernel's constexpr MODE of a split mode (0 tf32x3, 1 fp16x3, 2 fp16)."""
    return SPLIT_MODES.index(mode)


def blocks(w0, wm, F, L):
    """Per-focus weights: W0 (F, (L+1)Ci, (L+1)Co), Wu and Wv (F, L·Ci, L·Co)."""
    W0 = w0.view(w0.shape[0], F, w0.shape[1] // F).permute(1, 0, 2)
    W = wm.view(wm.shape[0], F, wm.shape[1] // F).permute(1, 0, 2)
    half = W.shape[2] // 2
    return W0, W[..., :half], W[..., half:]


def oriented(w0, wm, F, L, transpose):
    """(W0, Wu, Wv) of x·W, or of x·Wᵀ: (W0ᵀ, Wuᵀ, −Wvᵀ) (the complex product's conjugate)."""
    W0, Wu, Wv = blocks(w0, wm, F, L)
    if transpose:
        W0, Wu, Wv = W0.transpose(1, 2), Wu.transpose(1, 2), -Wv.transpose(1, 2)
    return W0, Wu, Wv


def weight_tiles(w0, wm, F, L, C, transpose):
    """Build the kernel weight tiles (F·Dm·2L·C, C).

    Tile (f, j, k) = the block of W from input row k of row j's k-list to row j, stored
    [c_out][c_in]; rows j ≤ L (m = 0) read x rows 0..L through W0, rows m = ∓1 read x₋ then x₊
    through the (P, Q) pair of :func:`oriented`: P₋ = Wu, Q₋ = −Wv, P₊ = Wv, Q₊ = Wu (≈ 1 MB at
    L = 3, C = 64).
    """
    W0, Wu, Wv = oriented(w0, wm, F, L, transpose)
    K = 2 * L
    # W0 (F, (L+1)C, (L+1)C) -> [f, j, k, c_out, c_in], k-list padded to 2L steps
    t0 = W0.reshape(F, L + 1, C, L + 1, C).permute(0, 3, 1, 4, 2)
    t0 = torch.nn.functional.pad(t0, (0, 0, 0, 0, 0, K - (L + 1)))
    pq = torch.stack([torch.stack([Wu, -Wv], 1), torch.stack([Wv, Wu], 1)], 1)  # (F,2,2,LC,LC)
    tm = pq.reshape(F, 2, 2, L, C, L, C).permute(0, 1, 5, 2, 3, 6, 4).reshape(F, K, K, C, C)
    return torch.cat([t0, tm], 1).reshape(-1, C).contiguous()


def split_tf32(t):
    """(hi, lo): t = hi + lo + O(2⁻²²·|t|), both TF32 values (round to nearest, ties away)."""
    hi = ((t.view(torch.int32) + 0x1000) & -8192).view(torch.float32)
    lo = ((t - hi).view(torch.int32) + 0x1000) & -8192
    return hi, lo.view(torch.float32)


def split_fp16(t):
    """Split t into (hi, lo, scale), hi and lo fp16.

    t·scale = hi + lo/2¹¹ + O(2⁻²²·|t·scale|); scale is a power of two putting max|t·scale| in
    [2¹³, 2¹⁴) (1 for an all-zero t).
    """
    # one value back to the host: packing runs at a layer's first (eager) call, never inside a
    # CUDA-graph capture (the capture finds the packed weights in the cache)
    top = float(t.abs().max()) if t.numel() else 0.0
    scale = 1.0 if top == 0.0 else 2.0 ** (_FP16_W_TOP - math.floor(math.log2(top)))
    ts = t * scale
    hi = ts.to(torch.float16)
    lo = ((ts - hi.float()) * FP16_LO_SCALE).to(torch.float16)
    return hi, lo, scale


def row_block_tiles(tiles, F, L, C, rows):
    """Regroup the tiles of :func:`weight_tiles` for ``rows`` output rows per program.

    Tile (f, p, k) of (rows·C, C) stacks the tiles (f, p·rows + i, k), i = 0..rows−1 (the pre-split
    kernel of :mod:`.presplit`); ``rows`` divides 3L + 1 and no block crosses the m-groups (the
    caller's :func:`.presplit.rows_per_program`).
    """
    if rows == 1:
        return tiles
    t = tiles.view(F, (3 * L + 1) // rows, rows, 2 * L, C, C)
    return t.permute(0, 1, 3, 2, 4, 5).reshape(-1, C).contiguous()


def pack_weights(w0, wm, F, L, C, transpose, mode="tf32x3", rows=1):
    """Return the kernel's weights in ``mode``: (wh, wl, scale).

    The tiles of :func:`weight_tiles` (regrouped by :func:`row_block_tiles` for ``rows`` > 1) as
    W·scale = wh + wl (tf32x3: scale 1; fp16x3: wl carries 2¹¹; fp16: wl = wh, unused).
    """
    tiles = row_block_tiles(weight_tiles(w0, wm, F, L, C, transpose), F, L, C, rows)
    if mode == "tf32x3":
        return (*split_tf32(tiles), 1.0)
    if mode == "fp16x3":
        return split_fp16(tiles)
    if mode == "fp16":
        hi, _, scale = split_fp16(tiles)
        return hi, hi, scale
    raise ValueError(f"so2_mix_layer: no split mode {mode!r} (one of {SPLIT_MODES})")


_PACKED: dict = {}  # (id(w0), id(wm), transpose, mode, rows) -> (ref w0, ref wm, versions, packed)


def packed_weights(w0, wm, F, L, C, transpose, mode="tf32x3", rows=1):
    """Return :func:`pack_weights`, cached per weight pair while its data is unchanged.

    An MD run calls every layer with the same frozen weights; in-place edits bump ``_version``; an
    entry goes when either tensor is freed.
    """
    key = (id(w0), id(wm), transpose, mode, rows)
    versions = (w0._version, wm._version, F, L, C)
    hit = _PACKED.get(key)
    if hit is not None and hit[0]() is w0 and hit[1]() is wm and hit[2] == versions:
        return hit[3]
    packed = pack_weights(w0, wm, F, L, C, transpose, mode, rows)
    drop = lambda _ref: _PACKED.pop(key, None)  # noqa: E731
    _PACKED[key] = (weakref.ref(w0, drop), weakref.ref(wm, drop), versions, packed)
    return packed
