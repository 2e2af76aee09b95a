"""take_rows: rows of a node tensor gathered per edge, ``out[e] = x[idx[e]]``.

Shapes::

    x    (N, ...)  any dtype, trailing dims flattened to a row of W = prod(x.shape[1:]) items
    idx  (E,)      int32 or int64, 0 ≤ idx < N
    out  (E, ...)  out[e] = x[idx[e]]

Why a kernel for a copy: on a GPU ``x.index_select(0, idx)`` (and ``x[idx]``) runs torch's
generic gather over an expanded index, several times slower than this copy for every row width
of the model (BENCHMARKS.md "2026-12-02 (third session)"); a model call makes about ten such
gathers.

Exact (a copy). Bytes moved: E·(W·s + index bytes), the rows of x read mostly from L2.
Backward of the op (closed form): ``gx = zeros(N, ...).index_add_(0, idx, g)``, torch's own
backward of ``index_select`` (atomics on CUDA: its summation order is not fixed). :func:`take_rows`
sends inputs that need a gradient to ``index_select`` itself, so the model's gathers are
differentiable to any order as before; integer x (atom types) has no gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mdband.kernels import _common as cm
from mdband.kernels import tuning

OP = "mdband::take_rows"


def take_rows_reference(x: Tensor, idx: Tensor) -> Tensor:
    """Gather ``out[e] = x[idx[e]]`` with torch's ``index_select``."""
    return x.index_select(0, idx)


if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    @triton.jit
    def take_rows_kernel(
        x_ptr,
        index_ptr,
        out_ptr,
        n_edges,
        row_width,
        BLOCK_EDGES: tl.constexpr,
        BLOCK_WIDTH: tl.constexpr,
    ):
        """Copy out[e, w] = x[index[e], w] for one (BLOCK_EDGES × BLOCK_WIDTH) block.

        The program's ids along axes 0 and 1 pick the block's edges and row items.
        """
        W = row_width
        e = tl.program_id(0).to(tl.int64) * BLOCK_EDGES + tl.arange(0, BLOCK_EDGES)
        w = tl.program_id(1) * BLOCK_WIDTH + tl.arange(0, BLOCK_WIDTH)
        em = e < n_edges
        m = em[:, None] & (w < W)[None, :]
        r = tl.load(index_ptr + e, mask=em, other=0).to(tl.int64)
        v = tl.load(x_ptr + (r * W)[:, None] + w[None, :], mask=m)
        tl.store(out_ptr + (e * W)[:, None] + w[None, :], v, mask=m)


def backend(device, dtype) -> tuple[str, str]:
    """(backend, reason): Triton on CUDA (or the interpreter when forced) for every dtype."""
    if not cm.TRITON_AVAILABLE:
        return "reference", "reference: Triton is not installed"
    # the gather is a copy: any dtype; the dispatch rule is the kernels' (CUDA → Triton)
    probe = dtype if dtype in cm.KERNEL_DTYPES else torch.float32
    name = cm.select_backend(device, probe)
    return name, f"{name} on {torch.device(device).type} ({dtype})"


def _launch(x2: Tensor, idx: Tensor, out: Tensor) -> None:
    """Run the copy at the tuning table's take_rows launch.

    Row blocks of at most ``max_width`` items, as many edges per program as ``items`` allows (at
    least 16).
    """
    E, W = idx.shape[0], x2.shape[1]
    launch = tuning.current().take_rows
    bw = min(cm.next_pow2(W), launch.max_width)
    be = max(16, launch.items // bw)
    grid = (triton.cdiv(E, be), triton.cdiv(W, bw))
    cm.wrap(take_rows_kernel)[grid](
        x2, idx, out, E, W, BLOCK_EDGES=be, BLOCK_WIDTH=bw, num_warps=launch.warps
    )


@torch.library.triton_op(OP, mutates_args=())
def _take_rows_op(x: Tensor, idx: Tensor) -> Tensor:
    out = x.new_empty((idx.shape[0], *x.shape[1:]))
    if cm.has_no_items(out.numel()):
        return out
    _launch(x.reshape(x.shape[0], -1), idx, out)
    return out


@_take_rows_op.register_fake
def _(x, idx):
    return x.new_empty((idx.shape[0], *x.shape[1:]))


def _setup(ctx, inputs, output):
    x, idx = inputs
    ctx.save_for_backward(idx)
    ctx.n_rows = x.shape[0]


def _backward(ctx, g):
    (idx,) = ctx.saved_tensors
    gx = g.new_zeros((ctx.n_rows, *g.shape[1:])).index_add_(0, idx, g)
    return gx, None


_take_rows_op.register_autograd(_backward, setup_context=_setup)


def take_rows(x: Tensor, idx: Tensor) -> Tensor:
    """``x.index_select(0, idx)`` (x (N, ...), idx (E,) integer): out (E, ...).

    The Triton copy on CUDA when x needs no gradient (inference: frozen weights, integer
    types, the gathers inside ``segment_sum``); torch's index_select elsewhere, and whenever a
    gradient flows to x (training: differentiable to any order). The op's own backward
    (:data:`OP` with autograd) serves direct calls.
    """
    if idx.dim() != 1 or idx.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"take_rows: idx must be a 1-d int32/int64 tensor, got {idx.dtype} {tuple(idx.shape)}"
        )
    if x.dim() == 0:
        raise ValueError("take_rows: x must have a row axis")
    name, _ = backend(x.device, x.dtype)
    grad = x.requires_grad and torch.is_grad_enabled()
    if name == "reference" or grad or x.device != idx.device:
        return take_rows_reference(x, idx)
    return _take_rows_op(x.contiguous(), idx.contiguous())
