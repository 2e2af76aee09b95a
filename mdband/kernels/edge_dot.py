"""edge_dot: per-edge dot products of two node tensors (the attention logits' q·k term).

Shapes (E edges, N destination rows, M source rows, H heads, d head width)::

    q        (N, H, d)   destination rows (contiguous)
    k        (M, H, d)   source rows (contiguous)
    dst, src (E,) int64  dst < N, src < M
    out      (E, H):     out[e, h] = Σ_j q[dst[e], h, j] · k[src[e], h, j]

Backward (closed form, both segment sums in CSR order: no atomics, repeatable bit for bit)::

    gq[n] = Σ_{e: dst[e]=n} g[e, h] · k[src[e], h, :]      (dst CSR (perm, row_ptr))
    gk[m] = Σ_{e: src[e]=m} g[e, h] · q[dst[e], h, :]      (src CSR)

The torch path materialises the two (E, H, d) gathers and their product (forward) and rebuilds
the gathers in the backward; the kernels read the node rows in place. One kernel serves both
backward sums (the "other" operand, its row index and the CSR swap). Accumulation in the input
dtype, lanes summed by ``tl.sum`` (fp32: within a few ulps of the torch path, whose summation
order differs). Bytes per edge: forward 2·H·d·s read (gathered, mostly from L2) + H·s written;
each backward sum H·s + H·d·s read + 8 (perm) + 8 (index); s = 4 (fp32) or 8: about half the
torch path's. Launch: the tuning table's ``edge_dot`` record.
Not differentiable twice: training (double backward) keeps the torch path
(:func:`mdband.model.conv.edge_dot` decides).
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.kernels import tuning

OP = "mdband::edge_dot"
OP_BWD = "mdband::edge_dot_bwd"


# ---------------------------------------------------------------------------- references
def edge_dot_reference(q, k, dst, src):
    """Compute out (E, H) with torch gathers (differentiable)."""
    return (q.index_select(0, dst) * k.index_select(0, src)).sum(-1)


def _segment_rows(values, perm, row_ptr):
    """Σ of ``values`` (E, ...) over each CSR segment, in segment order: (n, ...)."""
    return torch.segment_reduce(values.index_select(0, perm), "sum", offsets=row_ptr, axis=0)


def edge_dot_bwd_reference(g, q, k, dst, src, dperm, dptr, sperm, sptr):
    """(gq, gk) of ``out = edge_dot(q, k)`` for the cotangent g (E, H) (closed form)."""
    gq = _segment_rows(g[..., None] * k.index_select(0, src), dperm, dptr)
    gk = _segment_rows(g[..., None] * q.index_select(0, dst), sperm, sptr)
    return gq, gk


# ---------------------------------------------------------------------------- Triton kernels
if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    @triton.jit
    def _rows(
        rows_ptr,
        rows,
        head,
        lanes,
        lane_mask,
        edge_mask,
        N_HEADS: tl.constexpr,
        HEAD_DIM: tl.constexpr,
    ):
        """(BE, BD) block of rows ``rows`` (BE,) of a contiguous (·, H, d) tensor at ``head``."""
        return tl.load(
            rows_ptr + (rows * (N_HEADS * HEAD_DIM) + head * HEAD_DIM)[:, None] + lanes[None, :],
            mask=edge_mask[:, None] & lane_mask[None, :],
            other=0.0,
        )

    @triton.jit
    def edge_dot_kernel(
        q_ptr,
        k_ptr,
        dst_ptr,
        src_ptr,
        out_ptr,
        n_edges,
        N_HEADS: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        BLOCK_DIM: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
    ):
        """out[e, h] for the BLOCK_EDGES edges of program_id(0), every head."""
        e = tl.program_id(0).to(tl.int64) * BLOCK_EDGES + tl.arange(0, BLOCK_EDGES)
        em = e < n_edges
        jj = tl.arange(0, BLOCK_DIM)
        jm = jj < HEAD_DIM
        di = tl.load(dst_ptr + e, mask=em, other=0).to(tl.int64)
        si = tl.load(src_ptr + e, mask=em, other=0).to(tl.int64)
        for h in range(N_HEADS):
            qv = _rows(q_ptr, di, h, jj, jm, em, N_HEADS, HEAD_DIM)
            kv = _rows(k_ptr, si, h, jj, jm, em, N_HEADS, HEAD_DIM)
            tl.store(out_ptr + e * N_HEADS + h, tl.sum(qv * kv, axis=1), mask=em)

    @triton.jit
    def edge_dot_segment_kernel(
        g_ptr,
        other_ptr,
        other_index_ptr,
        perm_ptr,
        offsets_ptr,
        out_ptr,
        N_HEADS: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        BLOCK_DIM: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
    ):
        """Sum the edges of segment n into out[n], in segment order.

        out[n, h, :] = Σ_{e in segment n} g[e, h] · other[other_index[e], h, :] (segment order).
        """
        n, beg, end, jj, jm = cm.node_segment(offsets_ptr, HEAD_DIM, BLOCK_DIM)
        for h in range(N_HEADS):
            acc = tl.zeros((BLOCK_EDGES, BLOCK_DIM), g_ptr.dtype.element_ty)
            for i0 in range(beg, end, BLOCK_EDGES):
                i = i0 + tl.arange(0, BLOCK_EDGES)
                im = i < end
                e = tl.load(perm_ptr + i, mask=im, other=0).to(tl.int64)
                oi = tl.load(other_index_ptr + e, mask=im, other=0).to(tl.int64)
                gv = tl.load(g_ptr + e * N_HEADS + h, mask=im, other=0.0)
                acc += gv[:, None] * _rows(other_ptr, oi, h, jj, jm, im, N_HEADS, HEAD_DIM)
            tl.store(out_ptr + (n * N_HEADS + h) * HEAD_DIM + jj, tl.sum(acc, axis=0), mask=jm)


# ---------------------------------------------------------------------------- dispatch
def backend(device, dtype) -> tuple[str, str]:
    """(backend, reason): Triton on CUDA for fp32/fp64, else the reference."""
    name = cm.select_backend(device, dtype)
    return name, f"{name} on {torch.device(device).type} ({dtype}); reads no rotations"


@torch.library.triton_op(OP, mutates_args=())
def _edge_dot_op(
    q: torch.Tensor,
    k: torch.Tensor,
    dst: torch.Tensor,
    src: torch.Tensor,
    dperm: torch.Tensor,
    dptr: torch.Tensor,
    sperm: torch.Tensor,
    sptr: torch.Tensor,
) -> torch.Tensor:
    if backend(q.device, q.dtype)[0] == "reference":
        return edge_dot_reference(q, k, dst, src)
    E, H, D = dst.shape[0], q.shape[1], q.shape[2]
    out = q.new_empty(E, H)
    if not cm.has_no_items(E):
        be = tuning.current().edge_dot.fwd_edges
        cm.wrap(edge_dot_kernel)[(triton.cdiv(E, be),)](
            q, k, dst, src, out, E, N_HEADS=H, HEAD_DIM=D, BLOCK_DIM=cm.dot_width(D), BLOCK_EDGES=be
        )
    return out


@_edge_dot_op.register_fake
def _(q, k, dst, src, dperm, dptr, sperm, sptr):
    return q.new_empty(dst.shape[0], q.shape[1])


@torch.library.triton_op(OP_BWD, mutates_args=())
def _edge_dot_bwd_op(
    g: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    dst: torch.Tensor,
    src: torch.Tensor,
    dperm: torch.Tensor,
    dptr: torch.Tensor,
    sperm: torch.Tensor,
    sptr: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    if backend(g.device, g.dtype)[0] == "reference":
        return edge_dot_bwd_reference(g, q, k, dst, src, dperm, dptr, sperm, sptr)
    H, D = q.shape[1], q.shape[2]
    gq, gk = torch.empty_like(q), torch.empty_like(k)
    be = tuning.current().edge_dot.bwd_edges
    kw = dict(N_HEADS=H, HEAD_DIM=D, BLOCK_DIM=cm.dot_width(D), BLOCK_EDGES=be)
    for out, other, oidx, perm, ptr in ((gq, k, src, dperm, dptr), (gk, q, dst, sperm, sptr)):
        n = out.shape[0]
        if not cm.has_no_items(n):
            cm.wrap(edge_dot_segment_kernel)[(n,)](g, other, oidx, perm, ptr, out, **kw)
    return gq, gk


@_edge_dot_bwd_op.register_fake
def _(g, q, k, dst, src, dperm, dptr, sperm, sptr):
    return torch.empty_like(q), torch.empty_like(k)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, g):
    q, k, dst, src, dperm, dptr, sperm, sptr = ctx.saved_tensors
    gq, gk = torch.ops.mdband.edge_dot_bwd(g.contiguous(), q, k, dst, src, dperm, dptr, sperm, sptr)
    return gq, gk, None, None, None, None, None, None


_edge_dot_op.register_autograd(_backward, setup_context=_setup)


# ---------------------------------------------------------------------------- public API
def edge_dot(
    q: torch.Tensor,
    k: torch.Tensor,
    dst: torch.Tensor,
    src: torch.Tensor,
    dst_csr: tuple[torch.Tensor, torch.Tensor],
    src_csr: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """Compute the per-edge dot products out (E, H) of q's and k's rows.

    out[e, h] = Σ_j q[dst, h, j] · k[src, h, j]; differentiable once in q and k.

    ``dst_csr`` / ``src_csr`` = :func:`~mdband.kernels._common.csr` of dst over q's rows and of src
    over k's rows.
    """
    if q.dim() != 3 or k.dim() != 3 or q.shape[1:] != k.shape[1:]:
        raise ValueError(
            f"edge_dot: q and k must be (rows, H, d) alike, got {tuple(q.shape)}, {tuple(k.shape)}"
        )
    if dst.shape != src.shape or dst.dim() != 1:
        raise ValueError("edge_dot: dst and src must be (E,) alike")
    cm.check_dtypes("edge_dot", q=q, k=k)
    return _edge_dot_op(q.contiguous(), k.contiguous(), dst, src, *dst_csr, *src_csr)
