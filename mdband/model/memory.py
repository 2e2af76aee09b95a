"""Memory estimate of one SeZM evaluation (energy + forces) and the census that calibrates it.

The estimate comes from the model's config. It counts, per edge and per atom, the floats autograd
keeps (saved tensors) in the torch path with frozen weights (inference), times
:data:`BACKWARD_FACTOR` for the backward's working set, plus the edge list. Coefficients were fitted
once (least squares, within 10 %) to a saved-tensor census (:func:`saved_tensor_bytes`, float64,
CPU) of nine option sets (channels 8–32, lmax 1–3, 2–4 mixing layers, 1–2 focus and heads, attention
off, the grid FFN / message-node grid); the default config (C = 64, lmax 3, 4 layers) comes out
within 5 % in float32. The fused CUDA ops keep fewer tensors (BENCHMARKS.md: ≈ 43 kB per edge at
4,096 atoms against ≈ 100 kB here), so on CUDA the estimate errs towards chunking early; trainable
weights make autograd keep ≈ 1.5× more (training). ``tests/model/test_chunked.py`` holds the
estimate to the census within a factor of 2 and the measured peak of a chunked CPU evaluation below
its budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mdband.model import chunked
from mdband.so3 import storage as st

#: peak / saved tensors: the backward's working set (measured ≈ 1.05 on the CPU, unchunked)
BACKWARD_FACTOR = 1.25
#: measured peak / this estimate on the fused CUDA path (H200, 4,096 atoms of diamond, float32,
#: CUDA graphs: 27.6 / 86.3 GB for the default config, 7.6 / 21.5 GB for DPA4-Mini;
#: BENCHMARKS.md, 2026-12-01); 0.4 keeps a margin
FUSED_CUDA_FACTOR = 0.4
#: node tensors (N, D, Cw) one block's backward holds at once in a chunked evaluation: the
#: node_inputs graph and its outputs' cotangents, the incoming and outgoing x cotangents
NODE_BACKWARD = 6.0
#: bytes per edge kept through an evaluation besides the model's tensors: the caller's and
#: the sorted src, dst and permutation (int64), edge vectors (caller's float64, the model's,
#: sorted), their gradients and the float64 force assembly, the host neighbour list
EDGE_LIST_BYTES = 288


def kept_geometry_floats(descriptor) -> int:
    """Return the floats per edge a chunked evaluation keeps for the packed geometry.

    They are counted when ``chunked.CACHE_GEOMETRY`` is on, else 0: the geometry (vector, length,
    envelope, radial basis, rotations) and the last stage's gradient of it, done in its forward.
    """
    if not chunked.CACHE_GEOMETRY:
        return 0
    cfg, rot = descriptor.cfg, 0
    if descriptor.needs_rotations():
        band = descriptor.rotation_layout is st.RotationLayout.BAND
        rot = st.band_width(cfg.lmax) if band else st.dim_of(cfg.lmax) ** 2
    gate = int(cfg.bridging != "none")  # the bridging source gate's column
    return 2 * (5 + gate + cfg.n_radial + rot)


def saved_tensor_bytes(fn, *args) -> int:
    """Bytes of the distinct storages autograd saves while running ``fn(*args)``."""
    seen: dict[tuple[int, int], int] = {}

    def pack(t):
        s = t.untyped_storage()
        seen[(s.data_ptr(), s.nbytes())] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return sum(seen.values())


def _edge_floats_block(cfg, lmax: int) -> float:
    """Estimate the floats per edge one block's edge work saves.

    ≈ 0.9 edge tensors (E, Dm, Cw) per mixing layer, ≈ 5 message tensors (E, D, Cw) (rotate back,
    attention, sums), per-head scalars.
    """
    heads = cfg.n_focus * max(cfg.n_atten_head, 1)
    cw = cfg.hidden_channels
    return (
        0.9 * st.reduced_dim(lmax) * cw * cfg.mixing_layers
        + 5.3 * st.dim_of(lmax) * cw
        + (52.0 * heads)
    )


def _edge_floats_shared(cfg) -> float:
    """Estimate the floats per edge of the geometry every block reads.

    Rotations (band entries), radial features and the edge type feature, the radial basis and
    environment seed.
    """
    L = cfg.lmax
    band = 3 * st.dim_of(L) - 2
    return 5.8 * band + 8.8 * (L + 1) * cfg.channels + 8.1 * cfg.n_radial


def _node_floats_block(block, lmax: int, channels: int) -> float:
    """Estimate the floats per atom one block's node work saves.

    Norms and residuals, the FFN (≈ 2 tensors of its first width, ≈ ½ per grid value of it) and the
    message-node grid.
    """
    d = st.dim_of(lmax)
    n = 7.1 * d * channels
    for ffn in block.ffns:
        width = ffn.so3_linear_1.weight.shape[-1]
        proj = getattr(ffn.act, "proj", None)
        n += 2.2 * d * width + (0.0 if proj is None else 0.56 * proj.grid_size * width)
    msg = block.so2_conv.message_node_grid_product
    if msg is not None:
        n += 3.5 * msg.proj.grid_size * msg.proj.n_frames * msg.cf * msg.n_focus
    return n


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per edge / per atom of an evaluation, unchunked and chunked."""

    edge_unchunked: float
    node_unchunked: float
    edge_kept: float  # per edge, kept through a chunked evaluation (edge list and gradients)
    node_kept: float  # per atom, kept through a chunked evaluation (every block's node tensors)
    edge_chunk: float  # per edge of one chunk's working set
    node_chunk: float  # per destination atom of one chunk's working set

    @classmethod
    def of(cls, descriptor, dtype, fused_cuda: bool = False) -> MemoryEstimate:
        """Estimate a :class:`~mdband.model.block.SeZMDescriptor` run in ``dtype``.

        ``fused_cuda``: through the fused CUDA ops, which keep fewer tensors.
        """
        cfg = descriptor.cfg
        size = torch.empty(0, dtype=dtype).element_size()
        blocks = [_edge_floats_block(cfg, lb) for lb in cfg.l_schedule]
        nodes = [
            _node_floats_block(b, lb, cfg.channels)
            for b, lb in zip(descriptor.blocks, cfg.l_schedule)
        ]
        # kept through a chunked evaluation: each block's input x (N, D, C) and the last
        # stage's x cotangent (chunked.py); while a block's backward runs, its node_inputs
        # graph, their summed cotangents and x's (≈ 6 tensors (N, D, Cw): NODE_BACKWARD)
        dims = [st.dim_of(lb) for lb in cfg.l_schedule]
        kept = [d * cfg.channels for d in dims] + [dims[-1] * cfg.channels]
        kept.append(NODE_BACKWARD * max(dims) * cfg.hidden_channels)
        fitting = 4.0 * sum(cfg.fitting_widths) + 2.0 * cfg.channels  # GLU head, readout out
        shared = _edge_floats_shared(cfg)
        f = BACKWARD_FACTOR * size * (FUSED_CUDA_FACTOR if fused_cuda else 1.0)
        return cls(
            edge_unchunked=f * (sum(blocks) + shared) + EDGE_LIST_BYTES,
            node_unchunked=f * (sum(nodes) + fitting),
            edge_kept=float(EDGE_LIST_BYTES) + kept_geometry_floats(descriptor) * size,
            node_kept=size * (sum(kept) + fitting),
            edge_chunk=f * (max(blocks) + shared),
            node_chunk=f * max(nodes),
        )

    def unchunked(self, n_atoms: int, n_edges: int) -> int:
        """Estimated peak bytes of an unchunked evaluation."""
        return int(n_edges * self.edge_unchunked + n_atoms * self.node_unchunked)

    def _per_chunk_edge(self, n_atoms: int, n_edges: int) -> float:
        # a chunk's atoms cost as many edges as the average degree says
        return self.edge_chunk + self.node_chunk * n_atoms / max(n_edges, 1)

    def chunked(self, n_atoms: int, n_edges: int, chunk_edges: int) -> int:
        """Estimated peak bytes with chunks of ``chunk_edges`` edges."""
        kept = n_edges * self.edge_kept + n_atoms * self.node_kept
        return int(kept + chunk_edges * self._per_chunk_edge(n_atoms, n_edges) + self.node_chunk)

    def chunk_edges_within(self, budget: int, n_atoms: int, n_edges: int) -> int:
        """Return the largest chunk (edges) whose evaluation fits ``budget`` bytes (0 if none)."""
        room = budget - self.chunked(n_atoms, n_edges, 0)
        return max(0, int(room // self._per_chunk_edge(n_atoms, n_edges)))
