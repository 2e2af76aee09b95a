"""The fp16x3 SO(2) linear kernel on an input its producer wrote already split.

Shapes as in :mod:`mdband.kernels.so2_stack` (F focus streams, E edges, L = ``lmax``, Dm = 3L+1
rows, C channels). The input arrives as :class:`SplitRows` — xh, xl (F, E, Dm, C) fp16 and inv
(F, E, Dm) fp32 with ``x[f, e, r] = (xh + xl / 2¹¹)[f, e, r] · inv[f, e, r]``, each (edge, row)
scaled by the power of two that puts its largest |x| in [2¹³, 2¹⁴) (:func:`.split_dots.
row_scales`). Today's producer is the gate's backward kernel (:mod:`.gate` with SPLIT), which
writes gh this way instead of in fp32: the same bytes plus 4 per row.

The kernel computes ``y = x·W + res`` (or x·Wᵀ) with ROWS output rows of one m-group per
program (2 where it divides both groups, L odd; else 1): per k-tile of the row's k-list, TMA
loads of xh, xl (BE × C) and of the fp16 weight pair (ROWS·C × C), three fp16 tensor-core
products (hi·hi, and the two cross products carrying 2¹¹), scaled by the tile's inv into one
fp32 accumulator; the weights' scale at the end. Against the in-register split of
:mod:`.linear` (fp32 x loaded, its row maxima found and split once per output row that reads
it) it moves the same bytes and does no split work. Accuracy: the products carry 22
significant bits of x and W (fp16x3's ≈ 2⁻²¹ per product; BENCHMARKS.md "2026-12-04 (fourth
session)" has the measured errors and times).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mdband.kernels import _common as cm
from mdband.kernels.so2_stack import weights


class SplitRows(NamedTuple):
    """An fp32 (F, E, Dm, C) tensor as fp16 parts and per-(edge, row) scales (module doc)."""

    hi: torch.Tensor
    lo: torch.Tensor
    inv: torch.Tensor

    @classmethod
    def empty_like(cls, x: torch.Tensor) -> SplitRows:
        """Uninitialised parts for a tensor shaped as x (F, E, Dm, C)."""
        hi = torch.empty(x.shape, dtype=torch.float16, device=x.device)
        inv = torch.empty(x.shape[:3], dtype=torch.float32, device=x.device)
        return cls(hi, torch.empty_like(hi), inv)

    def value(self) -> torch.Tensor:
        """Return the float64 tensor the parts hold (tests)."""
        lo = self.lo.double() / weights.FP16_LO_SCALE
        return (self.hi.double() + lo) * self.inv.double()[..., None]


def rows_per_program(L: int, requested: int) -> int:
    """Return ``requested`` rows per program if it divides both m-groups, else 1.

    The m-groups have L + 1 and 2L rows.
    """
    return requested if (L + 1) % requested == 0 and (2 * L) % requested == 0 else 1


if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    @triton.jit
    def so2_presplit_linear_kernel(
        x_hi_desc,
        x_lo_desc,
        inv_ptr,
        res_desc,
        w_hi_desc,
        w_lo_desc,
        y_desc,
        weight_inv_scale: tl.float64,  # a power of two (see cm.scalar_as)
        n_edges,
        LMAX: tl.constexpr,
        CHANNELS: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        ROWS: tl.constexpr,
    ):
        """Compute rows j0..j0+ROWS−1 of y = x·W + res on BLOCK_EDGES edges of focus f.

        Grid (P·cdiv(E, BE), F), P = Dm / ROWS row blocks. x_hi, x_lo: tiles [1, BE, C] of
        (F, E, Dm·C) fp16; res, y: tiles [1, BE, ROWS·C] of (F, E, Dm·C) fp32; w_hi, w_lo: tiles
        [ROWS·C, C] of (F·P·2L·ROWS·C, C) fp16 (:func:`.weights.pack_weights` with
        ``rows = ROWS``); inv (F·E·Dm,).
        """
        L: tl.constexpr = LMAX
        C: tl.constexpr = CHANNELS
        BE: tl.constexpr = BLOCK_EDGES
        NR: tl.constexpr = ROWS
        DM: tl.constexpr = 3 * L + 1
        NK: tl.constexpr = 2 * L
        P: tl.constexpr = DM // NR
        pid = tl.program_id(0)
        blk = pid % P
        f = tl.program_id(1)
        e0 = (pid // P) * BE
        j0 = blk * NR
        m0 = j0 <= L
        nk = tl.where(m0, L + 1, NK)  # m = 0 rows read x rows 0..L; |m| = 1 rows L+1..3L
        xr0 = tl.where(m0, 0, L + 1)
        wrow = (f * P + blk) * (NK * NR * C)
        e = e0 + tl.arange(0, BE)
        inv_row = (f * n_edges + e).to(tl.int64) * DM + xr0
        acc = tl.zeros((BE, NR * C), tl.float32)
        for k in range(nk):
            xc = (xr0 + k) * C
            xh = x_hi_desc.load([f, e0, xc]).reshape(BE, C)
            xl = x_lo_desc.load([f, e0, xc]).reshape(BE, C)
            wr = wrow + k * (NR * C)
            wh = w_hi_desc.load([wr, 0])
            cross = tl.dot(xl, wh.T)  # 2¹¹ × the cross products
            cross = tl.dot(xh, w_lo_desc.load([wr, 0]).T, cross)
            ik = tl.load(inv_ptr + (inv_row + k), mask=e < n_edges, other=0.0)
            acc += (tl.dot(xh, wh.T) + cross * (1.0 / 2048.0)) * ik[:, None]
        scale = cm.scalar_as(weight_inv_scale, tl.float32)
        y = acc * scale + res_desc.load([f, e0, j0 * C]).reshape(BE, NR * C)
        y_desc.store([f, e0, j0 * C], y.reshape(1, BE, NR * C))
