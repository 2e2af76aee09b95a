"""Gathering a frame of ``--engine lammps`` on rank 0, in the frame of the input cell.

The frame holds the positions, velocities, forces, cell and observables of all atoms (by atom
ID = index in the structure).

Positions are unwrapped with LAMMPS' image flags; stress and pressure come from LAMMPS'
pressure tensor (bar, converted to GPa; stress = −pressure tensor).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from ase import units

from mdband._version import __version__
from mdband.io.h5md import TrajectoryHeader
from mdband.md.lammps_input import BAR_PER_GPA, PRESSURE_KEYS
from mdband.md.outputs import recorded_config
from mdband.md.thermo import cell_observables


@dataclass
class State:
    """One gathered snapshot (input frame, atom order of the structure)."""

    step: int
    positions: np.ndarray  # unwrapped, Å
    velocities: np.ndarray  # Å/ps
    forces: np.ndarray  # eV/Å
    cell: np.ndarray
    observables: dict


def gather(lmp, name: str, kind: int, n: int) -> np.ndarray:
    """Per-atom 3-vectors ``name`` of all ``n`` atoms, ordered by atom ID (collective)."""
    data = lmp.gather_atoms(name, kind, 3)
    return np.ctypeslib.as_array(data).reshape(n, 3).copy()


def gather_state(
    lmp,
    step: int,
    masses: np.ndarray,
    rotation: np.ndarray | None,
    mvv2e: float,
    conserved_energy: Callable[[float, float], float],
) -> State:
    """Gather the current state (collective: every rank must call it).

    ``rotation`` takes input-frame vectors to LAMMPS' frame (``r_lammps = r_input @ rotation``);
    ``conserved_energy(epot, ekin)`` adds the ensemble's thermostat/barostat terms (eV).
    """
    n = len(masses)

    def to_input(arr: np.ndarray) -> np.ndarray:
        return arr if rotation is None else arr @ rotation.T

    x, v, f = gather(lmp, "x", 1, n), gather(lmp, "v", 1, n), gather(lmp, "f", 1, n)
    image = gather(lmp, "image", 0, n).astype(np.float64)
    boxlo, boxhi, xy, yz, xz, _, _ = lmp.extract_box()
    lo, hi = np.asarray(boxlo), np.asarray(boxhi)
    cell = np.diag(hi - lo)
    cell[1, 0], cell[2, 0], cell[2, 1] = xy, xz, yz
    if np.any(image):
        x = x + image @ cell
    if np.any(lo):
        x = x - lo
    epot = float(lmp.get_thermo("pe"))
    ekin = 0.5 * mvv2e * float(np.sum(masses[:, None] * v * v))
    pxx, pyy, pzz, pxy, pxz, pyz = (float(lmp.get_thermo(k)) for k in PRESSURE_KEYS)
    ptensor = np.array([[pxx, pxy, pxz], [pxy, pyy, pyz], [pxz, pyz, pzz]])
    stress = -ptensor / BAR_PER_GPA
    if rotation is not None:
        stress = rotation @ stress @ rotation.T
    obs = {
        "potential_energy": epot,
        "kinetic_energy": ekin,
        "total_energy": epot + ekin,
        "conserved_energy": float(conserved_energy(epot, ekin)),
        "temperature": 2.0 * ekin / (3.0 * n * units.kB),
        "pressure": float(-np.trace(stress) / 3.0),
        "volume": float(abs(np.linalg.det(cell))),
        "stress": stress,
        **cell_observables(masses, cell),
    }
    return State(step, to_input(x), to_input(v), to_input(f), to_input(cell), obs)


def trajectory_header(s, lammps_version: int, mpi_ranks: int) -> TrajectoryHeader:
    """Return the H5MD header of a run started from ``s`` (a :class:`mdband.md.lammps_start.Start`).

    The header has the ASE engine's layout, with the engine, LAMMPS version and rank count as
    parameters.
    """
    c = s.config
    params = {
        "config_json": json.dumps(recorded_config(c), sort_keys=True),
        "run_id": s.plan.run_id,
        "model_hash": s.model_hash,
        "model_kind": s.model_kind,
        "type_map": s.type_map,
        "mdband_version": __version__,
        "ensemble": c.ensemble,
        "timestep_fs": c.timestep,
        "units": "Angstrom, eV, ps (time), K, GPa (pressure, stress), u (mass)",
        "engine": "lammps",
        "lammps_version": lammps_version,
        "mpi_ranks": mpi_ranks,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    return TrajectoryHeader(
        species=s.numbers,
        masses=s.masses,
        pbc=np.ones(3, dtype=bool),
        variable_cell=c.ensemble == "npt-mtk",
        parameters=params,
        precision=c.traj_precision,
        force_unit=c.traj_force_unit,
    )
