"""The fp16x3 SO(2) linear kernel on an input its producer wrote already split (so2_stack).

Shapes as in :mod:`mdband.kernels.so2_stack` (F focus streams, E edges, L = ``lmax``, Dm = 3L+1
rows, C channels). The input arrives as :class:`SplitRows` — xh, xl (F, E, Dm, C) fp16 and inv
(F, E, Dm) fp32 with ``x[f, e, r] = (xh + xl / 2¹¹)[f, e, r] · inv[f, e, r]``, each (edge, row)
scaled by the power of two that puts its largest |x| in [2¹³, 2¹⁴)
(:func:`mdband.kernels._split_dots.row_scales`). Today's producer is the gate's backward kernel
(:func:`mdband.kernels._stack_gate.gate_bwd` with ``split``), which writes gh this way instead
of in fp32: the same bytes plus 4 per row.

:func:`linear` computes ``y = x·W + res`` (or x·Wᵀ) with NR output rows of one m-group per
program (NR = 2 where it divides both groups, L odd; else 1): per k-tile of the row's k-list,
TMA loads of xh, xl (BE × C) and of the fp16 weight pair (NR·C × C), three fp16 tensor-core
products (hi·hi, and the two cross products carrying 2¹¹), scaled by the tile's inv into one
fp32 accumulator; the weights' scale at the end. Against the in-register split of
:mod:`mdband.kernels._stack_linear` (fp32 x loaded, its row maxima found and split once per
output row that reads it) it moves the same bytes and does no split work. Accuracy: the
products carry 22 significant bits of x and W (fp16x3's ≈ 2⁻²¹ per product); measured on an
H200 (``benchmarks/presplit_linear.py``, 647,154 edges, L = 3, C = 64, random x and W): error
from float64 2.0e-7 of the largest output (the in-register tf32x3 kernel 2.4e-6), 2.19 ms
against 2.93 (fp16x3, in registers) and 2.99 (tf32x3).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mdband.kernels import _common as cm
from mdband.kernels import _stack_weights as sw

#: launches (edges per program, warps, stages, rows per program) tried in turn, the first that
#: fits the GPU's shared memory kept per (device, shape); the first from the sweep above (NR = 2:
#: 128/8/3 2.19 ms; NR = 1: 128/8/2 2.40 ms)
LAUNCHES = (
    {"BE": 128, "warps": 8, "stages": 3, "rows": 2},
    {"BE": 128, "warps": 8, "stages": 2, "rows": 1},
    {"BE": 64, "warps": 4, "stages": 2, "rows": 1},
    {"BE": 32, "warps": 4, "stages": 1, "rows": 1},
)
_WORKING: dict = {}  # (device, L, C, transpose) -> the launch that fit there


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
        """The float64 tensor the parts hold (tests)."""
        lo = self.lo.double() / sw.FP16_LO_SCALE
        return (self.hi.double() + lo) * self.inv.double()[..., None]


def rows_per_program(L: int, requested: int) -> int:
    """``requested`` rows per program if it divides both m-groups (L + 1 and 2L rows), else 1."""
    return requested if (L + 1) % requested == 0 and (2 * L) % requested == 0 else 1


if cm.TRITON_AVAILABLE:
    from triton.runtime.errors import OutOfResources
    from triton.tools.tensor_descriptor import TensorDescriptor

    triton, tl = cm.triton, cm.tl

    @triton.jit
    def presplit_kernel(
        xh_d, xl_d, inv_ptr, res_d, wh_d, wl_d, y_d, w_inv, E,
        L: tl.constexpr, C: tl.constexpr, BE: tl.constexpr, NR: tl.constexpr,
    ):  # fmt: skip
        """Rows j0..j0+NR−1 of y = x·W + res on BE edges of focus f; grid (P·cdiv(E, BE), F),
        P = Dm / NR row blocks. xh, xl: tiles [1, BE, C] of (F, E, Dm·C) fp16; res, y: tiles
        [1, BE, NR·C] of (F, E, Dm·C) fp32; wh, wl: tiles [NR·C, C] of (F·P·2L·NR·C, C) fp16
        (:func:`mdband.kernels._stack_weights.pack_weights` with ``rows = NR``); inv (F·E·Dm,)."""
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
        inv_row = (f * E + e).to(tl.int64) * DM + xr0
        acc = tl.zeros((BE, NR * C), tl.float32)
        for k in range(nk):
            xc = (xr0 + k) * C
            xh = xh_d.load([f, e0, xc]).reshape(BE, C)
            xl = xl_d.load([f, e0, xc]).reshape(BE, C)
            wr = wrow + k * (NR * C)
            wh = wh_d.load([wr, 0])
            cross = tl.dot(xl, wh.T)  # 2¹¹ × the cross products
            cross = tl.dot(xh, wl_d.load([wr, 0]).T, cross)
            ik = tl.load(inv_ptr + (inv_row + k), mask=e < E, other=0.0)
            acc += (tl.dot(xh, wh.T) + cross * (1.0 / 2048.0)) * ik[:, None]
        y = acc * w_inv + res_d.load([f, e0, j0 * C]).reshape(BE, NR * C)
        y_d.store([f, e0, j0 * C], y.reshape(1, BE, NR * C))


def linear(x: SplitRows, res: torch.Tensor, w0, wm, L: int, transpose: bool) -> torch.Tensor:
    """x·W + res (x·Wᵀ + res with ``transpose``), fp32 (F, E, Dm, C), by :func:`presplit_kernel`
    (TMA-capable GPU or the interpreter), trying smaller launches when shared memory runs out."""
    F, E, dm, C = x.hi.shape
    y = torch.empty(x.hi.shape, dtype=torch.float32, device=x.hi.device)
    if cm.has_no_items(E) or cm.has_no_items(F):
        return y
    dev = x.hi.device
    key = (dev.type, dev.index, L, C, transpose)
    for cfg in [_WORKING[key]] if key in _WORKING else LAUNCHES:
        be, nr = cfg["BE"], rows_per_program(L, cfg["rows"])
        wh, wl, w_scale = sw.packed_weights(w0, wm, F, L, C, transpose, "fp16x3", rows=nr)

        def desc(t, width, be=be):
            return TensorDescriptor.from_tensor(t.view(F, E, dm * C), [1, be, width])

        wd = [TensorDescriptor.from_tensor(t, [nr * C, C]) for t in (wh, wl)]
        try:
            cm.wrap(presplit_kernel)[((dm // nr) * triton.cdiv(E, be), F)](
                desc(x.hi, C), desc(x.lo, C), x.inv, desc(res, nr * C), *wd, desc(y, nr * C),
                1.0 / w_scale, E, L=L, C=C, BE=be, NR=nr, num_warps=cfg["warps"],
                num_stages=cfg["stages"],
            )  # fmt: skip
        except OutOfResources:  # not enough shared memory on this GPU: a smaller launch
            continue
        _WORKING[key] = cfg
        return y
    raise RuntimeError("so2_mix_layer: no launch configuration of the pre-split kernel fits")
