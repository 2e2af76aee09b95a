"""H5MD 1.1 layout of mdband trajectories: constants, header and frame records, errors.

The layout is described in :mod:`mdband.io.h5md`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from ase import units

from mdband.errors import MdbandError

H5MD_VERSION = (1, 1)
# h5md/modules/units/@system. Unit strings use MDAnalysis's spellings ("Angstrom" for the
# SI system's "Ang"), so MDAnalysis converts them.
UNITS_SYSTEM = "SI"
LIBVER = ("v110", "v110")  # lowest format with SWMR; readable by HDF5 >= 1.10
PARTICLES = "particles/all"
PARTICLE_UNITS = {"position": "Angstrom", "velocity": "Angstrom ps-1", "force": None}
# force unit in the file -> its value for 1 eV/Å. MDAnalysis' H5MD reader converts the first
# three itself; eV Angstrom-1 through mdband.io.mdanalysis.H5MDReader.
FORCE_UNITS = {
    "kJ mol-1 Angstrom-1": units.mol / units.kJ,
    "kcal mol-1 Angstrom-1": units.mol / units.kcal,
    "kJ mol-1 nm-1": 10.0 * units.mol / units.kJ,
    "eV Angstrom-1": 1.0,
}
# name -> (unit, per-frame shape)
OBSERVABLES = {
    "potential_energy": ("eV", ()),
    "kinetic_energy": ("eV", ()),
    "total_energy": ("eV", ()),
    "conserved_energy": ("eV", ()),
    "temperature": ("K", ()),
    "pressure": ("GPa", ()),
    "volume": ("Angstrom+3", ()),
    "stress": ("GPa", (3, 3)),
}
# a committee's model deviations (written when the header asks for them; see
# mdband.committee.deviation for the definitions)
MODEL_DEVI_OBSERVABLES = {
    "max_devi_v": ("eV", ()),
    "min_devi_v": ("eV", ()),
    "avg_devi_v": ("eV", ()),
    "max_devi_f": ("eV Angstrom-1", ()),
    "min_devi_f": ("eV Angstrom-1", ()),
    "avg_devi_f": ("eV Angstrom-1", ()),
}
_CHUNK_BYTES = 1 << 18


class TrajectoryError(MdbandError):
    """A trajectory file is unreadable, not an mdband H5MD file, or does not fit the run."""


@dataclass
class TrajectoryHeader:
    """What stays fixed over a trajectory."""

    species: np.ndarray
    masses: np.ndarray
    pbc: np.ndarray
    variable_cell: bool = False
    parameters: dict = field(default_factory=dict)
    precision: str = "float32"
    force_unit: str = "kJ mol-1 Angstrom-1"
    author: str | None = None
    model_devi: bool = False  # also the observables of MODEL_DEVI_OBSERVABLES
    magmoms: np.ndarray | None = None  # (N, 3) μB: a spin model's fixed magnetic moments

    @property
    def n_atoms(self) -> int:
        """Number of atoms."""
        return int(len(self.species))


@dataclass
class Frame:
    """One frame of a trajectory.

    Units: Å, Å/ps, eV/Å (converted to the file's force unit), ps, cell rows in Å; observables
    in the units of :data:`OBSERVABLES`.
    """

    step: int
    time: float
    positions: np.ndarray
    velocities: np.ndarray
    forces: np.ndarray
    cell: np.ndarray
    observables: dict = field(default_factory=dict)


def wrap_positions(positions, cell, pbc) -> tuple[np.ndarray, np.ndarray]:
    """Positions folded into the cell along periodic axes, and their H5MD image flags.

    ``positions = wrapped + image @ cell`` (rows of ``cell`` are the edge vectors); the image
    is 0 along non-periodic axes.
    """
    from ase.geometry import complete_cell

    pos = np.asarray(positions, dtype=np.float64)
    periodic = np.asarray(pbc, dtype=bool)
    image = np.zeros(pos.shape, dtype=np.int32)
    if not periodic.any():
        return pos, image
    full = complete_cell(np.asarray(cell, dtype=np.float64))
    frac = np.linalg.solve(full.T, pos.T).T
    shift = np.where(periodic, np.floor(frac), 0.0)
    return pos - shift @ full, shift.astype(np.int32)
