"""Initial node state: type embedding, environment-seed FiLM and the geometric initial embedding.

Math and names follow sezm-architecture.md §2.3–2.4 (deepmd-kit ``EnvironmentInitialEmbedding``,
``GeometricInitialEmbedding``). The GIE reads only the zonal (m = 0) rows of the rotation storage,
through :func:`mdband.so3.storage.zonal`.
"""

from __future__ import annotations

import torch
from torch import nn

from mdband.kernels import seed_mlp as _seed_mlp
from mdband.kernels.seed_mlp import seed_mlp
from mdband.kernels.segment_outer import segment_outer
from mdband.kernels.take_rows import take_rows
from mdband.model.radial import MLPLayer
from mdband.so3 import storage as st

#: the ops this module calls that torch.compile must not trace (graph breaks under compile=on)
OPAQUE = ("segment_outer", "take_rows", "seed_mlp")


class TypeEmbedding(nn.Module):
    """``adam_type_embedding`` (ntypes + 1, dim); the last row is padding."""

    def __init__(self, ntypes: int, dim: int) -> None:
        super().__init__()
        self.adam_type_embedding = nn.Parameter(torch.zeros(ntypes + 1, dim))

    def forward(self, types: torch.Tensor) -> torch.Tensor:
        """Return the embedding rows of ``types`` (N, dim)."""
        return take_rows(self.adam_type_embedding, types)


class _Table(nn.Module):
    """Embedding table ``adam_type_embedding`` (rows, dim) without a padding row.

    It is deepmd-kit's ``SeZMTypeEmbedding(padding=False)``.
    """

    def __init__(self, rows: int, dim: int) -> None:
        super().__init__()
        self.adam_type_embedding = nn.Parameter(torch.zeros(rows, dim))


class _BiasedLayer(nn.Module):
    """deepmd-kit's ``MLPLayer`` with bias and SiLU: ``silu(x @ matrix + bias)``."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.matrix = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return nn.functional.silu(x @ self.matrix + self.bias)


class ChargeSpinEmbedding(nn.Module):
    """deepmd-kit's frame-level ``ChargeSpinEmbedding`` (``add_chg_spin_ebd``).

    Per system, ``silu([T_q[charge + 100], T_s[spin]] @ W + b)`` (C,), added to every atom's type
    embedding. Tables of 200 charges (−100 … 99) and 100 spin multiplicities (0 … 99).
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.charge_embedding = _Table(200, dim)
        self.spin_embedding = _Table(100, dim)
        self.mix_layer = _BiasedLayer(2 * dim, dim)

    def forward(self, charge_spin: torch.Tensor) -> torch.Tensor:
        """Return the (S, C) conditions of ``charge_spin``.

        ``charge_spin``: int64 (S, 2) rows (charge, spin), values already checked against the
        tables (:mod:`mdband.charge_spin`).
        """
        q = self.charge_embedding.adam_type_embedding[charge_spin[:, 0] + 100]
        s = self.spin_embedding.adam_type_embedding[charge_spin[:, 1]]
        return self.mix_layer(torch.cat([q, s], dim=-1))


def env_seed_dims(channels: int) -> dict:
    """Widths of the environment-seed network for a given channel count."""
    embed = min(channels, 128)
    type_dim = min(max(channels // 4, 8), 32)
    axis = min(4 if embed < 64 else 8, embed - 1)
    rbf_out = max(32, embed - 2 * type_dim)
    hidden = min(256, max(2 * embed, rbf_out + 2 * type_dim))
    return {
        "embed": embed,
        "type_dim": type_dim,
        "axis": axis,
        "rbf_out": rbf_out,
        "hidden": hidden,
    }


class EnvironmentSeed(nn.Module):
    """FiLM logits (N, 2C) from a rank-``axis`` contraction of each atom's environment matrix.

    ``use_spin`` (native spin models): the environment matrix gains three channels, the
    neighbours' moments ``env · s_src`` of magnetic types, whose own contraction is added to D
    times ``spin_scale``.
    """

    def __init__(
        self,
        ntypes: int,
        n_radial: int,
        channels: int,
        eps: float,
        use_spin: tuple[bool, ...] | None = None,
    ) -> None:
        super().__init__()
        d = env_seed_dims(channels)
        self.axis = d["axis"]
        self.embed = d["embed"]
        self.eps = eps
        self.rbf_proj_layer1 = MLPLayer(n_radial, d["rbf_out"], act=True)
        self.rbf_proj_layer2 = MLPLayer(d["rbf_out"], d["rbf_out"], act=False)
        self.env_type_embed = TypeEmbedding(ntypes, d["type_dim"])
        self.g_layer1 = MLPLayer(d["rbf_out"] + 2 * d["type_dim"], d["hidden"], act=True)
        self.g_layer2 = MLPLayer(d["hidden"], d["embed"], act=False)
        self.output_proj = MLPLayer(d["embed"] * d["axis"], 2 * channels, act=False)
        self.spin_scale = None
        if use_spin is not None:
            mask = torch.tensor([1.0 if on else 0.0 for on in use_spin], dtype=torch.float64)
            self.spin_mask: torch.Tensor
            self.register_buffer("spin_mask", mask, persistent=False)
            self.spin_scale = nn.Parameter(torch.zeros(1))

    def forward(self, ec, types: torch.Tensor, fused: bool = False, magmoms=None) -> torch.Tensor:
        """Compute the FiLM logits of the destination rows of ``ec``.

        ``types``: the types of every node; ``fused``: the per-node sum of the edges' outer products
        by the Triton op (differentiable once: force evaluation), and the edge MLPs too where the
        tuning table asks for its op, else by torch (differentiable to any order: training).
        ``magmoms`` (every node's moment, native spin models; None: zero moments).
        """
        v = ec.edge_vec
        inv_r = torch.rsqrt((v * v).sum(-1, keepdim=True) + self.eps * self.eps)
        s = ec.env * inv_r
        if ec.gate is not None:  # bridging: the source gate scales the edge's outer product
            s = s * ec.gate[:, None]
        r_tilde = torch.cat([s, s * v * inv_r], dim=-1)  # (E, 4)
        te = self.env_type_embed
        t_src, t_dst = take_rows(types, ec.src), take_rows(types[ec.rows], ec.dst)
        if self.spin_scale is not None:  # the neighbours' moments: three more channels
            if magmoms is None:
                spin_ch = r_tilde.new_zeros(r_tilde.shape[0], 3)
            else:
                spin_ch = ec.env * take_rows(magmoms, ec.src) * self.spin_mask[t_src][:, None]
            r_tilde = torch.cat([r_tilde, spin_ch], dim=-1)  # (E, 7)
        if fused and _seed_mlp.applies(ec.rbf.dtype):
            g = seed_mlp(ec.rbf, t_src, t_dst, te.adam_type_embedding,
                         self.rbf_proj_layer1.matrix, self.rbf_proj_layer2.matrix,
                         self.g_layer1.matrix, self.g_layer2.matrix)  # fmt: skip
        else:
            rp = self.rbf_proj_layer2(self.rbf_proj_layer1(ec.rbf))
            g = self.g_layer2(self.g_layer1(torch.cat([rp, te(t_src), te(t_dst)], -1)))
        agg = segment_outer(r_tilde, g, ec.dst, ec.dst_csr(), fused) * ec.inv_sqrt_deg
        geo = agg[:, :4]
        dmat = torch.bmm(geo.transpose(1, 2), geo[:, :, : self.axis])  # (N, embed, axis)
        if self.spin_scale is not None:
            sp = agg[:, 4:]
            dmat = dmat + self.spin_scale * torch.bmm(sp.transpose(1, 2), sp[:, :, : self.axis])
        return self.output_proj(dmat.reshape(ec.n_nodes, self.embed * self.axis))


def geometric_initial_embedding(ec, radial: torch.Tensor, lmax: int) -> torch.Tensor:
    """Compute the geometric initial embedding (N, (lmax+1)², C), row 0 zero.

    The l ≥ 1 rows are ``s[n] Σ_{e:dst=n} Y_l(û_e) radial[e, l]``. ``radial`` (E, lmax+1, C) is the
    enveloped radial MLP output before the type feature.
    """
    d = st.dim_of(lmax)
    y = st.zonal(ec.rotations, lmax)  # (E, D)
    deg = st.tables(lmax, radial.device)["deg"][:d]
    msg = y[:, 1:, None] * radial[:, deg[1:]]  # (E, D-1, C)
    out = msg.new_zeros(ec.n_nodes, d - 1, radial.shape[-1]).index_add_(0, ec.dst, msg)
    out = out * ec.inv_sqrt_deg
    return torch.cat([out.new_zeros(ec.n_nodes, 1, radial.shape[-1]), out], dim=1)
