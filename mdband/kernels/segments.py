"""segment_sum: fixed-order per-node sums of edge values (no atomics), differentiable to any order.

``segment_sum(values, index, (perm, row_ptr))`` sums ``values`` (E, ...) into (n, ...) over the
CSR of ``index`` (:func:`mdband.kernels._common.csr`): the edges gathered into CSR order by
:func:`mdband.kernels.take_rows.take_rows`, then ``torch.segment_reduce``, so results repeat bit
for bit on CUDA (``index_add_`` does not). The backward is a row gather whose backward is this
sum again.
"""

from __future__ import annotations

import torch

from mdband.kernels.take_rows import take_rows


class _SegmentSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, index, perm, row_ptr):
        ctx.save_for_backward(index, perm, row_ptr)
        return torch.segment_reduce(take_rows(values, perm), "sum", offsets=row_ptr, axis=0)

    @staticmethod
    def backward(ctx, g):
        index, perm, row_ptr = ctx.saved_tensors
        return _GatherRows.apply(g, index, perm, row_ptr), None, None, None


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, g, index, perm, row_ptr):
        ctx.save_for_backward(index, perm, row_ptr)
        return take_rows(g, index)

    @staticmethod
    def backward(ctx, gg):
        index, perm, row_ptr = ctx.saved_tensors
        return _SegmentSum.apply(gg, index, perm, row_ptr), None, None, None


def segment_sum(
    values: torch.Tensor, index: torch.Tensor, csr_: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """Sum ``values`` per segment: out[k] = Σ_{e: index[e] = k} values[e].

    ``csr_`` = (perm, row_ptr), the :func:`~mdband.kernels._common.csr` of index.

    values (E, ...) → (n, ...). Sums each segment in a fixed order (no atomics, unlike
    ``index_add_`` on CUDA), so results repeat bit for bit; differentiable to any order (the
    backward is a row gather whose backward is this sum again).
    """
    return _SegmentSum.apply(values, index, *csr_)
