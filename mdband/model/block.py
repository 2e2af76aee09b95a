"""SeZM interaction block and descriptor (sezm-architecture.md §2.1–2.6, §2.9).

Block: ``x ← x + post_so2_norm(SO2Conv(pre_so2_norm(x)))``, then for each FFN sub-block
``x ← x + post_ffn_norm(FFN(pre_ffn_norm(x)))``. Norms are present per ``sandwich_norm``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from mdband.kernels import radial_mlp as _radial_mlp
from mdband.kernels._common import csr
from mdband.kernels.band_producer import band_producer
from mdband.kernels.radial_basis import radial_basis
from mdband.kernels.radial_mlp import radial_mlp
from mdband.kernels.segments import segment_sum
from mdband.kernels.take_rows import take_rows
from mdband.kernels.zonal import zonal_embed
from mdband.model import compiling
from mdband.model import conv as _conv
from mdband.model import embedding as _embedding
from mdband.model import grids as _grids
from mdband.model.chunked import DescriptorOutput
from mdband.model.chunking import describe_budget, plan_for_budget, resolve_budget
from mdband.model.conv import SO2Convolution
from mdband.model.embedding import (
    ChargeSpinEmbedding,
    EnvironmentSeed,
    TypeEmbedding,
    geometric_initial_embedding,
)
from mdband.model.ffn import build_block_ffn, build_readout
from mdband.model.gate import op_applies
from mdband.model.layers import EquivariantRMSNorm, ScalarRMSNorm
from mdband.model.memory import MemoryEstimate
from mdband.model.radial import RadialBasis, RadialMLP, cutoff_envelope
from mdband.model.so2 import leading_rows
from mdband.model.spin import SpinEmbedding
from mdband.settings import EngineSettings
from mdband.so3 import storage as st
from mdband.so3.frames import unit_vectors
from mdband.so3.wigner import rotation_storage

#: what compile=on turns into graph breaks: the fused ops and the host-synchronising CSR build
OPAQUE = (
    "csr", "segment_sum", "take_rows", "band_producer", "zonal_embed", "rotation_storage",
    "radial_basis", "radial_mlp",
)  # fmt: skip


def capturing(device) -> bool:
    """Whether ``device``'s current stream is capturing a CUDA graph."""
    return torch.device(device).type == "cuda" and torch.cuda.is_current_stream_capturing()


@dataclass
class EdgeCache:
    """Per-edge quantities of a set of edges.

    The set is either all edges (built once per evaluation and shared by every block) or one
    chunk's edges (rebuilt per chunk).

    ``dst`` indexes the ``n_nodes`` destination rows, which are the rows ``rows`` of the whole
    node tensors; ``src`` indexes the whole node tensors (``n_src`` rows, default n_nodes).
    """

    src: torch.Tensor
    dst: torch.Tensor
    edge_vec: torch.Tensor  # (E, 3)
    r: torch.Tensor  # (E, 1)
    env: torch.Tensor  # (E, 1)
    rbf: torch.Tensor  # (E, n_radial)
    rotations: st.RotationStorage | None
    inv_sqrt_deg: torch.Tensor  # (n_nodes, 1, 1)
    n_nodes: int
    _csr: tuple | None = None
    _src_csr: tuple | None = None
    rows: slice = field(default_factory=lambda: slice(None))
    n_src: int | None = None
    #: (E,) zone-bridging source gate η[src] of each edge (mdband.model.bridging), None
    #: without bridging: it scales what the edge carries to its centre, not the degree
    gate: torch.Tensor | None = None

    def dst_csr(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(perm, row_ptr) of the edges grouped by destination, built once per evaluation."""
        if self._csr is None:
            self._csr = csr(self.dst, self.n_nodes)
        return self._csr

    def src_csr(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(perm, row_ptr) of the edges grouped by source, built once per evaluation."""
        if self._src_csr is None:
            n = self.n_nodes if self.n_src is None else self.n_src
            self._src_csr = csr(self.src, n)
        return self._src_csr


class InteractionBlock(nn.Module):
    """SeZM interaction block: an SO(2) convolution, then ``cfg.ffn_blocks`` FFN sub-blocks.

    Each stage is a residual update between the norms that ``cfg.sandwich_norm`` turns on.
    """

    def __init__(self, cfg, lmax: int, settings=None) -> None:
        super().__init__()
        C = cfg.channels
        so2_pre, so2_post, ffn_pre, ffn_post = cfg.sandwich_norm
        ident = nn.Identity
        self.pre_so2_norm = EquivariantRMSNorm(lmax, C) if so2_pre else ident()
        post_eps = 1e-5 if cfg.radial_norm else 1.0
        self.post_so2_norm = EquivariantRMSNorm(lmax, C, eps=post_eps) if so2_post else ident()
        self.so2_conv = SO2Convolution(cfg, lmax, settings)
        opts = cfg.ffn_opts()
        opts["kmax"] = min(cfg.kmax, lmax)
        n = cfg.ffn_blocks
        self.pre_ffn_norms = nn.ModuleList(
            [EquivariantRMSNorm(lmax, C) if ffn_pre else ident() for _ in range(n)]
        )
        self.post_ffn_norms = nn.ModuleList(
            [EquivariantRMSNorm(lmax, C) if ffn_post else ident() for _ in range(n)]
        )
        self.ffns = nn.ModuleList([build_block_ffn(lmax, C, opts) for _ in range(n)])

    def node_inputs(self, x):
        """Return the node tensors every chunk of this block reads.

        They are x1 (N, D, Cw) and its attention terms (see :meth:`SO2Convolution.node_terms`).
        """
        x1 = self.so2_conv.pre_focus_mix(self.pre_so2_norm(x))
        return x1, self.so2_conv.node_terms(x1)

    def chunk_rows(self, x_rows, x1, nodes, ec, radf):
        """Compute the block output of the destination rows ``ec.rows``.

        It is computed from their input rows ``x_rows`` and the whole node tensors ``x1``,
        ``nodes`` (what :meth:`forward` computes there).
        """
        conv, rows = self.so2_conv, ec.rows
        out, _ = conv.aggregate_edges(x1, nodes, ec, radf)
        rows_nodes = None if nodes is None else tuple(t[rows] for t in nodes)
        x = x_rows + self.post_so2_norm(conv.finish(out, x1[rows], rows_nodes))
        for pre, ffn, post in zip(self.pre_ffn_norms, self.ffns, self.post_ffn_norms):
            x = x + post(ffn(pre(x)))
        return x

    def forward(self, x, ec, radf, recompute: str = "off"):
        """Apply the block to the node features ``x`` over the edges ``ec``.

        ``radf``: the edge features; ``recompute``: "off", "stack" (the convolution's mixing stack
        is rebuilt in the backward) or "all" (with gradients on, the convolution is checkpointed:
        only node-sized tensors are kept and its edge work is redone in the backward).
        """
        h = self.pre_so2_norm(x)
        if recompute == "all" and torch.is_grad_enabled():
            # keep only node-sized tensors: the block's edge work is redone in the backward
            h = checkpoint(self.so2_conv, h, ec, radf, True, use_reentrant=False)
        else:
            h = self.so2_conv(h, ec, radf, recompute == "stack")
        x = x + self.post_so2_norm(h)
        for pre, ffn, post in zip(self.pre_ffn_norms, self.ffns, self.post_ffn_norms):
            x = x + post(ffn(pre(x)))
        return x


class SeZMDescriptor(nn.Module):
    """Scalar SeZM descriptor (N, C) from edges.

    Parameter names follow deepmd-kit. It plans the chunks of an evaluation: the model's
    :class:`~mdband.contract.Chunking`.
    """

    _compiled: Any  # _unchunked under torch.compile (compile=on), kept out of the modules

    def __init__(self, cfg, rotation_layout: st.RotationLayout, settings=None) -> None:
        super().__init__()
        self.cfg = cfg
        self.settings = settings or EngineSettings()
        self.recompute = self.settings.recompute
        self.producer_op = op_applies("band_producer", cfg, cfg.lmax, self.settings)
        self.zonal_op = op_applies("zonal_embed", cfg, cfg.lmax, self.settings)
        C, L = cfg.channels, cfg.lmax
        self.rotation_layout = rotation_layout
        self.type_embedding = TypeEmbedding(cfg.ntypes, C)
        if cfg.add_chg_spin_ebd:
            self.charge_spin_embedding = ChargeSpinEmbedding(C)
        native = cfg.spin.use_spin if cfg.spin is not None and cfg.spin.scheme == "native" else None
        #: the native spin scheme's embedding of the moments (None: not such a model)
        self.spin_embedding = None if native is None else SpinEmbedding(native, C)
        if cfg.use_env_seed:
            self.env_seed_embedding = EnvironmentSeed(
                cfg.ntypes, cfg.n_radial, C, cfg.eps, use_spin=native
            )
            norm = ScalarRMSNorm if cfg.film_norm else None
            if norm is not None:
                self.film_scale_norm = norm(C)
                self.film_shift_norm = norm(C)
            self.film_scale_strength_log = nn.Parameter(torch.zeros(1))
            self.film_shift_strength_log = nn.Parameter(torch.zeros(1))
        self.radial_basis = RadialBasis(
            cfg.rcut,
            cfg.n_radial,
            cfg.basis_family,
            cfg.env_exp[0],
            cfg.basis_type.endswith("/fix"),
        )
        layers = [cfg.n_radial, *cfg.radial_hidden, (L + 1) * C]
        self.radial_embedding = RadialMLP(layers, norm=cfg.radial_norm)
        self.blocks = nn.ModuleList(
            [InteractionBlock(cfg, lb, self.settings) for lb in cfg.l_schedule]
        )
        ro_opts = cfg.ffn_opts()
        ro_opts["kmax"] = min(cfg.kmax, cfg.readout_lmax)
        self.output_ffn = build_readout(cfg.readout_lmax, C, ro_opts)
        if op_applies("grid_product", cfg, cfg.lmax, self.settings):
            for mod in self.modules():  # the grid nets (FFNs, readout, message-node grids)
                if hasattr(mod, "grid_settings"):
                    mod.grid_settings = self.settings  # type: ignore[assignment]  # not a tensor
        self.deg_floor = 0.25 if cfg.version >= 1.1 else cfg.eps
        self.last_chunks = 1  # chunks the last forward used
        #: most edges per chunk, set by :meth:`shrink_chunks` after an evaluation ran out of
        #: memory (the estimate was too low for this device); None: the budget alone decides
        self.chunk_edge_cap: int | None = None
        self.last_chunk_edges = 0  # edges of the largest chunk of the last forward
        self.__dict__["_compiled"] = None  # _unchunked under torch.compile (compile=on)

    def needs_rotations(self) -> bool:
        """Tell whether the edges' rotations are needed (geometric embedding or a local frame)."""
        return self.cfg.use_gie or any(
            cast(InteractionBlock, b).so2_conv.needs_local_frame for b in self.blocks
        )

    def edge_cache(self, src, dst, edge_vec, n_nodes: int, rows=None, n_src=None,
                   csr_pair=None, gate=None) -> EdgeCache:  # fmt: skip
        """Build the geometry of edges ending at ``n_nodes`` destination rows.

        The rows are ``rows`` of the node tensors (all by default); ``src`` indexes ``n_src`` nodes
        (default ``n_nodes``). ``csr_pair``: (dst CSR, src CSR) of these edges when the caller has
        them; ``gate``: their bridging source gate (E,) or None.
        """
        dst_csr, src_csr = csr_pair if csr_pair is not None else (None, None)
        return self.edge_cache_from(src, dst, edge_vec, *self.edge_geometry(edge_vec), n_nodes,
                                    rows=rows, n_src=n_src, dst_csr=dst_csr,
                                    src_csr=src_csr, gate=gate)  # fmt: skip

    def edge_geometry(self, edge_vec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """(r (E, 1), env (E, 1), rbf (E, n_radial), rotations or None) of edge vectors."""
        cfg = self.cfg
        _, r = unit_vectors(edge_vec)
        if self.settings.ops_on(r):  # envelope and basis in one kernel each way
            rb = self.radial_basis
            env, rbf = radial_basis(r, rb.adam_freqs, cfg.rcut, cfg.env_exp[1], rb.exponent,
                                    rb.basis_type, rb.gauss_coeff)  # fmt: skip
        else:
            env = cutoff_envelope(r, cfg.rcut, cfg.env_exp[1])
            rbf = self.radial_basis(r)
        rot = None
        if self.needs_rotations():
            band = None
            if self.producer_op and self.settings.ops_on(edge_vec):
                band = band_producer(edge_vec, cfg.lmax)
            rot = rotation_storage(edge_vec, cfg.lmax, self.rotation_layout, band)
        return r, env, rbf, rot

    def edge_cache_from(self, src, dst, edge_vec, r, env, rbf, rot, n_nodes: int, rows=None,
                        n_src=None, dst_csr=None, src_csr=None,
                        gate=None) -> EdgeCache:  # fmt: skip
        """Build the :meth:`edge_cache` result from the edges' geometry (:meth:`edge_geometry`).

        ``dst_csr``, ``src_csr``: the destinations' and sources' CSR when known; ``gate``: the
        bridging source gate (E,) or None.
        """
        if dst_csr is None:
            dst_csr = csr(dst, n_nodes)  # node sums in a fixed order: repeatable on CUDA
        deg = segment_sum(env[:, 0] ** 2, dst, dst_csr)
        inv_sqrt_deg = torch.rsqrt(deg + self.deg_floor)[:, None, None]
        rows = slice(None) if rows is None else rows
        return EdgeCache(src, dst, edge_vec, r, env, rbf, rot, inv_sqrt_deg, n_nodes, dst_csr,
                         src_csr, rows=rows, n_src=n_src, gate=gate)  # fmt: skip

    # ------------------------------------------------------------------ stages (also per chunk)
    def radial_features(self, ec) -> torch.Tensor:
        """Radial MLP of the edges (E, L+1, C), enveloped from version 1.1 on."""
        C, L = self.cfg.channels, self.cfg.lmax
        enveloped = self.cfg.version >= 1.1
        parts = self.radial_embedding.one_hidden_layer()
        width = (L + 1) * C
        if (
            parts is not None
            and self.settings.ops_on(ec.rbf)
            and _radial_mlp.applies(width, ec.rbf.dtype)
        ):
            w1, scale, w2, eps = parts
            out = radial_mlp(ec.rbf, w1, scale, w2, ec.env if enveloped else None, eps)
            return out.reshape(ec.src.shape[0], L + 1, C)
        radial = self.radial_embedding(ec.rbf).reshape(ec.src.shape[0], L + 1, C)
        if enveloped:
            radial = radial * ec.env[:, :, None]
        return radial

    def edge_features(self, ec, radial, te) -> torch.Tensor:
        """``radf`` (E, L+1, C): the radial features plus the edge type feature."""
        t_src, t_dst = take_rows(te, ec.src), take_rows(te[ec.rows], ec.dst)
        return radial + (t_src + t_dst)[:, None, :]

    def node_embedding(self, types, magmoms=None, charge_spin=None, systems=None) -> torch.Tensor:
        """Return the embedding of every node (N, C).

        It is the type embedding, plus for a charge/spin model (``add_chg_spin_ebd``) the condition
        of each atom's system, then the l = 0 term of its magnetic moment in native spin models
        (``magmoms`` (N, 3); None: zero moments), in deepmd-kit's order. ``charge_spin``: int64
        (S, 2) rows (charge, spin multiplicity); ``systems``: the system of each atom
        (None: one system, S = 1).
        """
        te = self.type_embedding(types)
        if not self.cfg.add_chg_spin_ebd:
            if charge_spin is not None:
                raise ValueError("this model has no charge/spin embedding")
        elif charge_spin is None:
            raise ValueError("a charge/spin model needs charge_spin")
        else:
            cond = self.charge_spin_embedding(charge_spin).to(te.dtype)  # (S, C)
            if systems is None and cond.shape[0] != 1:
                raise ValueError(f"{cond.shape[0]} charge/spin rows for one system")
            # one system: broadcast over the atoms, as deepmd-kit's expand
            te = te + (cond if systems is None else cond[systems])
        if self.spin_embedding is not None and magmoms is not None:
            te = te + self.spin_embedding.scalar(magmoms, types)
        return te

    def initial_features(self, ec, radial, te, types, magmoms=None) -> torch.Tensor:
        """Compute the initial node state of the destination rows (n_nodes, (L+1)², C).

        It is the type embedding with the environment FiLM, plus the geometric initial embedding
        (and, in native spin models, the l = 1 terms of the moments ``magmoms`` of every node).
        """
        cfg = self.cfg
        N, C, L = ec.n_nodes, cfg.channels, cfg.lmax
        x0 = te[ec.rows]
        if cfg.use_env_seed:
            fused = self.settings.ops_on(ec.edge_vec)
            film = self.env_seed_embedding(ec, types, fused=fused, magmoms=magmoms)
            sc, sh = film[:, :C], film[:, C:]
            if cfg.film_norm:
                sc, sh = self.film_scale_norm(sc), self.film_shift_norm(sh)
            x0 = x0 * (1.0 + torch.exp(self.film_scale_strength_log) * torch.tanh(sc))
            x0 = x0 + torch.exp(self.film_shift_strength_log) * torch.tanh(sh)
        x = x0[:, None, :]
        if L > 0:
            if cfg.use_gie:
                if ec.gate is not None:  # the bridging gate mutes what a source carries
                    radial = radial * ec.gate[:, None, None]
                if self.zonal_op and self.settings.ops_on(radial):
                    s = ec.inv_sqrt_deg.reshape(N)
                    gie = zonal_embed(ec.rotations, radial, ec.dst, s, csr=ec.dst_csr())
                else:
                    gie = geometric_initial_embedding(ec, radial, L)
                x = torch.cat([x + gie[:, :1], gie[:, 1:]], dim=1)
            else:
                x = torch.cat([x, x.new_zeros(N, st.dim_of(L) - 1, C)], dim=1)
        spin = self.spin_embedding
        if spin is not None and magmoms is not None:
            l1 = spin.on_site(magmoms[ec.rows], types[ec.rows])
            if cfg.use_gie:
                l1 = l1 + spin.from_neighbours(ec, magmoms, types)
            x = torch.cat([x[:, :1], x[:, 1:4] + l1, x[:, 4:]], dim=1)
        return x

    # ------------------------------------------------------------------ forward
    def forward(self, types, src, dst, edge_vec, exchange=None, plan=None, head=None,
                energy_rows=None, csr_pair=None, latent=False, magmoms=None, gate=None,
                charge_spin=None, systems=None) -> DescriptorOutput:  # fmt: skip
        """Compute the descriptor (N, C), or ``head(descriptor, slice(None))`` given a head.

        With ``latent`` (no head) it returns the pair (descriptor, the readout's input
        (N, (L+1)², C)).

        ``plan`` (:class:`~mdband.model.chunking.ChunkPlan`) runs the evaluation in chunks of
        destination atoms; without one the memory budget decides. ``head(desc_rows, rows)``
        maps descriptor rows to atom energies; chunked, it joins the last stage, whose backward
        is done in the forward for the sum of the first ``energy_rows`` atom energies (all when
        None; see :mod:`mdband.model.chunked`). ``csr_pair``: (dst CSR, src CSR) of the edges
        over the N atoms (:func:`mdband.kernels._common.csr`) when the caller built them (an
        unchunked evaluation then sorts no edges itself). ``magmoms`` (N, 3): the atoms'
        magnetic moments (μB) of a native spin model. ``gate`` (E,): the zone-bridging source
        gate of each edge (:mod:`mdband.model.bridging`), None without bridging.
        ``charge_spin``, ``systems``: see :meth:`node_embedding`.
        """
        N = types.shape[0]
        if plan is None:
            plan = self.choose_plan(dst, N, edge_vec)
        else:
            plan.check(N, int(src.shape[0]))
        self.last_chunks = 1 if plan is None else plan.n_chunks
        self.last_chunk_edges = int(src.shape[0]) if plan is None else plan.max_chunk_edges
        if plan is not None:  # even one chunk: the edge work is recomputed, not kept
            from mdband.model.chunked import chunked_descriptor

            return chunked_descriptor(
                self, types, src, dst, edge_vec, plan, exchange, head, energy_rows, latent,
                magmoms, gate, charge_spin, systems,
            )  # fmt: skip
        if exchange is None and self.settings.compile == "on" and self.recompute == "off":
            if self._compiled is None:
                compiling.make_opaque(sys.modules[__name__], OPAQUE)
                compiling.make_opaque(_conv, _conv.OPAQUE)
                compiling.make_opaque(_embedding, _embedding.OPAQUE)
                compiling.make_opaque(_grids, _grids.OPAQUE)
                self.__dict__["_compiled"] = compiling.compiled(self._unchunked)  # no submodule
            desc = self._compiled(types, src, dst, edge_vec, csr_pair=csr_pair, latent=latent,
                                  magmoms=magmoms, gate=gate, charge_spin=charge_spin,
                                  systems=systems)  # fmt: skip
        else:
            desc = self._unchunked(types, src, dst, edge_vec, exchange, csr_pair, latent, magmoms,
                                   gate, charge_spin, systems)  # fmt: skip
        return desc if head is None else head(desc, slice(None))

    def _unchunked(self, types, src, dst, edge_vec, exchange=None, csr_pair=None,
                   latent=False, magmoms=None, gate=None, charge_spin=None,
                   systems=None) -> DescriptorOutput:  # fmt: skip
        """Compute the descriptor (N, C) of one unchunked evaluation.

        It is compiled under compile=on; with ``latent`` it also returns the readout's input.
        """
        cfg, N = self.cfg, types.shape[0]
        ec = self.edge_cache(src, dst, edge_vec, N, csr_pair=csr_pair, gate=gate)
        te = self.node_embedding(types, magmoms, charge_spin, systems)  # (N, C)
        radial = self.radial_features(ec)
        x = self.initial_features(ec, radial, te, types, magmoms)
        radf = self.edge_features(ec, radial, te)
        for blk, lb in zip(self.blocks, cfg.l_schedule):
            x = x[:, : st.dim_of(lb)]
            if exchange is not None:
                x = exchange(x)
            x = blk(x, ec, leading_rows(radf, lb + 1), recompute=self.recompute)
        x = x[:, : st.dim_of(cfg.readout_lmax)]
        return (self.output_ffn(x), x) if latent else self.output_ffn(x)

    def choose_plan(self, dst, n_atoms: int, like: torch.Tensor):
        """Return the chunk plan the memory budget asks for (None: unchunked).

        None inside a CUDA-graph capture: the step graph captures only a bucket it found unchunked
        just before (a plan needs a host sync; an out-of-memory capture falls back to eager calls).
        """
        if capturing(like.device):
            return None
        budget = resolve_budget(self.settings.memory_budget, like.device)
        if budget is None:
            return None
        est = self.memory_estimate(like.dtype, like)
        return plan_for_budget(est, budget, dst, n_atoms, self.chunk_edge_cap)

    def shrink_chunks(self, device, n_atoms: int) -> bool:
        """Shrink the chunks after an out-of-memory error of an evaluation the budget planned.

        After such an error of an evaluation of ``n_atoms``: cap the chunks at half the edges of its
        largest chunk, for it and the next evaluations. Return False when that cannot help (no
        budget: "off", or "auto" on a CPU; or chunks of one atom already).
        """
        if resolve_budget(self.settings.memory_budget, device) is None:
            return False
        if self.last_chunks >= n_atoms or self.last_chunk_edges <= 1:
            return False
        self.chunk_edge_cap = self.last_chunk_edges // 2
        return True

    def memory_estimate(self, dtype, like: torch.Tensor | None = None) -> MemoryEstimate:
        """Estimate the bytes per edge and per atom of an evaluation in ``dtype``.

        The estimate comes from the config, for tensors like ``like`` (CUDA tensors with the
        fused ops keep fewer).
        """
        fused = like is not None and like.is_cuda and self.settings.ops_on(like)
        return MemoryEstimate.of(self, dtype, fused_cuda=fused)

    def would_chunk(self, n_atoms: int, n_edges: int, like: torch.Tensor) -> bool:
        """Tell whether an evaluation of this size would run in chunks under the memory budget.

        No device sync: the estimate is compared against the budget.
        """
        budget = resolve_budget(self.settings.memory_budget, like.device)
        est = self.memory_estimate(like.dtype, like)
        if budget is None:
            return False
        cap = self.chunk_edge_cap
        return est.unchunked(n_atoms, n_edges) > budget or (cap is not None and n_edges > cap)

    def memory_budget_text(self, device) -> str:
        """Describe the memory budget setting and what it resolves to on ``device`` (one line)."""
        return describe_budget(self.settings.memory_budget, device)
