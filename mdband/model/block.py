"""SeZM interaction block and descriptor (sezm-architecture.md §2.1–2.6, §2.9).

Block: ``x ← x + post_so2_norm(SO2Conv(pre_so2_norm(x)))``, then for each FFN sub-block
``x ← x + post_ffn_norm(FFN(pre_ffn_norm(x)))``. Norms are present per ``sandwich_norm``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from mdband.kernels._common import csr, segment_sum
from mdband.kernels.band_producer import band_producer
from mdband.kernels.zonal import zonal_embed
from mdband.model.conv import SO2Convolution
from mdband.model.embedding import (
    EnvironmentSeed,
    TypeEmbedding,
    geometric_initial_embedding,
)
from mdband.model.ffn import build_block_ffn, build_readout
from mdband.model.gate import op_applies
from mdband.model.layers import EquivariantRMSNorm, ScalarRMSNorm
from mdband.model.radial import RadialBasis, RadialMLP, cutoff_envelope
from mdband.settings import EngineSettings
from mdband.so3 import storage as st
from mdband.so3.frames import unit_vectors
from mdband.so3.wigner import rotation_storage


@dataclass
class EdgeCache:
    """Per-edge quantities shared by every block (built once per evaluation)."""

    src: torch.Tensor
    dst: torch.Tensor
    edge_vec: torch.Tensor  # (E, 3)
    r: torch.Tensor  # (E, 1)
    env: torch.Tensor  # (E, 1)
    rbf: torch.Tensor  # (E, n_radial)
    rotations: st.RotationStorage | None
    inv_sqrt_deg: torch.Tensor  # (N, 1, 1)
    n_nodes: int
    _csr: tuple | None = None
    _src_csr: tuple | None = None

    def dst_csr(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(perm, row_ptr) of the edges grouped by destination, built once per evaluation."""
        if self._csr is None:
            self._csr = csr(self.dst, self.n_nodes)
        return self._csr

    def src_csr(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(perm, row_ptr) of the edges grouped by source, built once per evaluation."""
        if self._src_csr is None:
            self._src_csr = csr(self.src, self.n_nodes)
        return self._src_csr


class InteractionBlock(nn.Module):
    def __init__(self, cfg, lmax: int, settings=None) -> None:
        super().__init__()
        C = cfg.channels
        so2_pre, so2_post, ffn_pre, ffn_post = cfg.sandwich_norm
        ident = nn.Identity
        self.pre_so2_norm = EquivariantRMSNorm(lmax, C) if so2_pre else ident()
        post_eps = 1e-5 if cfg.edge_norm else 1.0
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

    def forward(self, x, ec, radf, recompute: str = "off"):
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
    """Scalar SeZM descriptor (N, C) from edges; parameter names follow deepmd-kit."""

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
        if cfg.use_env_seed:
            self.env_seed_embedding = EnvironmentSeed(cfg.ntypes, cfg.n_radial, C, cfg.eps)
            norm = ScalarRMSNorm if cfg.edge_norm else None
            if norm is not None:
                self.film_scale_norm = norm(C)
                self.film_shift_norm = norm(C)
            self.film_scale_strength_log = nn.Parameter(torch.zeros(1))
            self.film_shift_strength_log = nn.Parameter(torch.zeros(1))
        self.radial_basis = RadialBasis(cfg.rcut, cfg.n_radial, cfg.basis_type, cfg.env_exp[0])
        layers = [cfg.n_radial, *cfg.radial_hidden, (L + 1) * C]
        self.radial_embedding = RadialMLP(layers, norm=cfg.edge_norm)
        self.blocks = nn.ModuleList(
            [InteractionBlock(cfg, lb, self.settings) for lb in cfg.l_schedule]
        )
        ro_opts = cfg.ffn_opts()
        ro_opts["kmax"] = min(cfg.kmax, cfg.readout_lmax)
        self.output_ffn = build_readout(cfg.readout_lmax, C, ro_opts)
        self.deg_floor = 0.25 if cfg.version >= 1.1 else cfg.eps

    def needs_rotations(self) -> bool:
        return self.cfg.use_gie or any(b.so2_conv.needs_local_frame for b in self.blocks)

    def edge_cache(self, src, dst, edge_vec, n_nodes: int) -> EdgeCache:
        cfg = self.cfg
        _, r = unit_vectors(edge_vec)
        env = cutoff_envelope(r, cfg.rcut, cfg.env_exp[1])
        rbf = self.radial_basis(r)
        dst_csr = csr(dst, n_nodes)  # node sums in a fixed order: repeatable on CUDA
        deg = segment_sum(env[:, 0] ** 2, dst, dst_csr)
        inv_sqrt_deg = torch.rsqrt(deg + self.deg_floor)[:, None, None]
        rot = None
        if self.needs_rotations():
            band = None
            if self.producer_op and self.settings.ops_on(edge_vec):
                band = band_producer(edge_vec, cfg.lmax)
            rot = rotation_storage(edge_vec, cfg.lmax, self.rotation_layout, band)
        return EdgeCache(src, dst, edge_vec, r, env, rbf, rot, inv_sqrt_deg, n_nodes, dst_csr)

    def forward(self, types, src, dst, edge_vec, exchange=None) -> torch.Tensor:
        cfg = self.cfg
        N, C, L = types.shape[0], cfg.channels, cfg.lmax
        ec = self.edge_cache(src, dst, edge_vec, N)
        te = self.type_embedding(types)  # (N, C)
        E = src.shape[0]
        radial = self.radial_embedding(ec.rbf).reshape(E, L + 1, C)
        if cfg.version >= 1.1:
            radial = radial * ec.env[:, :, None]
        x0 = te
        if cfg.use_env_seed:
            film = self.env_seed_embedding(ec, types)
            sc, sh = film[:, :C], film[:, C:]
            if cfg.edge_norm:
                sc, sh = self.film_scale_norm(sc), self.film_shift_norm(sh)
            x0 = te * (1.0 + torch.exp(self.film_scale_strength_log) * torch.tanh(sc))
            x0 = x0 + torch.exp(self.film_shift_strength_log) * torch.tanh(sh)
        x = x0[:, None, :]
        if L > 0:
            if cfg.use_gie:
                if self.zonal_op and self.settings.ops_on(radial):
                    s = ec.inv_sqrt_deg.reshape(N)
                    gie = zonal_embed(ec.rotations, radial, dst, s, csr=ec.dst_csr())
                else:
                    gie = geometric_initial_embedding(ec, radial, L)
                x = torch.cat([x + gie[:, :1], gie[:, 1:]], dim=1)
            else:
                x = torch.cat([x, x.new_zeros(N, st.dim_of(L) - 1, C)], dim=1)
        radf = radial + (te.index_select(0, src) + te.index_select(0, dst))[:, None, :]
        for blk, lb in zip(self.blocks, cfg.l_schedule):
            x = x[:, : st.dim_of(lb)]
            if exchange is not None:
                x = exchange(x)
            x = blk(x, ec, radf[:, : lb + 1], recompute=self.recompute)
        return self.output_ffn(x[:, : st.dim_of(cfg.readout_lmax)])
