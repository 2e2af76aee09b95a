"""The native spin scheme's embedding of per-atom magnetic moments (deepmd-kit ``SpinEmbedding``).

A moment ``s`` (μB, global frame) of an atom of a magnetic type enters the descriptor three
ways, each gated by the per-type ``use_spin`` mask (a non-magnetic atom's moment is ignored):

* l = 0: ``mag_layer2(silu(|s|² · mag_layer1))`` (C,) added to the atom's type embedding, so it
  also reaches the edge type features;
* l = 1 on site: ``cart_to_l1(s) ⊗ adam_spin_vec_weight[t]`` added to the atom's l = 1 rows
  after the geometric initial embedding;
* l = 1 from neighbours: ``env_e · cart_to_l1(s_src) ⊗ adam_spin_nbr_weight[t_src]`` summed
  over the incoming edges and scaled by 1/√deg with the geometric initial embedding.

The environment seed's spin channels (``env_e · s_src``) live in
:class:`mdband.model.embedding.EnvironmentSeed`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mdband.kernels.segments import segment_sum
from mdband.kernels.take_rows import take_rows
from mdband.model.radial import MLPLayer

_SQRT2 = math.sqrt(2.0)


def cart_to_l1(s: torch.Tensor) -> torch.Tensor:
    """Return the packed l = 1 coefficients (m = -1, 0, +1) of Cartesian vectors ``s`` (..., 3).

    deepmd-kit projects the cross-product matrix ``[s]×`` onto its packed l = 1 basis
    (``SpinEmbedding._build_cart_to_l1_matrix``): ``√2 · (-s_y, -s_z, s_x)``, which rotates
    with the geometry's l = 1 Wigner-D block (tests/model/test_spin_model.py checks it).
    """
    x, y, z = s.unbind(-1)
    return torch.stack([-y, -z, x], dim=-1) * _SQRT2


class SpinEmbedding(nn.Module):
    """deepmd-kit's ``descriptor.spin_embedding`` (parameter names kept)."""

    def __init__(self, use_spin: tuple[bool, ...], channels: int) -> None:
        super().__init__()
        n = len(use_spin)
        self.mag_layer1 = MLPLayer(1, channels, act=True)
        self.mag_layer2 = MLPLayer(channels, channels, act=False)
        self.adam_spin_vec_weight = nn.Parameter(torch.zeros(n, channels))
        self.adam_spin_nbr_weight = nn.Parameter(torch.zeros(n, channels))
        mask = torch.tensor([1.0 if on else 0.0 for on in use_spin], dtype=torch.float64)
        self.spin_mask: torch.Tensor
        self.register_buffer("spin_mask", mask, persistent=False)

    def scalar(self, magmoms: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """Return the l = 0 term (N, C) of atoms with moments (N, 3) and types (N,)."""
        mag2 = (magmoms * magmoms).sum(-1, keepdim=True)
        return self.mag_layer2(self.mag_layer1(mag2)) * self.spin_mask[types][:, None]

    def on_site(self, magmoms: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """Return the on-site l = 1 term (N, 3, C)."""
        w = self.adam_spin_vec_weight[types] * self.spin_mask[types][:, None]
        return cart_to_l1(magmoms)[:, :, None] * w[:, None, :]

    def from_neighbours(self, ec, magmoms: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """Return the neighbours' l = 1 term (n_nodes, 3, C) of the destination rows of ``ec``.

        ``magmoms``, ``types``: every node's. The term is normalised by 1/√deg like the geometric
        initial embedding.
        """
        t_src = take_rows(types, ec.src)
        gate = ec.env * self.spin_mask[t_src][:, None]  # (E, 1)
        w = take_rows(self.adam_spin_nbr_weight, t_src) * gate
        msg = cart_to_l1(take_rows(magmoms, ec.src))[:, :, None] * w[:, None, :]  # (E, 3, C)
        E, C = msg.shape[0], msg.shape[-1]
        out = segment_sum(msg.reshape(E, 3 * C), ec.dst, ec.dst_csr()).reshape(-1, 3, C)
        return out * ec.inv_sqrt_deg
