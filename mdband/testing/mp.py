"""A two-layer message-passing test potential ("mp2") with SeZM's ghost-exchange contract.

It exists to test how front ends give message-passing models their ghost atoms (above all the
per-layer exchange of the LAMMPS bridge) quickly and without the SeZM model. Like SeZM it calls
``x = exchange(x)`` on its node features after the initial embedding and after every interaction
block except the last; ``exchange`` must return the features with the rows of ghost atoms
(rows ≥ n_local) replaced by their owners' rows.

Energy of atom ``i`` (all terms vanish smoothly at the cutoff, so NVE conserves energy)::

    E_i = ½ Σ_j LJ(r_ij)·S(r_ij) + c · w·h2_i
    h0_i = embed[type_i]                                  (C channels)
    h1_i = tanh(h0_i + (Σ_j R(r_ij) ⊙ h0_j) W1 / n)
    h2_i = tanh(h1_i + (Σ_j R(r_ij) ⊙ h1_j) W2 / n)
    R_c(r) = (1 − (r/rc)²)³ · exp(−a_c (r/rc)²)

The second layer reads ``h1`` of neighbours, so a wrong or missing exchange of ghost rows changes
energies and forces of atoms near a subdomain or periodic boundary.

Importing this module registers the model kind ``"mp2"``; a process that only loads a saved
file (``mdband run``, LAMMPS) finds it with ``MDBAND_PLUGINS=mdband.testing.mp``.
"""

from __future__ import annotations

import torch

from mdband.kinds import register_kind
from mdband.potential import Potential


class MessagePassing2(torch.nn.Module):
    """Two scalar message-passing layers on top of a smooth Lennard-Jones pair term."""

    # the model contract (mdband.contract.ModelContract), declared: no engine settings,
    # rotations, spin, padding, chunks or optional forward arguments
    settings = None
    rotation_layout = None
    rotation_layout_reason = ""
    spin = None
    charge_spin_inputs = None
    direct_forces = False
    float64_edges = False
    zero_beyond_cutoff = False
    accepts_energy_rows = False
    accepts_edge_csr = False
    chunking = None
    # buffers registered in __init__
    epsilon: torch.Tensor
    sigma: torch.Tensor

    def __init__(
        self,
        n_types: int,
        channels: int,
        cutoff: float,
        r_on: float,
        epsilon: float,
        sigma: float,
        coupling: float,
        norm: float,
    ) -> None:
        super().__init__()
        self.cutoff = float(cutoff)
        self.r_on = float(r_on)
        self.coupling = float(coupling)
        self.norm = float(norm)
        #: the contract's exchange width: the row width of every exchanged feature tensor
        self.exchange_width = int(channels)
        f64 = torch.float64
        self.register_buffer("epsilon", torch.tensor(float(epsilon), dtype=f64))
        self.register_buffer("sigma", torch.tensor(float(sigma), dtype=f64))
        self.register_buffer("embed", torch.zeros(n_types, channels, dtype=f64))
        self.register_buffer("decay", torch.linspace(0.5, 3.0, channels, dtype=f64))
        self.register_buffer("w1", torch.zeros(channels, channels, dtype=f64))
        self.register_buffer("w2", torch.zeros(channels, channels, dtype=f64))
        self.register_buffer("readout", torch.zeros(channels, dtype=f64))

    def _pair(self, r: torch.Tensor) -> torch.Tensor:
        sr6 = (self.sigma / r) ** 6
        x = ((r - self.r_on) / (self.cutoff - self.r_on)).clamp(0.0, 1.0)
        switch = 1 - x**3 * (10 - 15 * x + 6 * x * x)
        return 0.5 * 4 * self.epsilon * (sr6 * sr6 - sr6) * switch

    def _message(self, h, radial, src, dst, n):
        msg = torch.zeros(n, h.shape[1], dtype=h.dtype, device=h.device)
        return msg.index_add(0, dst, radial * h[src]) * self.norm

    def forward(self, types, src, dst, edge_vec, exchange=None):
        """Return the per-atom energies (N,): the pair term plus the message-passing readout.

        ``exchange``, when given, is applied to the node features before each layer.
        """
        n = types.shape[0]
        r = torch.linalg.vector_norm(edge_vec, dim=-1)
        u = (r / self.cutoff).clamp(max=1.0) ** 2
        radial = ((1 - u) ** 3).unsqueeze(-1) * torch.exp(-self.decay * u.unsqueeze(-1))
        h = self.embed[types]
        if exchange is not None:
            h = exchange(h)
        h = torch.tanh(h + self._message(h, radial, src, dst, n) @ self.w1)
        if exchange is not None:
            h = exchange(h)
        h = torch.tanh(h + self._message(h, radial, src, dst, n) @ self.w2)
        e = torch.zeros(n, dtype=edge_vec.dtype, device=edge_vec.device)
        e = e.index_add(0, dst, self._pair(r))
        return e + self.coupling * (h @ self.readout)


def _random_state(n_types: int, channels: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    return {
        "embed": torch.rand(n_types, channels, generator=g, dtype=f64) - 0.5,
        "w1": (torch.rand(channels, channels, generator=g, dtype=f64) - 0.5) * 2,
        "w2": (torch.rand(channels, channels, generator=g, dtype=f64) - 0.5) * 2,
        "readout": torch.rand(channels, generator=g, dtype=f64) - 0.5,
    }


def _module(config: dict) -> MessagePassing2:
    return MessagePassing2(
        n_types=config["n_types"],
        channels=config["channels"],
        cutoff=config["cutoff"],
        r_on=config["r_on"],
        epsilon=config["epsilon"],
        sigma=config["sigma"],
        coupling=config["coupling"],
        norm=config["norm"],
    )


@register_kind("mp2")
def _build(config: dict, state_dict: dict, options: dict) -> torch.nn.Module:
    module = _module(config)
    module.load_state_dict(state_dict)
    return module


def message_passing_potential(
    type_map=("Ar",),
    channels: int = 4,
    cutoff: float = 7.0,
    r_on: float = 6.0,
    epsilon: float = 0.0104,
    sigma: float = 3.4,
    coupling: float = 0.3,
    norm: float = 0.5,
    seed: int = 0,
    device="cpu",
    dtype="float64",
) -> Potential:
    """Build an argon-like LJ pair term plus a two-layer message-passing term (eV, Å)."""
    config = {
        "n_types": len(type_map),
        "channels": int(channels),
        "cutoff": float(cutoff),
        "r_on": float(r_on),
        "epsilon": float(epsilon),
        "sigma": float(sigma),
        "coupling": float(coupling),
        "norm": float(norm),
        "seed": int(seed),
    }
    module = _module(config)
    state = module.state_dict()
    state.update(_random_state(len(type_map), int(channels), int(seed)))
    module.load_state_dict(state)
    return Potential(
        module,
        kind="mp2",
        type_map=list(type_map),
        cutoff=cutoff,
        config=config,
        metadata={"source": "mdband.testing.mp"},
        device=device,
        dtype=dtype,
    )
