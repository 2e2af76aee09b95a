"""deepmd-kit's dens mode: a checkpoint trained with its denoising loss, evaluated as DeepPot does.

Such a checkpoint holds, beside the plain energy head (``fitting_net``, untrained), the heads of
the dens fitting net; deepmd-kit switches a model that has them to its dens mode when it loads
the weights, and DeepPot then returns (``deepmd/pt/model/model/sezm_model.py``,
``forward_common_lower_dens``; ``atomic_model/sezm_atomic_model.py``, ``apply_out_stat_dens``):

* energies ``e_i = (GLU-MLP(desc_i) + bias_atom_e[t_i]) · out_std[t_i] + out_bias[t_i]`` from
  the dens energy head (out_std scales them, unlike the plain head);
* forces ``F_i = dens_force_rmsd · h(x_i)`` from the direct-force head :class:`VectorHead` on the
  last latent x (the readout's input), not from the gradient of the energy;
* no virial (NaN).

The dens path builds its neighbour list the historical way: per atom the ``sum(sel)`` nearest
neighbours within the cutoff (:func:`nearest_edges`). The force embedding and the denoising
head act only on corrupted training inputs; a plain evaluation gives them none (zero).
"""

from __future__ import annotations

import torch

from mdband.config import SeZMConfig
from mdband.model.energy import SeZMEnergyModel
from mdband.model.fitting import DensFittingNet


def nearest_edges(dst: torch.Tensor, r: torch.Tensor, n_keep: int) -> torch.Tensor:
    """Which edges are among the ``n_keep`` shortest of their destination atom (bool (E,)).

    Ties in length keep the edge that comes first (deepmd-kit's sort leaves them unspecified).
    No host synchronisation (CUDA-graph capturable).
    """
    order = torch.argsort(r, stable=True)
    order = order[torch.argsort(dst[order], stable=True)]
    by_dst = dst[order].contiguous()
    rank = torch.arange(order.shape[0], device=dst.device) - torch.searchsorted(by_dst, by_dst)
    keep = torch.empty_like(order, dtype=torch.bool)
    keep[order] = rank < n_keep
    return keep


class SeZMDensModel(SeZMEnergyModel):
    """The SeZM network with deepmd-kit's dens heads (``config.active_mode == "dens"``).

    It is a :class:`~mdband.contract.DirectForceModel`.
    """

    #: forces from the direct-force head, no virial
    direct_forces = True

    def build_heads(self, cfg: SeZMConfig) -> None:
        """Build the dens fitting net and its float64 ``out_std`` and ``dens_force_rmsd``."""
        self.dens_fitting_net = DensFittingNet(cfg)
        self.out_std: torch.Tensor
        self.dens_force_rmsd: torch.Tensor
        self.register_buffer("out_std", torch.ones(1, cfg.ntypes, 1, dtype=torch.float64))
        self.register_buffer("dens_force_rmsd", torch.tensor(1.0, dtype=torch.float64))

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        self.out_std.data = self.out_std.data.double()
        self.dens_force_rmsd.data = self.dens_force_rmsd.data.double()
        return out

    def dens_edges(self, dst: torch.Tensor, edge_vec: torch.Tensor) -> torch.Tensor:
        """Move the edges beyond each destination's ``sel`` nearest out of reach.

        Return ``edge_vec`` with every edge beyond its destination's ``sel`` nearest moved out to
        twice the cutoff along its direction, where it contributes exactly zero (the edge list
        keeps its shape: no host synchronisation).
        """
        r = torch.linalg.vector_norm(edge_vec.to(torch.float64), dim=1)
        keep = nearest_edges(dst, r, self.cfg.sel)
        far = edge_vec * (2.0 * self.cfg.rcut / r.clamp_min(1e-12)).to(edge_vec.dtype)[:, None]
        return torch.where(keep[:, None], edge_vec, far)

    def energies_and_forces(self, types, src, dst, edge_vec, exchange=None, plan=None,
                            csr_pair=None, charge_spin=None,
                            systems=None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Compute the atom energies (N,) and direct forces (N, 3), float64.

        ``charge_spin``, ``systems``: as :meth:`SeZMEnergyModel.forward`.
        """
        edge_vec = self.dens_edges(dst, edge_vec)
        charge_spin = self.charge_spin_rows(charge_spin, types.device)
        desc, x = self.descriptor(types, src, dst, edge_vec, exchange=exchange, plan=plan,
                                  csr_pair=csr_pair, latent=True, charge_spin=charge_spin,
                                  systems=systems)  # fmt: skip
        heads = self.dens_fitting_net
        e = heads.energy_head(desc, types) * self.out_std[0, types, 0] + self.out_bias[0, types, 0]
        f = heads.direct_force_head(x).to(torch.float64) * self.dens_force_rmsd
        return e, f

    def forward(self, types, src, dst, edge_vec, exchange=None, plan=None,  # type: ignore[override]  # no magmoms
                energy_rows=None, csr_pair=None, charge_spin=None,
                systems=None) -> torch.Tensor:  # fmt: skip
        """Atom energies (N,), float64 (the forces come from :meth:`energies_and_forces`)."""
        return self.energies_and_forces(types, src, dst, edge_vec, exchange, plan, csr_pair,
                                        charge_spin, systems)[0]  # fmt: skip
