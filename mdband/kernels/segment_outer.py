"""segment_outer: per-node sums of per-edge outer products, ``out[n] = Σ a[e] ⊗ b[e]``.

Shapes (E edges, n segments)::

    a, b          (E, P), (E, Q)  float32 or float64, one dtype
    index         (E,) int64      0 ≤ index < n (the destination atom of each edge)
    perm, row_ptr (E,), (n+1,)    the CSR of index (:func:`mdband.kernels._common.csr`)
    out           (n, P, Q)       out[k, p, q] = Σ_{e: index[e] = k} a[e, p] · b[e, q]

Backward (closed form, g (n, P, Q))::

    ga[e, p] = Σ_q g[index[e], p, q] · b[e, q]      gb[e, q] = Σ_p a[e, p] · g[index[e], p, q]

The environment seed's FiLM contraction (sezm-architecture.md §2.3) is this sum with P = 4 (the
scaled edge direction) and Q = the embedding width. The torch path materialises the (E, P·Q)
products, gathers them into CSR order and sums them (forward), then gathers the cotangent back
per edge and reduces two (E, P, Q) products (backward): about ten passes over an (E, P·Q)
tensor. The kernels read a, b (and the node rows of g, from L2)
and write only the results: per edge (P + Q)·s bytes forward and 2·(P + Q)·s + 8 backward, plus
P·Q·s per node (s = 4 in float32). Each node's segment is summed in CSR order by one program
(no atomics: the sums repeat bit for bit); the order differs from the torch path's, so float32
results agree to rounding (tests: 1e-6 relative). Not differentiable twice: training takes the
torch path (``segment_outer(..., fused=False)``, the reference, differentiable to any order).
Launch: the tuning table's ``segment_outer`` record.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.kernels.segments import segment_sum

OP = "mdband::segment_outer"
OP_BWD = "mdband::segment_outer_bwd"


def segment_outer_reference(
    a: Tensor, b: Tensor, index: Tensor, perm: Tensor, row_ptr: Tensor
) -> Tensor:
    """Compute out (n, P, Q) by torch: the products materialised, summed by :func:`segment_sum`.

    Differentiable to any order.
    """
    E, P, Q = a.shape[0], a.shape[1], b.shape[1]
    prod = (a[:, :, None] * b[:, None, :]).reshape(E, P * Q)
    return segment_sum(prod, index, (perm, row_ptr)).reshape(-1, P, Q)


def segment_outer_bwd_reference(g: Tensor, a: Tensor, b: Tensor, index: Tensor):
    """(ga, gb) for the cotangent g (n, P, Q) (closed form)."""
    ge = g.index_select(0, index)  # (E, P, Q)
    return torch.einsum("epq,eq->ep", ge, b), torch.einsum("epq,ep->eq", ge, a)


if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    @triton.jit
    def _rows(matrix_ptr, edges, edge_mask, n_cols, BLOCK_COLS: tl.constexpr):
        """Load rows ``edges`` (masked, (BE,)) of a row-major (E, n_cols) tensor.

        Returns (BE, BLOCK_COLS), zero-padded.
        """
        p = tl.arange(0, BLOCK_COLS)
        m = edge_mask[:, None] & (p < n_cols)[None, :]
        return tl.load(matrix_ptr + edges[:, None] * n_cols + p[None, :], mask=m, other=0.0)

    @triton.jit
    def segment_outer_fwd_kernel(
        a_ptr,
        b_ptr,
        perm_ptr,
        offsets_ptr,
        out_ptr,
        n_cols_a,
        n_cols_b,
        BLOCK_COLS_A: tl.constexpr,
        BLOCK_COLS_B: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
    ):
        """out[n] = Σ over node n's CSR segment, BLOCK_EDGES edges per step."""
        P, Q = n_cols_a, n_cols_b
        n = tl.program_id(0).to(tl.int64)
        beg = tl.load(offsets_ptr + n)
        end = tl.load(offsets_ptr + n + 1)
        p, q = tl.arange(0, BLOCK_COLS_A), tl.arange(0, BLOCK_COLS_B)
        acc = tl.zeros((BLOCK_COLS_A, BLOCK_COLS_B), out_ptr.dtype.element_ty)
        for i in range(beg, end, BLOCK_EDGES):
            j = i + tl.arange(0, BLOCK_EDGES)
            em = j < end
            e = tl.load(perm_ptr + j, mask=em, other=0).to(tl.int64)
            av = _rows(a_ptr, e, em, P, BLOCK_COLS_A)
            bv = _rows(b_ptr, e, em, Q, BLOCK_COLS_B)
            acc += tl.sum(av[:, :, None] * bv[:, None, :], axis=0)
        m = (p < P)[:, None] & (q < Q)[None, :]
        tl.store(out_ptr + n * (P * Q) + p[:, None] * Q + q[None, :], acc, mask=m)

    @triton.jit
    def segment_outer_bwd_kernel(
        g_ptr,
        a_ptr,
        b_ptr,
        index_ptr,
        ga_ptr,
        gb_ptr,
        n_edges,
        n_cols_a,
        n_cols_b,
        BLOCK_COLS_A: tl.constexpr,
        BLOCK_COLS_B: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
    ):
        """ga, gb of BLOCK_EDGES edges: the node rows g[index[e]] read in place."""
        P, Q = n_cols_a, n_cols_b
        e = tl.program_id(0).to(tl.int64) * BLOCK_EDGES + tl.arange(0, BLOCK_EDGES)
        em = e < n_edges
        node = tl.load(index_ptr + e, mask=em, other=0).to(tl.int64)
        p, q = tl.arange(0, BLOCK_COLS_A), tl.arange(0, BLOCK_COLS_B)
        av = _rows(a_ptr, e, em, P, BLOCK_COLS_A)
        bv = _rows(b_ptr, e, em, Q, BLOCK_COLS_B)
        gm = em[:, None, None] & ((p < P)[:, None] & (q < Q)[None, :])[None, :, :]
        off = node[:, None, None] * (P * Q) + (p[:, None] * Q + q[None, :])[None, :, :]
        gv = tl.load(g_ptr + off, mask=gm, other=0.0)
        ga = tl.sum(gv * bv[:, None, :], axis=2)
        gb = tl.sum(gv * av[:, :, None], axis=1)
        tl.store(ga_ptr + e[:, None] * P + p[None, :], ga, mask=em[:, None] & (p < P)[None, :])
        tl.store(gb_ptr + e[:, None] * Q + q[None, :], gb, mask=em[:, None] & (q < Q)[None, :])


def backend(device, dtype) -> tuple[str, str]:
    """(backend, reason): Triton on CUDA for float32/float64 (or the interpreter when forced)."""
    name = cm.select_backend(device, dtype)
    return name, f"{name} on {torch.device(device).type} ({dtype})"


def _widths(P: int, Q: int) -> tuple[int, int]:
    return cm.next_pow2(P), cm.next_pow2(Q)


@torch.library.triton_op(OP, mutates_args=())
def _segment_outer_op(a: Tensor, b: Tensor, index: Tensor, perm: Tensor, row_ptr: Tensor) -> Tensor:
    if cm.chosen_backend("segment_outer", backend(a.device, a.dtype)) == "reference":
        return segment_outer_reference(a, b, index, perm, row_ptr)
    n, P, Q = row_ptr.shape[0] - 1, a.shape[1], b.shape[1]
    out = a.new_empty(n, P, Q)
    if not cm.has_no_items(n):
        PP, QP = _widths(P, Q)
        launch = tuning.current().segment_outer
        cm.wrap(segment_outer_fwd_kernel)[(n,)](
            a,
            b,
            perm,
            row_ptr,
            out,
            P,
            Q,
            BLOCK_COLS_A=PP,
            BLOCK_COLS_B=QP,
            BLOCK_EDGES=launch.fwd_edges,
            num_warps=launch.warps,
        )
    return out


@_segment_outer_op.register_fake
def _(a, b, index, perm, row_ptr):
    return a.new_empty(row_ptr.shape[0] - 1, a.shape[1], b.shape[1])


@torch.library.triton_op(OP_BWD, mutates_args=())
def _segment_outer_bwd_op(g: Tensor, a: Tensor, b: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
    if cm.chosen_backend("segment_outer", backend(a.device, a.dtype)) == "reference":
        return segment_outer_bwd_reference(g, a, b, index)
    E, P, Q = a.shape[0], a.shape[1], b.shape[1]
    ga, gb = torch.empty_like(a), torch.empty_like(b)
    if not cm.has_no_items(E):
        PP, QP = _widths(P, Q)
        launch = tuning.current().segment_outer
        be = launch.bwd_edges
        cm.wrap(segment_outer_bwd_kernel)[(triton.cdiv(E, be),)](
            g,
            a,
            b,
            index,
            ga,
            gb,
            E,
            P,
            Q,
            BLOCK_COLS_A=PP,
            BLOCK_COLS_B=QP,
            BLOCK_EDGES=be,
            num_warps=launch.warps,
        )
    return ga, gb


@_segment_outer_bwd_op.register_fake
def _(g, a, b, index):
    return torch.empty_like(a), torch.empty_like(b)


def _setup(ctx, inputs, output):
    a, b, index, _, _ = inputs
    ctx.save_for_backward(a, b, index)


def _backward(ctx, g):
    a, b, index = ctx.saved_tensors
    ga, gb = torch.ops.mdband.segment_outer_bwd(g.contiguous(), a, b, index)
    return ga, gb, None, None, None


_segment_outer_op.register_autograd(_backward, setup_context=_setup)


def segment_outer(
    a: Tensor, b: Tensor, index: Tensor, csr_: tuple[Tensor, Tensor], fused: bool = True
) -> Tensor:
    """out[k] = Σ_{e: index[e] = k} a[e] ⊗ b[e] (module docstring): (n, P, Q).

    a (E, P), b (E, Q), index (E,) int64 and ``csr_`` = (perm, row_ptr) its CSR. ``fused``: the
    op (differentiable once in a and b: force evaluation); else the torch reference
    (differentiable to any order: training).
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[0] or index.shape != a.shape[:1]:
        raise ValueError(
            f"segment_outer: a (E, P), b (E, Q) and index (E,) expected, got "
            f"{tuple(a.shape)}, {tuple(b.shape)}, {tuple(index.shape)}"
        )
    cm.check_dtypes("segment_outer", a=a, b=b)
    perm, row_ptr = csr_
    if not fused:
        return segment_outer_reference(a, b, index, perm, row_ptr)
    return _segment_outer_op(a.contiguous(), b.contiguous(), index, perm, row_ptr)
