"""One structure of a data set, with its labels when it has them: what every reader returns.

A :class:`Frame` is what :func:`mdband.io.systems.read_systems` gives for every structure of
every format (deepmd-kit systems, LAMMPS files, VASP outputs, extxyz, ASE databases, mdband
H5MD trajectories): species, positions, cell, periodicity and, where the file has them, the
energy, forces, virial, the MD step and the system's total charge and spin multiplicity (the
inputs of charge/spin models: deepmd-kit data's ``charge_spin.npy``, ``info["charge"]`` /
``info["spin"]`` of ASE files; kept as the file gives them, checked where a model reads
them). Units are eV and Å; the virial follows deepmd-kit's and
mdband's sign, ``W = -stress * volume`` (ASE stress), as dpdata stores it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ase.data import atomic_numbers

from mdband.errors import MdbandError


class DatasetError(MdbandError, ValueError):
    """Structures or labels are missing, unreadable, unlabelled or inconsistent."""


@dataclass
class Frame:
    """One structure (eV, Å), labelled or not."""

    species: list[str]
    positions: np.ndarray  # (N, 3)
    cell: np.ndarray  # (3, 3), rows are cell vectors (zeros along open directions)
    pbc: np.ndarray  # (3,) bool
    energy: float | None = None
    forces: np.ndarray | None = None  # (N, 3)
    virial: np.ndarray | None = None  # (3, 3), eV
    source: str = ""
    step: int | None = None  # the MD step, where the file records one
    charge: float | None = None  # total charge (e), where the file records one
    spin: float | None = None  # spin multiplicity 2S+1, likewise

    @property
    def n_atoms(self) -> int:
        """Number of atoms."""
        return int(self.positions.shape[0])

    @property
    def labelled(self) -> bool:
        """Whether the frame has an energy and forces (what training needs)."""
        return self.energy is not None and self.forces is not None

    def to_atoms(self):
        """Return the frame as :class:`ase.Atoms`.

        Labels go on a single-point calculator (stress from the virial of a periodic frame),
        the step in ``info["step"]``, the total charge and spin multiplicity in
        ``info["charge"]`` and ``info["spin"]``.
        """
        from ase import Atoms
        from ase.calculators.singlepoint import SinglePointCalculator

        atoms = Atoms(symbols=self.species, positions=self.positions, cell=self.cell, pbc=self.pbc)
        results = {}
        if self.energy is not None:
            results["energy"] = float(self.energy)
        if self.forces is not None:
            results["forces"] = np.asarray(self.forces, dtype=np.float64)
        if self.virial is not None and np.all(self.pbc):
            results["stress"] = -np.asarray(self.virial, dtype=np.float64) / atoms.get_volume()
        if results:
            atoms.calc = SinglePointCalculator(atoms, **results)
        if self.step is not None:
            atoms.info["step"] = int(self.step)
        for key in ("charge", "spin"):
            if getattr(self, key) is not None:
                atoms.info[key] = getattr(self, key)
        return atoms


def elements_of(frames: list[Frame]) -> list[str]:
    """Elements in ``frames`` ordered by atomic number."""
    found = {s for f in frames for s in f.species}
    return sorted(found, key=lambda s: atomic_numbers.get(s, 0))


def check_labelled(frames: list[Frame]) -> list[Frame]:
    """Return ``frames`` if every one has finite energy and forces.

    A frame with a virial needs a finite one too; :class:`DatasetError` names the first frame
    that does not pass.
    """
    for f in frames:
        if f.n_atoms == 0:
            raise DatasetError(f"{f.source}: frame has no atoms")
        if f.energy is None:
            raise DatasetError(f"{f.source}: no energy (the data need energies)")
        if f.forces is None:
            raise DatasetError(f"{f.source}: no forces (the data need forces)")
        if not np.isfinite(f.energy) or not np.all(np.isfinite(f.forces)):
            raise DatasetError(f"{f.source}: energy or forces are not finite")
        if f.virial is not None and not np.all(np.isfinite(f.virial)):
            raise DatasetError(f"{f.source}: virial is not finite")
    return frames
