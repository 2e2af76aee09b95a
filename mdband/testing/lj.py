"""A smooth Lennard-Jones pair potential with the same interface as the SeZM model.

It exists so the MD driver, the ASE calculator and the LAMMPS bridge can be tested quickly
and against exact physics. The pair energy is shifted and smoothly switched to zero between
``r_on`` and ``cutoff`` (C² switch), so NVE conserves energy.

Importing this module registers the model kind ``"lj"``; a process that only loads a saved
file (``mdband run``, LAMMPS) finds it with ``MDBAND_PLUGINS=mdband.testing.lj``.
"""

from __future__ import annotations

import torch

from mdband.contract import DEFAULT_EXCHANGE_WIDTH
from mdband.kinds import register_kind
from mdband.potential import Potential


class LennardJones(torch.nn.Module):
    """``E_i = ½ Σ_{j} 4ε[(σ/r)^12 − (σ/r)^6]·S(r)`` summed on the centre atom ``dst``."""

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
    exchange_width = DEFAULT_EXCHANGE_WIDTH  # it exchanges nothing: no node features

    def __init__(self, epsilon: float, sigma: float, cutoff: float, r_on: float) -> None:
        super().__init__()
        self.register_buffer("epsilon", torch.tensor(float(epsilon), dtype=torch.float64))
        self.register_buffer("sigma", torch.tensor(float(sigma), dtype=torch.float64))
        self.cutoff = float(cutoff)
        self.r_on = float(r_on)

    def forward(self, types, src, dst, edge_vec, exchange=None):
        """Return the per-atom energies (N,) from the edge vectors (``exchange`` is unused)."""
        n = types.shape[0]
        r = torch.linalg.vector_norm(edge_vec, dim=-1)
        sr6 = (self.sigma / r) ** 6
        pair = 4 * self.epsilon * (sr6 * sr6 - sr6)
        x = ((r - self.r_on) / (self.cutoff - self.r_on)).clamp(0.0, 1.0)
        switch = 1 - x**3 * (10 - 15 * x + 6 * x * x)
        e = 0.5 * pair * switch
        out = torch.zeros(n, dtype=edge_vec.dtype, device=edge_vec.device)
        return out.index_add(0, dst, e)


@register_kind("lj")
def _build(config: dict, state_dict: dict, options: dict) -> torch.nn.Module:
    return LennardJones(config["epsilon"], config["sigma"], config["cutoff"], config["r_on"])


def lennard_jones_potential(
    type_map=("Ar",),
    epsilon: float = 0.0104,
    sigma: float = 3.4,
    cutoff: float = 8.5,
    r_on: float = 7.0,
    device="cpu",
    dtype="float64",
) -> Potential:
    """Build an argon-like LJ :class:`Potential` (ε in eV, σ and cutoffs in Å)."""
    config = {"epsilon": epsilon, "sigma": sigma, "cutoff": cutoff, "r_on": r_on}
    model = LennardJones(epsilon, sigma, cutoff, r_on)
    return Potential(
        model,
        kind="lj",
        type_map=list(type_map),
        cutoff=cutoff,
        config=config,
        metadata={"source": "mdband.testing.lj"},
        device=device,
        dtype=dtype,
    )
