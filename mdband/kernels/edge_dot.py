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
each backward sum H·s + H·d·s read + 8 (perm) + 8 (index); s = 4 (fp32) or 8. At DPA4-Mini's
647,154 edges (H = 1, d = 32) the torch path moves ≈ 0.5 GB per block, the kernels ≈ 0.25 GB.
Not differentiable twice: training (double backward) keeps the torch path
(:func:`mdband.model.conv.edge_dot` decides).
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm

OP = "mdband::edge_dot"
OP_BWD = "mdband::edge_dot_bwd"
#: edges per program (forward) and per loop step of a node's segment (backward)
BLOCK_EDGES = 64


# ---------------------------------------------------------------------------- references
def edge_dot_reference(q, k, dst, src):
    """out (E, H) with torch gathers (differentiable)."""
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
    triton, tl = cm.triton, cm.tl

    @triton.jit
    def _rows(ptr, idx, h, jj, jm, em, H: tl.constexpr, D: tl.constexpr):
        """(BE, BD) block of rows ``idx`` (BE,) of a contiguous (·, H, D) tensor at head h."""
        return tl.load(ptr + (idx * (H * D) + h * D)[:, None] + jj[None, :],
                       mask=em[:, None] & jm[None, :], other=0.0)  # fmt: skip

    @triton.jit
    def _edge_dot_kernel(
        q_ptr, k_ptr, dst_ptr, src_ptr, out_ptr, E,
        H: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, BE: tl.constexpr,
    ):  # fmt: skip
        """out[e, h] for the BE edges of program_id(0), every head."""
        e = tl.program_id(0).to(tl.int64) * BE + tl.arange(0, BE)
        em = e < E
        jj = tl.arange(0, BD)
        jm = jj < D
        di = tl.load(dst_ptr + e, mask=em, other=0).to(tl.int64)
        si = tl.load(src_ptr + e, mask=em, other=0).to(tl.int64)
        for h in range(H):
            qv = _rows(q_ptr, di, h, jj, jm, em, H, D)
            kv = _rows(k_ptr, si, h, jj, jm, em, H, D)
            tl.store(out_ptr + e * H + h, tl.sum(qv * kv, axis=1), mask=em)

    @triton.jit
    def _segment_dot_kernel(
        g_ptr, o_ptr, oidx_ptr, perm_ptr, ptr_ptr, out_ptr,
        H: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, BE: tl.constexpr,
    ):  # fmt: skip
        """out[n, h, :] = Σ_{e in segment n} g[e, h] · o[oidx[e], h, :] (segment order)."""
        n, beg, end, jj, jm = cm.node_segment(ptr_ptr, D, BD)
        for h in range(H):
            acc = tl.zeros((BE, BD), g_ptr.dtype.element_ty)
            for i0 in range(beg, end, BE):
                i = i0 + tl.arange(0, BE)
                im = i < end
                e = tl.load(perm_ptr + i, mask=im, other=0).to(tl.int64)
                oi = tl.load(oidx_ptr + e, mask=im, other=0).to(tl.int64)
                gv = tl.load(g_ptr + e * H + h, mask=im, other=0.0)
                acc += gv[:, None] * _rows(o_ptr, oi, h, jj, jm, im, H, D)
            tl.store(out_ptr + (n * H + h) * D + jj, tl.sum(acc, axis=0), mask=jm)


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
        grid = (triton.cdiv(E, BLOCK_EDGES),)
        cm.wrap(_edge_dot_kernel)[grid](q, k, dst, src, out, E, H=H, D=D, BD=cm.dot_width(D),
                                        BE=BLOCK_EDGES)  # fmt: skip
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
    kw = dict(H=H, D=D, BD=cm.dot_width(D), BE=BLOCK_EDGES)
    for out, other, oidx, perm, ptr in ((gq, k, src, dperm, dptr), (gk, q, dst, sperm, sptr)):
        n = out.shape[0]
        if not cm.has_no_items(n):
            cm.wrap(_segment_dot_kernel)[(n,)](g, other, oidx, perm, ptr, out, **kw)
    return gq, gk


@_edge_dot_bwd_op.register_fake
def _(g, q, k, dst, src, dperm, dptr, sperm, sptr):
    return torch.empty_like(q), torch.empty_like(k)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, g):
    q, k, dst, src, dperm, dptr, sperm, sptr = ctx.saved_tensors
    gq, gk = torch.ops.mdband.edge_dot_bwd(g.contiguous(), q, k, dst, src, dperm, dptr, sperm,
                                           sptr)  # fmt: skip
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
    """out (E, H) = Σ_j q[dst, h, j] · k[src, h, j]; differentiable once in q and k.

    ``dst_csr`` / ``src_csr`` = :func:`~mdband.kernels._common.csr` of dst over q's rows and of
    src over k's rows.
    """
    if q.dim() != 3 or k.dim() != 3 or q.shape[1:] != k.shape[1:]:
        raise ValueError(
            f"edge_dot: q and k must be (rows, H, d) alike, got {tuple(q.shape)}, {tuple(k.shape)}"
        )
    if dst.shape != src.shape or dst.dim() != 1:
        raise ValueError("edge_dot: dst and src must be (E,) alike")
    cm.check_dtypes("edge_dot", q=q, k=k)
    return _edge_dot_op(q.contiguous(), k.contiguous(), dst, src, *dst_csr, *src_csr)
