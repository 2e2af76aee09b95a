"""Chunked evaluation of the SeZM descriptor: node tensors whole, edge work one chunk at a time.

The edges are grouped by destination (a stable sort, skipped when the plan says they already
are; the permutation is an ``index_select`` of the caller's ``edge_vec``, so its gradient comes
back in the caller's order) and cut by a :class:`~mdband.model.chunking.ChunkPlan`. Per stage
(initial embedding, each block, the readout) every chunk computes the new node rows of its
destination atoms from the whole node tensors of the stage's input (sources may be anywhere)
and its own edge vectors; the per-edge geometry (radial basis, envelope, rotations, the radial
embedding, FiLM / GIE sums, 1/√deg) is rebuilt per chunk. The block's node work (norms, FFNs)
runs inside the chunk on its rows, so the FFN's grid activations are bounded the same way.

Each chunk runs without an autograd graph and keeps only its inputs (:class:`_Recompute`, an
explicit ``autograd.Function``; with trainable weights ``torch.utils.checkpoint``), and the
backward recomputes one chunk's edge work at a time: the memory is the node state plus one
chunk (large-cells.md §3). The ``recompute`` setting does not apply (chunks recompute all).

Sums over a destination's edges see the same edges in the same order as unchunked, so the
results agree to rounding (products over fewer rows may round differently in BLAS; the tests
hold float64 to 1e-12 relative). Weight gradients and double backward (training, derivatives
of forces) go through the chunks as well.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from mdband.so3 import storage as st


class _Recompute(torch.autograd.Function):
    """``out = fn(*tensors)`` run without a graph; the backward reruns ``fn`` with one, so only
    the inputs are kept (no per-op autograd nodes: ``torch.utils.checkpoint`` keeps ≈ 0.5 MB
    of them in host memory per chunk). ``fn`` must not read tensors that require grad other
    than its inputs (frozen weights). Under ``create_graph`` the rerun reads views of the
    inputs, so the gradients stay differentiable (forces of forces) while each input gets
    only its own partial derivative."""

    @staticmethod
    def forward(ctx, fn, *tensors):
        ctx.fn = fn
        ctx.save_for_backward(*tensors)
        return fn(*tensors)  # grad mode is off in a Function's forward

    @staticmethod
    def backward(ctx, grad):
        saved = ctx.saved_tensors
        need = ctx.needs_input_grad[1:]
        higher = torch.is_grad_enabled()  # create_graph=True
        if higher:  # fresh views: connected to the inputs, but the inner grad stops at them
            args = tuple(t.view_as(t) if n else t for t, n in zip(saved, need))
        else:
            args = tuple(t.detach().requires_grad_(n) for t, n in zip(saved, need))
        want = [i for i, n in enumerate(need) if n]
        with torch.enable_grad():
            out = ctx.fn(*args)
        got = torch.autograd.grad(out, [args[i] for i in want], grad, allow_unused=True,
                                  create_graph=higher)  # fmt: skip
        grads = [None] * len(saved)
        for i, g in zip(want, got):
            grads[i] = g
        return (None, *grads)


def _run(fn, tensors, trainable: bool):
    """``fn(*tensors)`` keeping only its inputs for the backward, which recomputes it.

    With trainable weights (training) ``fn`` also reads tensors that need gradients besides
    its inputs: then torch's non-reentrant checkpoint, which handles that and double backward.
    """
    if not torch.is_grad_enabled():
        return fn(*tensors)
    if trainable:
        return checkpoint(fn, *tensors, use_reentrant=False)
    if not any(t.requires_grad for t in tensors):
        return fn(*tensors)
    return _Recompute.apply(fn, *tensors)


class EdgeChunks:
    """The dst-sorted edges of one evaluation cut by ``plan``; builds a chunk's geometry."""

    def __init__(self, desc, src, dst, edge_vec, n_nodes: int, plan) -> None:
        if not plan.dst_sorted and src.shape[0] > 1:
            perm = torch.argsort(dst, stable=True)
            src, dst, edge_vec = src[perm], dst[perm], edge_vec.index_select(0, perm)
        self.desc, self.src, self.dst, self.vec = desc, src, dst, edge_vec
        self.n_nodes = n_nodes
        self.trainable = any(p.requires_grad for p in desc.parameters())  # training
        self.bounds = plan.chunks()
        self.sizes = [a1 - a0 for a0, a1, _, _ in self.bounds]

    def vectors(self, c: int) -> torch.Tensor:
        _, _, e0, e1 = self.bounds[c]
        return self.vec[e0:e1]

    def geometry(self, c: int, vec: torch.Tensor):
        """EdgeCache of chunk c from its edge vectors ``vec`` (destinations local to it)."""
        a0, a1, e0, e1 = self.bounds[c]
        return self.desc.edge_cache(self.src[e0:e1], self.dst[e0:e1] - a0, vec, a1 - a0,
                                    rows=slice(a0, a1), n_src=self.n_nodes)  # fmt: skip

    def map(self, fn, rows=None, *shared) -> torch.Tensor:
        """``cat_c fn(c, vec_c, [rows_c,] *shared)`` over the chunks, each recomputed in the
        backward; ``rows`` (N, ...) is split into the chunks' destination rows (None: not
        given). ``shared`` are whole node tensors."""
        parts = None if rows is None else torch.split(rows, self.sizes)
        out = []
        for c in range(len(self.bounds)):
            head = (self.vectors(c),) if parts is None else (self.vectors(c), parts[c])
            out.append(_run(lambda *t, c=c: fn(c, *t), (*head, *shared), self.trainable))
        return torch.cat(out, dim=0)


def chunked_descriptor(desc, types, src, dst, edge_vec, plan, exchange=None) -> torch.Tensor:
    """:meth:`SeZMDescriptor.forward` in the chunks of ``plan`` (same numbers to rounding)."""
    cfg = desc.cfg
    N = types.shape[0]
    chunks = EdgeChunks(desc, src, dst, edge_vec, N, plan)
    te = desc.type_embedding(types)

    def initial(c, vec, te):
        ec = chunks.geometry(c, vec)
        return desc.initial_features(ec, desc.radial_features(ec), te, types)

    x = chunks.map(initial, None, te)
    for blk, lb in zip(desc.blocks, cfg.l_schedule):
        x = x[:, : st.dim_of(lb)]
        if exchange is not None:
            x = exchange(x)
        x1, nodes = blk.node_inputs(x)

        def block(c, vec, x_rows, x1, te, *nodes, blk=blk, lb=lb):
            ec = chunks.geometry(c, vec)
            radf = desc.edge_features(ec, desc.radial_features(ec), te)[:, : lb + 1]
            return blk.chunk_rows(x_rows, x1, nodes or None, ec, radf)

        x = chunks.map(block, x, x1, te, *(nodes or ()))

    def readout(c, vec, x_rows):
        return desc.output_ffn(x_rows)

    return chunks.map(readout, x[:, : st.dim_of(cfg.readout_lmax)])
