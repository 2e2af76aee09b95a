"""Chunked evaluation of the SeZM descriptor: node tensors whole, edge work one chunk at a time.

The edges are grouped by destination (a stable sort, skipped when the plan says they already
are; the permutation is an ``index_select`` of the caller's ``edge_vec``, so its gradient comes
back in the caller's order) and cut by a :class:`~mdband.model.chunking.ChunkPlan`. Per stage
(initial embedding, each block, the readout) every chunk computes the new node rows of its
destination atoms from the whole node tensors of the stage's input (sources may be anywhere)
and its own edge vectors; the per-edge geometry (radial basis, envelope, rotations, the radial
embedding, FiLM / GIE sums, 1/√deg) is rebuilt per chunk. The block's node work (norms, FFNs)
runs inside the chunk on its rows, so the FFN's grid activations are bounded the same way.

With frozen weights (inference) a stage is one :class:`_ChunkedStage`: it runs every chunk
without an autograd graph and keeps only the stage's input x and edge vectors; its backward
rebuilds the whole node tensors the chunks read (a block's ``node_inputs(x)``: x1 and the
attention terms) once, recomputes one chunk's edge work at a time and sends the node tensors'
summed cotangents back through ``node_inputs`` once. So between the forward and the backward an
evaluation keeps one node tensor (N, (L+1)², C) per block, plus the edge list (large-cells.md
§3). The last stage (last block, readout, energy head) does better: it does each chunk's
backward right after its forward, for the cotangent the caller announces (the sum of the atom
energies, or of the first ``n_local``), so its edge work runs once, not twice; any other
cotangent, or ``create_graph``, recomputes. With trainable weights (training) every chunk goes
through ``torch.utils.checkpoint``. The ``recompute`` setting does not apply.

Sums over a destination's edges see the same edges in the same order as unchunked, so the
results agree to rounding (products over fewer rows may round differently in BLAS; the tests
hold float64 to 1e-12 relative). Weight gradients and double backward (training, derivatives
of forces) go through the chunks as well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, cast

import torch
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint

from mdband.model.so2 import leading_rows
from mdband.so3 import storage as st

#: the last stage does its backward in its forward (for the announced cotangent); False
#: recomputes it like the other stages (benchmarks/gpu_large.py ``--cost`` times both)
EAGER_FINAL_STAGE = True
#: the edges' geometry (vectors, lengths, envelope, radial basis, rotations; 5 + n_radial +
#: the rotation's floats per edge) is built once per chunk and kept for every stage, instead of
#: rebuilt by each stage and its backward; off until measured faster (gpu_large.py --cost)
CACHE_GEOMETRY = False
#: what a descriptor evaluation returns: (N, C), or with ``latent`` the pair (descriptor, the
#: readout's input)
DescriptorOutput = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


class Stage(NamedTuple):
    """One stage of a chunked evaluation.

    ``rows(c, edge_c, x_c, *prepared, *consts)``: the output rows of chunk c (its destination
    atoms, or its edges when ``per_edge``); ``prepare(x)``: the whole node tensors every chunk
    reads (None: none); ``name`` labels its profiler ranges (``chunked: NAME ...``).
    """

    rows: Callable
    prepare: Callable | None = None
    name: str = "stage"
    per_edge: bool = False


class _ChunkedStage(torch.autograd.Function):
    """``out = cat_c rows(c, vec_c, x_c, *prepare(x), *consts)`` over the chunks.

    Without ``cot``: run without a graph, keep ``vec, x, consts``; the backward recomputes
    (:meth:`EdgeChunks.vjp`). With ``cot`` (N,): the vector-Jacobian product for that
    cotangent is done in the forward, and the backward returns it when the cotangent it gets
    equals ``cot`` (one ``torch.equal``), otherwise recomputes. Under ``create_graph`` the
    recomputation reads views of the inputs, so the gradients stay differentiable (forces of
    forces) while each input gets only its own partial derivative. ``rows`` and ``prepare``
    must not read tensors that require grad other than the inputs (frozen weights).
    """

    @staticmethod
    def forward(ctx, chunks, stage, cot, vec, x, *consts):
        need = ctx.needs_input_grad[3:]
        grads = None
        if cot is None:
            out, _ = chunks.vjp(stage, (vec, x, *consts), need, None, False, stage.name)
        else:
            with torch.enable_grad():
                out, grads = chunks.vjp(stage, (vec, x, *consts), need, cot, False,
                                        f"{stage.name} one pass")  # fmt: skip
        ctx.save_for_backward(vec, x, *consts)
        ctx.chunks, ctx.stage, ctx.need = chunks, stage, need
        ctx.cot, ctx.grads = cot, grads
        return out

    @staticmethod
    def backward(ctx, grad):
        grads, ctx.grads = ctx.grads, None  # a second backward (retain_graph) recomputes
        higher = torch.is_grad_enabled()  # create_graph=True
        if grads is None or higher or not torch.equal(grad, ctx.cot):
            with torch.enable_grad():
                _, grads = ctx.chunks.vjp(ctx.stage, ctx.saved_tensors, ctx.need, grad, higher,
                                          f"{ctx.stage.name} recomputed")  # fmt: skip
        return (None, None, None, *grads)


class EdgeChunks:
    """The dst-sorted edges of one evaluation cut by ``plan``.

    It builds a chunk's geometry and runs a stage over the chunks.
    """

    def __init__(self, desc, src, dst, edge_vec, n_nodes: int, plan) -> None:
        if not plan.dst_sorted and src.shape[0] > 1:
            perm = torch.argsort(dst, stable=True)
            src, dst, edge_vec = src[perm], dst[perm], edge_vec.index_select(0, perm)
        self.desc, self.src, self.dst, self.vec = desc, src, dst, edge_vec
        #: the edge input's 4th column is the bridging source gate (chunked_descriptor)
        self.gated = edge_vec.shape[1] == 4
        self.n_nodes = n_nodes
        self.trainable = any(p.requires_grad for p in desc.parameters())  # training
        self.bounds = plan.chunks()
        self.sizes = [a1 - a0 for a0, a1, _, _ in self.bounds]
        #: (E, G) packed geometry of every edge once :meth:`cache_geometry` ran, else None
        self.geo: torch.Tensor | None = None
        self._csr: dict = {}  # chunk -> its destinations' CSR (a host sync each: built once)
        self._rot = None  # (layout, lmax, per-edge shape) of the packed rotations
        self._n_rbf = 0  # radial basis columns of the packed geometry

    def vectors(self, c: int) -> torch.Tensor:
        """Return chunk c's rows of the dst-sorted edge input (vectors, and the gate column)."""
        _, _, e0, e1 = self.bounds[c]
        return self.vec[e0:e1]

    def geometry(self, c: int, edge: torch.Tensor, packed: bool | None = None):
        """Build the EdgeCache of chunk c (destinations local to it).

        It is built from its rows ``edge`` of the stages' edge input: the packed geometry once
        cached (``packed``, by default whether it is), else the edge vectors.
        """
        a0, a1, e0, e1 = self.bounds[c]
        src, dst = self.src[e0:e1], self.dst[e0:e1] - a0
        if not (self.geo is not None if packed is None else packed):
            vec, gate = edge[:, :3], (edge[:, 3] if self.gated else None)
            r, env, rbf, rot = self.desc.edge_geometry(vec)
        else:
            vec, r, env, rbf, rot, gate = self._unpack(edge)
        ec = self.desc.edge_cache_from(src, dst, vec, r, env, rbf, rot, a1 - a0,
                                       rows=slice(a0, a1), n_src=self.n_nodes,
                                       dst_csr=self._csr.get(c), gate=gate)  # fmt: skip
        self._csr[c] = ec._csr
        return ec

    def cache_geometry(self) -> None:
        """Build every chunk's geometry once, as a stage.

        Its backward recomputes it to the edge vectors; the later stages get the packed (E, G)
        tensor instead of the vectors.
        """

        def pack(c, vec, _x):  # also in its backward, when self.geo is already set
            ec = self.geometry(c, vec, packed=False)
            rot = [] if ec.rotations is None else [ec.rotations.data.flatten(1)]
            if ec.rotations is not None:
                d = ec.rotations
                self._rot = (d.layout, d.lmax, tuple(d.data.shape[1:]))
            self._n_rbf = ec.rbf.shape[1]
            gate = [] if ec.gate is None else [ec.gate[:, None]]
            return torch.cat([ec.edge_vec, ec.r, ec.env, *gate, ec.rbf, *rot], dim=1)

        self.geo = self.stage(pack, None, name="geometry", per_edge=True)

    def _unpack(self, g: torch.Tensor):
        n, k = self._n_rbf, 5 + int(self.gated)  # columns: vec, r, env, [gate], rbf, rotations
        rot = None
        if self._rot is not None:
            layout, lmax, shape = self._rot
            data = g[:, k + n :].contiguous().reshape(g.shape[0], *shape)
            rot = st.RotationStorage(layout, lmax, data)
        # contiguous copies: the fused kernels index these by row (stride 1 columns)
        vec, r, env, rbf = (g[:, a:b].contiguous() for a, b in ((0, 3), (3, 4), (4, 5), (k, k + n)))
        return vec, r, env, rbf, rot, (g[:, 5].contiguous() if self.gated else None)

    def stage(self, rows, x, *consts, prepare=None, cot=None, name="stage",
              per_edge=False) -> torch.Tensor:  # fmt: skip
        """Run a stage over the chunks: ``cat_c rows(c, edge_c, x_c, *prepare(x), *consts)``.

        Each chunk is recomputed in the backward (``cot``: its backward done in the forward for that
        cotangent, see :class:`_ChunkedStage`). ``edge_c`` are chunk c's rows of the edge vectors
        (or of the packed geometry, :meth:`cache_geometry`); ``x`` (N, ...) is split into the
        chunks' destination rows (None: no node input); ``prepare(x)`` gives the whole node tensors
        every chunk reads; ``consts`` are whole node tensors; ``per_edge``: the output rows are the
        chunk's edges, not its atoms; ``name`` labels the stage's profiler ranges
        (``chunked: NAME ...``).
        """
        spec = Stage(rows, prepare, name, per_edge)
        grad = torch.is_grad_enabled()
        if grad and self.trainable:  # weights need gradients: torch's checkpoint per chunk
            prepared = () if prepare is None else tuple(prepare(x))
            parts = [None] * len(self.bounds) if x is None else torch.split(x, self.sizes)
            out = []
            for c in range(len(self.bounds)):
                fn = (lambda v, *t, c=c: rows(c, v, None, *t)) if x is None else (
                    lambda v, xr, *t, c=c: rows(c, v, xr, *t))  # fmt: skip
                head = (self.vectors(c),) if x is None else (self.vectors(c), parts[c])
                out.append(checkpoint(fn, *head, *prepared, *consts, use_reentrant=False))
            return torch.cat(out, dim=0)
        edge = self.vec if self.geo is None else self.geo
        inputs = (edge, x, *consts)
        if not grad or not any(t is not None and t.requires_grad for t in inputs):
            with torch.no_grad():
                return self.vjp(spec, inputs, (False,) * len(inputs), None, False, name)[0]
        return _ChunkedStage.apply(self, spec, cot, *inputs)

    def vjp(self, spec: Stage, inputs, need, cot, higher: bool, name: str = "stage"):
        """Return ``(out, grads)`` of a stage, one chunk's graph at a time.

        ``out = cat_c rows(c, edge_c, x_c, *prepare(x), *consts)`` for
        ``inputs = (edge, x, *consts)``; ``grads``: the gradients of ⟨cot, out⟩ with respect to the
        inputs (None where ``need`` is False; no gradients when ``cot`` is None). ``prepare(x)``
        runs once; the chunks read its outputs as leaves whose summed cotangents go back through it
        once. ``higher``: gradients that stay differentiable (the inputs are viewed, not detached,
        and each chunk differentiates through ``prepare``; ``out`` is then None). Profiler ranges:
        ``chunked: NAME prepare | forward | backward | prepare backward``.
        """
        back = cot is not None
        if higher:
            base = [t.view_as(t) if n else t for t, n in zip(inputs, need)]
        elif back:
            base = [None if t is None else t.detach().requires_grad_(n) for t, n in
                    zip(inputs, need)]  # fmt: skip
        else:
            base = list(inputs)
        vec, x, *consts = base
        rows, prepare = spec.rows, spec.prepare
        with record_function(f"chunked: {name} prepare"):
            prepared = () if prepare is None else tuple(prepare(x))
        # the chunks read leaves of the prepared tensors (their graph is shared by all chunks)
        leaves = prepared
        if back and not higher:
            leaves = tuple(p.detach().requires_grad_(p.requires_grad) for p in prepared)
        if higher:  # differentiate x whole, through prepare (kept for every chunk)
            flags = [need[0], False, *(False for _ in prepared), *need[2:]]
        else:
            flags = [need[0], need[1], *(back and p.requires_grad for p in leaves), *need[2:]]
        outs, per_chunk = [], []
        summed = [None] * (len(prepared) + len(consts) + 1)  # ..., and x whole (higher)
        for c, (a0, a1, e0, e1) in enumerate(self.bounds):
            args = [vec[e0:e1], None if x is None else x[a0:a1], *leaves, *consts]
            with record_function(f"chunked: {name} forward"):
                out = rows(c, *args)
            if not higher:
                outs.append(out.detach())
            if not back:
                continue
            want = [a for a, f in zip(args, flags) if f]
            extra = [x] if higher and need[1] else []
            with record_function(f"chunked: {name} backward"):
                chunk_grads = torch.autograd.grad(
                    out,
                    want + extra,
                    cot[e0:e1] if spec.per_edge else cot[a0:a1],
                    allow_unused=True,
                    retain_graph=higher,
                    create_graph=higher,
                )
            got = iter(chunk_grads)
            g = [_or_zeros(next(got), a) if f else None for a, f in zip(args, flags)]
            g += [_or_zeros(next(got), x)] if extra else [None]
            per_chunk.append(g[:2])
            for k, gk in enumerate(g[2:]):
                if gk is not None:
                    summed[k] = gk if summed[k] is None else summed[k] + gk
        out = None if higher else torch.cat(outs, dim=0)
        if not back:
            return out, None
        gvec = torch.cat([cast(torch.Tensor, g[0]) for g in per_chunk]) if need[0] else None
        gx = None
        if need[1] and higher:
            gx = summed[-1]
        elif need[1]:
            gx = torch.cat([cast(torch.Tensor, g[1]) for g in per_chunk])
            sent = [(p, gp) for p, gp in zip(prepared, summed) if gp is not None]
            if sent:  # the prepared tensors' summed cotangents, back through prepare once
                with record_function(f"chunked: {name} prepare backward"):
                    (more,) = torch.autograd.grad(
                        [p for p, _ in sent], x, [gp for _, gp in sent], allow_unused=True
                    )
                if more is not None:
                    gx = gx + more
        return out, (gvec, gx, *summed[len(prepared) : -1])


def _or_zeros(g, like):
    return torch.zeros_like(like) if g is None else g


def chunked_descriptor(desc, types, src, dst, edge_vec, plan, exchange=None, head=None,
                       energy_rows=None, latent=False, magmoms=None, gate=None,
                       charge_spin=None, systems=None) -> DescriptorOutput:  # fmt: skip
    """Run :meth:`SeZMDescriptor.forward` in the chunks of ``plan`` (same numbers to rounding).

    ``latent`` (no head): also return the readout's input.

    ``head(desc_rows, rows)`` (atom energies of the node rows ``rows``) is applied to the
    descriptor; with frozen weights the last block, the readout and the head then run as one
    stage whose backward is done in its forward, for the cotangent of the sum of the first
    ``energy_rows`` atom energies (all when None). ``magmoms``: the moments of a native spin
    model (every chunk of the initial stage reads them whole). ``gate`` (E,), the bridging
    source gate of each edge (from all edges), rides as a 4th column of the edge input.
    ``charge_spin``, ``systems``: the systems' charge/spin conditions
    (:meth:`SeZMDescriptor.node_embedding`).
    """
    cfg = desc.cfg
    N = types.shape[0]
    edge_in = edge_vec if gate is None else torch.cat([edge_vec, gate[:, None]], dim=1)
    chunks = EdgeChunks(desc, src, dst, edge_in, N, plan)
    if CACHE_GEOMETRY and not chunks.trainable:
        chunks.cache_geometry()
    te = desc.node_embedding(types, magmoms, charge_spin, systems)
    spin = () if magmoms is None else (magmoms,)

    def initial(c, vec, _x, te, *mm):
        ec = chunks.geometry(c, vec)
        return desc.initial_features(ec, desc.radial_features(ec), te, types, *mm)

    x = chunks.stage(initial, None, te, *spin, name="initial")
    ro = st.dim_of(cfg.readout_lmax)
    eager = EAGER_FINAL_STAGE and head is not None and not chunks.trainable
    n_blocks = len(desc.blocks)
    for i, (blk, lb) in enumerate(zip(desc.blocks, cfg.l_schedule)):
        x = x[:, : st.dim_of(lb)].contiguous()  # kept: not the larger tensor it is a view of
        if exchange is not None:
            x = exchange(x)

        def prepare(x, blk=blk):  # (x1, *attention node terms): every chunk reads them whole
            x1, nodes = blk.node_inputs(x)
            return (x1, *(nodes or ()))

        def block(c, vec, x_rows, x1, *rest, blk=blk, lb=lb):
            *nodes, te = rest
            ec = chunks.geometry(c, vec)
            radf = leading_rows(desc.edge_features(ec, desc.radial_features(ec), te), lb + 1)
            return blk.chunk_rows(x_rows, x1, tuple(nodes) or None, ec, radf)

        if head is not None and i == n_blocks - 1 and not chunks.trainable:

            def final(c, *args, block=block):
                a0, a1, _, _ = chunks.bounds[c]
                out = block(c, *args)
                return head(desc.output_ffn(out[:, :ro]), slice(a0, a1))

            n = N if energy_rows is None else int(energy_rows)
            cot = None
            if eager:
                cot = x.new_zeros(N, dtype=torch.float64)
                cot[:n] = 1.0
            return chunks.stage(final, x, te, prepare=prepare, cot=cot, name=f"block {i} + head")
        x = chunks.stage(block, x, te, prepare=prepare, name=f"block {i}")

    def readout(c, vec, x_rows):
        return desc.output_ffn(x_rows)

    x = x[:, :ro]
    out = chunks.stage(readout, x, name="readout")
    if latent:
        return out, x
    return out if head is None else head(out, slice(None))
