"""Reader of mdband H5MD trajectories (also files left by a killed writer, in SWMR mode).

Positions come back continuous (unwrapped): the file's folded ``position`` plus its
``image`` flags times the box edges, i.e. the positions the integrator had. Frames are picked
by an index, a slice or a list of indices, as in ``ase.io.read``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import overload

import h5py
import numpy as np

from mdband.io.h5md_format import (
    FORCE_UNITS,
    LIBVER,
    MODEL_DEVI_OBSERVABLES,
    OBSERVABLES,
    PARTICLE_UNITS,
    PARTICLES,
    Frame,
    TrajectoryError,
    TrajectoryHeader,
)
from mdband.io.repair import inspect_trajectory


class H5MDReader:
    """Read an mdband H5MD trajectory.

    Opens files left by a killed writer in SWMR-read mode (``recovered`` is then True), after
    a bounded check in a child process (:func:`mdband.io.repair.inspect_trajectory`: a damaged
    file gives a :class:`TrajectoryError`, not a hang). Only complete frames are reported.
    """

    def __init__(self, path, *, stall_seconds: float | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise TrajectoryError(f"trajectory {self.path} does not exist")
        self.recovered = False
        self._limit: int | None = None
        try:
            self.file = h5py.File(self.path, "r")
        except OSError as exc:
            if "already open for write" not in str(exc):
                raise TrajectoryError(f"cannot read trajectory {self.path}: {exc}") from None
            self._limit = inspect_trajectory(self.path, stall_seconds=stall_seconds).frames
            try:
                self.file = h5py.File(self.path, "r", swmr=True, libver=LIBVER)
            except OSError as exc2:
                raise TrajectoryError(f"cannot read trajectory {self.path}: {exc2}") from None
            self.recovered = True
        needed = ["h5md", *(f"{PARTICLES}/{k}/value" for k in PARTICLE_UNITS)]
        if not all(name in self.file for name in needed):
            self.close()
            raise TrajectoryError(
                f"{self.path} is not an H5MD file with position, velocity and force of "
                "particle group 'all'"
            )
        self._part = self.file[PARTICLES]
        self.force_unit = _text(self._part["force/value"].attrs.get("unit", "eV Angstrom-1"))
        if self.force_unit not in FORCE_UNITS:
            self.close()
            raise TrajectoryError(f"{self.path}: unknown force unit {self.force_unit!r}")
        self._force_factor = FORCE_UNITS[self.force_unit]

    # ------------------------------------------------------------------ fixed data
    @property
    def n_frames(self) -> int:
        """Number of complete frames: those every per-frame dataset holds.

        In a recovered file, at most the number of frames the recovery check found.
        """
        n = self._part["position/step"].shape[0]
        n = min(n, self._part["position/time"].shape[0])
        names = [*PARTICLE_UNITS, *(["image"] if "image" in self._part else [])]
        n = min([n] + [self._part[f"{k}/value"].shape[0] for k in names])
        return int(n if self._limit is None else min(n, self._limit))

    def __len__(self) -> int:
        """Return the number of complete frames."""
        return self.n_frames

    @property
    def n_atoms(self) -> int:
        """Number of atoms."""
        return int(self._part["species"].shape[0])

    @property
    def species(self) -> np.ndarray:
        """Atomic numbers of the atoms (``particles/all/species``)."""
        return self._part["species"][()]

    @property
    def masses(self) -> np.ndarray:
        """Masses of the atoms (``particles/all/mass``)."""
        return self._part["mass"][()]

    @property
    def pbc(self) -> np.ndarray:
        """Periodicity of the three box directions (True where the boundary is periodic)."""
        boundary = self._part["box"].attrs["boundary"]
        return np.array([_text(b) == "periodic" for b in boundary])

    @property
    def variable_cell(self) -> bool:
        """Whether the run could change the cell (NPT); recorded by the writer."""
        params = self.file.get("parameters/mdband")
        if params is not None and "variable_cell" in params.attrs:
            return bool(params.attrs["variable_cell"])
        return isinstance(self._part["box/edges"], h5py.Group)

    @property
    def parameters(self) -> dict:
        """Run parameters recorded by the writer (``parameters/mdband``; empty when absent)."""
        if "parameters/mdband" not in self.file:
            return {}
        return {k: _plain(v) for k, v in self.file["parameters/mdband"].attrs.items()}

    @property
    def steps(self) -> np.ndarray:
        """MD step numbers of the complete frames."""
        return self._part["position/step"][: self.n_frames]

    @property
    def times(self) -> np.ndarray:
        """Times of the complete frames (ps)."""
        return self._part["position/time"][: self.n_frames]

    @property
    def magmoms(self) -> np.ndarray | None:
        """A spin model's fixed magnetic moments (N, 3; μB), None when not recorded."""
        if "magnetic_moment" not in self._part:
            return None
        return np.asarray(self._part["magnetic_moment"][()], dtype=np.float64)

    def header(self) -> TrajectoryHeader:
        """Return the file's fixed data (atoms, parameters, precision, units) as a header."""
        params = self.parameters
        precision = str(params.pop("precision", self._part["position/value"].dtype.name))
        params.pop("variable_cell", None)
        return TrajectoryHeader(
            species=self.species,
            masses=self.masses,
            pbc=self.pbc,
            variable_cell=self.variable_cell,
            parameters=params,
            precision=precision,
            force_unit=self.force_unit,
            author=_text(self.file["h5md/author"].attrs["name"]),
            model_devi="observables/max_devi_f" in self.file,
            magmoms=self.magmoms,
        )

    # ------------------------------------------------------------------ frames
    def _index(self, i: int) -> int:
        n = self.n_frames
        if not -n <= i < n:
            raise IndexError(f"frame {i} out of range for {n} frames")
        return i % n

    def cell(self, i: int) -> np.ndarray:
        """Return the box edges (3, 3) of frame ``i`` (the fixed box when not stored per frame)."""
        edges = self._part["box/edges"]
        if isinstance(edges, h5py.Group):
            return edges["value"][self._index(i)]
        return edges[()]  # a fixed box, as other writers may store it

    def observable(self, name: str) -> np.ndarray:
        """All complete frames of ``observables/<name>``."""
        return self.file[f"observables/{name}/value"][: self.n_frames]

    def indices(self, index) -> list[int]:
        """Frame numbers selected by an int, a slice or a sequence of ints."""
        if isinstance(index, slice):
            return list(range(*index.indices(self.n_frames)))
        if isinstance(index, (int, np.integer)):
            return [self._index(int(index))]
        return [self._index(int(i)) for i in index]

    @overload
    def frame(self, i: int | np.integer) -> Frame: ...
    @overload
    def frame(self, i: slice | Sequence[int]) -> list[Frame]: ...
    def frame(self, i) -> Frame | list[Frame]:
        """Frame ``i`` (an int), or a list of frames for a slice or a list of indices."""
        if not isinstance(i, (int, np.integer)):
            return [self.frame(k) for k in self.indices(i)]
        k = self._index(int(i))
        part = self._part
        obs = {}
        for name in (*OBSERVABLES, *MODEL_DEVI_OBSERVABLES):
            if f"observables/{name}" in self.file:
                obs[name] = self.file[f"observables/{name}/value"][k]
        cell = self.cell(k)
        positions = part["position/value"][k]
        if "image" in part:
            positions = positions + part["image/value"][k] @ np.asarray(cell, dtype=np.float64)
        return Frame(
            step=int(part["position/step"][k]),
            time=float(part["position/time"][k]),
            positions=positions,
            velocities=part["velocity/value"][k],
            forces=part["force/value"][k] / self._force_factor,
            cell=cell,
            observables=obs,
        )

    def __iter__(self):
        """Yield the complete frames in order."""
        for i in range(self.n_frames):
            yield self.frame(i)

    def to_atoms(self, index=-1):
        """Frame ``index`` as :class:`ase.Atoms` (a list for a slice or a list of indices).

        ASE units; energy, forces and (periodic frames) stress on a single-point calculator;
        ``info`` holds ``step``, ``time`` (ps) and the scalar observables (eV, K, GPa, Å³).
        """
        if not isinstance(index, (int, np.integer)):
            return [self.to_atoms(k) for k in self.indices(index)]
        fr = self.frame(index)
        atoms = frame_atoms(self.species, self.masses, self.pbc, fr, self.magmoms)
        atoms.info.update(step=fr.step, time=fr.time)
        for name, value in fr.observables.items():
            if np.ndim(value) == 0:
                atoms.info[name] = float(value)
        return atoms

    def close(self) -> None:
        """Close the file (no-op when already closed)."""
        if self.file.id.valid:
            self.file.close()

    def __enter__(self) -> H5MDReader:
        """Return the reader itself."""
        return self

    def __exit__(self, *exc) -> None:
        """Close the file."""
        self.close()


def frame_atoms(species, masses, pbc, frame, magmoms=None):
    """Build :class:`ase.Atoms` with a single-point calculator from a frame record.

    The record is :class:`Frame`-like: positions, velocities in Å/ps, forces, cell,
    observables. The calculator holds energy, forces and, for a periodic frame with a recorded
    stress, the stress of the potential (:func:`potential_stress`): ``atoms.get_stress()`` is
    what the run's calculator gave, ``atoms.get_stress(include_ideal_gas=True)`` the recorded
    stress. ``magmoms``: a spin run's (fixed) moments, set before the calculator (which would
    otherwise see the atoms changed and hold no results for them).
    """
    from ase import Atoms, units
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.stress import full_3x3_to_voigt_6_stress

    atoms = Atoms(
        numbers=species, positions=frame.positions, cell=frame.cell, pbc=pbc, masses=masses
    )
    atoms.set_velocities(np.asarray(frame.velocities, dtype=np.float64) / (1000 * units.fs))
    if magmoms is not None:
        atoms.set_initial_magnetic_moments(magmoms)
    energy = frame.observables.get("potential_energy")
    forces = None if frame.forces is None else np.asarray(frame.forces, dtype=np.float64)
    stress = None
    recorded = frame.observables.get("stress")
    if np.all(pbc) and recorded is not None and np.all(np.isfinite(recorded)):
        s = potential_stress(recorded, frame.velocities, masses, frame.cell)
        stress = full_3x3_to_voigt_6_stress(s)
    atoms.calc = SinglePointCalculator(
        atoms, energy=None if energy is None else float(energy), forces=forces, stress=stress
    )
    return atoms


def potential_stress(stress_gpa, velocities, masses, cell) -> np.ndarray:
    """Return the stress of the potential (3, 3; eV/Å³, ASE's sign) of a recorded frame.

    It is computed from the frame's recorded stress (GPa, kinetic part included, as
    :func:`mdband.md.thermo.observables` records it) and its velocities (Å/ps): the recorded
    stress minus ASE's ideal-gas term ``−Σ m v ⊗ v / V``.
    """
    from ase import units

    volume = abs(float(np.linalg.det(np.asarray(cell, dtype=np.float64))))
    v = np.asarray(velocities, dtype=np.float64) / (1000 * units.fs)
    kinetic = -(np.asarray(masses, dtype=np.float64)[:, None] * v).T @ v / volume
    return np.asarray(stress_gpa, dtype=np.float64) * units.GPa - kinetic


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _plain(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value
