"""Thermodynamic observables of a frame and the thermo table's text.

The table's columns are those of :class:`mdband.io.thermo_table.ThermoTable`.
"""

from __future__ import annotations

import math

import numpy as np
from ase import Atoms, units

from mdband.io.thermo_table import PRESSURE_UNITS, THERMO_EXTRAS, ThermoTable

__all__ = [
    "PRESSURE_UNITS",
    "THERMO_EXTRAS",
    "ThermoTable",
    "drift_per_atom_ps",
    "header",
    "observables",
    "row",
]
#: g/cm³ of 1 u per Å³
_G_CM3 = 1e24 / units._Nav


def observables(atoms: Atoms, conserved_energy: float = math.nan) -> dict:
    """Return the observables of ``atoms``: energies, temperature, pressure, stress and cell.

    Energies (eV), temperature (K), pressure and stress (GPa, kinetic part included), volume
    (Å³), density (g/cm³) and cell lengths (Å); pressure, stress, volume and density are NaN
    unless fully periodic.
    """
    epot = float(atoms.get_potential_energy())
    ekin = float(atoms.get_kinetic_energy())
    out = {
        "potential_energy": epot,
        "kinetic_energy": ekin,
        "total_energy": epot + ekin,
        "conserved_energy": float(conserved_energy),
        "temperature": float(atoms.get_temperature()),
        "pressure": math.nan,
        "volume": math.nan,
        "density": math.nan,
        "stress": np.full((3, 3), math.nan),
    }
    periodic = bool(np.all(atoms.get_pbc()))
    out.update(cell_observables(atoms.get_masses(), atoms.cell.array, periodic))
    if periodic:
        stress = atoms.get_stress(voigt=False, include_ideal_gas=True) / units.GPa
        out["stress"] = stress
        out["pressure"] = float(-np.trace(stress) / 3.0)
        out["volume"] = float(atoms.get_volume())
    return out


def cell_observables(masses, cell, periodic: bool = True) -> dict:
    """``cell_lengths`` (3,) Å and ``density`` (g/cm³; NaN unless ``periodic``)."""
    cell = np.asarray(cell, dtype=np.float64)
    lengths = np.linalg.norm(cell, axis=1)
    volume = abs(float(np.linalg.det(cell)))
    density = float(np.sum(masses)) * _G_CM3 / volume if periodic and volume > 0 else math.nan
    return {"cell_lengths": lengths, "density": density}


_DEFAULT = ThermoTable()


def header() -> str:
    """Return the default table's header (no extra columns, pressure in GPa)."""
    return _DEFAULT.header()


def row(step: int, time_ps: float, obs: dict) -> str:
    """Return a row of the default table."""
    return _DEFAULT.row(step, time_ps, obs)


def drift_per_atom_ps(times_ps, energies, n_atoms: int) -> float:
    """Least-squares slope of ``energies`` over ``times_ps`` per atom (eV/atom/ps)."""
    t = np.asarray(times_ps, dtype=np.float64)
    e = np.asarray(energies, dtype=np.float64)
    ok = np.isfinite(e)
    if ok.sum() < 2 or not np.ptp(t[ok]) > 1e-9:  # 1e-300 fs steps: polyfit's SVD fails
        return math.nan
    slope = np.polyfit(t[ok], e[ok], 1)[0]
    return float(slope / n_atoms)
