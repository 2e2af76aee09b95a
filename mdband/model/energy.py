"""DPA4 energy model: SeZM descriptor → GLU fitting net → per-atom energies (eV).

``e_i = GLU-MLP(desc_i) @ W_out + bias_atom_e[t_i] + out_bias[t_i]`` (sezm-architecture.md §2.9),
accumulated in float64; the fitting net (with a multi-task model's case embedding) is
:mod:`mdband.model.fitting`, deepmd-kit's dens mode :mod:`mdband.model.dens`. Module names
mirror deepmd-kit's ``atomic_model`` state dict, so an imported checkpoint loads with
``load_state_dict(strict=True)``. A zone-bridged model (``bridging: "zbl"``) feeds the network
clamped, source-gated geometry and adds the ZBL pair energy (:mod:`mdband.model.bridging`).
"""

from __future__ import annotations

import torch
from torch import nn

from mdband.charge_spin import ChargeSpinInputs
from mdband.config import SeZMConfig
from mdband.contract import DEFAULT_EXCHANGE_WIDTH
from mdband.model.block import SeZMDescriptor
from mdband.model.bridging import ZBLBridging
from mdband.model.fitting import FittingNet
from mdband.settings import EngineSettings
from mdband.so3.storage import RotationLayout


class SeZMEnergyModel(nn.Module):
    """SeZM energy model: per-atom energies from the descriptor and the fitting net.

    ``model(types, src, dst, edge_vec, exchange=None) -> (N,) float64`` atom energies; it
    declares :class:`~mdband.contract.ModelContract`. A model with deepmd-kit's
    ``add_chg_spin_ebd`` also takes ``charge_spin`` (and ``systems``; its
    ``charge_spin_inputs`` say what it takes).
    """

    #: forward takes ``energy_rows``: the caller sums the first ``energy_rows`` atom energies
    accepts_energy_rows = True
    #: edges with r ≥ rcut contribute exactly zero (envelope 0 with zero gradient), so an edge
    #: list may be padded with such edges (see :mod:`mdband.step_graph`)
    zero_beyond_cutoff = True
    #: forward takes ``csr_pair``, the (dst, src) CSRs of the edges, built once by the caller
    accepts_edge_csr = True
    #: forces are the gradient of the energy (the dens mode's come from the network)
    direct_forces = False
    #: LAMMPS moves the node features of a per-layer ghost exchange in calls of this width
    exchange_width = DEFAULT_EXCHANGE_WIDTH

    def __init__(
        self,
        cfg: SeZMConfig,
        rotation_layout: RotationLayout,
        reason: str = "",
        settings: EngineSettings | None = None,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.settings = settings or EngineSettings()
        self.descriptor = SeZMDescriptor(cfg, rotation_layout, self.settings)
        self.build_heads(cfg)
        self.out_bias: torch.Tensor
        self.register_buffer("out_bias", torch.zeros(1, cfg.ntypes, 1, dtype=torch.float64))
        self.rotation_layout_reason = reason
        self.spin = cfg.spin  #: a spin model's SpinConfig (None: no spin)
        #: what the model takes of a system's charge and spin (None: nothing)
        self.charge_spin_inputs = (
            ChargeSpinInputs(cfg.default_chg_spin) if cfg.add_chg_spin_ebd else None
        )
        self.bridging = None
        if cfg.bridging == "zbl":
            self.bridging = ZBLBridging(
                cfg.type_map, cfg.bridging_r_inner, cfg.bridging_r_outer, cfg.rcut
            )
        #: the caller hands edge vectors in float64 whatever the network's dtype (the ZBL
        #: term's forces at close range need them); the network gets them in its own dtype
        self.float64_edges = self.bridging is not None

    def build_heads(self, cfg: SeZMConfig) -> None:
        """Build the fitting net(s) reading the descriptor (the dens mode has its own)."""
        self.fitting_net = FittingNet(cfg)

    @property
    def rotation_layout(self) -> RotationLayout:
        """The descriptor's rotation layout (how the edges' rotations are stored)."""
        return self.descriptor.rotation_layout

    def _apply(self, fn, recurse=True):
        # keep the energy-offset buffers in float64 whatever dtype the network runs in
        out = super()._apply(fn, recurse)  # FittingNet keeps its own bias_atom_e in float64
        self.out_bias.data = self.out_bias.data.double()
        return out

    @property
    def chunking(self) -> SeZMDescriptor:
        """The descriptor plans the chunks under the memory budget (:mod:`.chunking`)."""
        return self.descriptor

    @property
    def last_chunks(self) -> int:
        """Chunks of destination atoms the last forward used (1: unchunked)."""
        return self.descriptor.last_chunks

    def charge_spin_rows(self, charge_spin, device):
        """Return ``charge_spin`` as given, or the defaults' row when None for a charge/spin model.

        Without defaults this raises :class:`~mdband.charge_spin.MissingChargeSpinError`.
        """
        if charge_spin is None and self.charge_spin_inputs is not None:
            row = self.charge_spin_inputs.resolve()
            charge_spin = torch.tensor([row], dtype=torch.int64, device=device)
        return charge_spin

    def forward(self, types, src, dst, edge_vec, exchange=None, plan=None,
                energy_rows=None, csr_pair=None, magmoms=None, charge_spin=None,
                systems=None) -> torch.Tensor:  # fmt: skip
        """Compute the atom energies (N,) float64.

        ``plan`` (:class:`~mdband.model.chunking.ChunkPlan`) chunks the evaluation, otherwise the
        memory budget decides. ``energy_rows``: the caller differentiates the sum of the first
        ``energy_rows`` energies (all when None); a chunked evaluation then does its last stage's
        backward in the forward (any other derivative is still exact, at the cost of a
        recomputation). ``csr_pair``: the edges' (dst CSR, src CSR) over the N atoms, when the
        caller built them. ``magmoms`` (N, 3): the atoms' magnetic moments (μB) of a native spin
        model (``cfg.spin``). ``edge_vec`` may be float64 for a network of lower precision (bridged
        models ask for it: the ZBL term is evaluated from it, the network from its cast).
        ``charge_spin``: int64 (S, 2) rows (total charge, spin multiplicity) of a charge/spin model
        (None: its default_chg_spin); ``systems``: each atom's row (None: one system).
        """
        charge_spin = self.charge_spin_rows(charge_spin, types.device)

        def head(desc, rows):
            t = types[rows]
            return self.fitting_net(desc, t) + self.out_bias[0, t, 0]

        dtype = self.net_dtype()
        net_vec, gate = edge_vec.to(dtype), None
        if self.bridging is not None:  # the network reads clamped, gated geometry
            clamped, r_clamped = self.bridging.clamp_vectors(edge_vec, self.cfg.eps)
            gate = self.bridging.source_gate(r_clamped, src, types.shape[0], exchange)
            net_vec, gate = clamped.to(dtype), gate.to(dtype)
        e = self.descriptor(types, src, dst, net_vec, exchange=exchange, plan=plan, head=head,
                            energy_rows=energy_rows, csr_pair=csr_pair, magmoms=magmoms,
                            gate=gate, charge_spin=charge_spin, systems=systems)  # fmt: skip
        if self.bridging is not None:
            e = e + self.bridging.pair_energy(types, src, dst, edge_vec, types.shape[0])
        return e

    def net_dtype(self) -> torch.dtype:
        """Return the dtype the network's weights (and so its edge vectors) are in."""
        return self.descriptor.type_embedding.adam_type_embedding.dtype
