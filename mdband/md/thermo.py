"""Thermodynamic observables of a frame and the thermo table's text."""

from __future__ import annotations

import math

import numpy as np
from ase import Atoms, units

COLUMNS = (
    ("step", "{:>10d}", 10),
    ("time_ps", "{:>11.4f}", 11),
    ("epot", "{:>15.6f}", 15),
    ("ekin", "{:>12.6f}", 12),
    ("etot", "{:>15.6f}", 15),
    ("temperature", "{:>9.2f}", 9),
    ("pressure", "{:>10.4f}", 10),
    ("volume", "{:>12.3f}", 12),
)
_TITLES = {
    "step": "Step",
    "time_ps": "Time[ps]",
    "epot": "Epot[eV]",
    "ekin": "Ekin[eV]",
    "etot": "Etot[eV]",
    "temperature": "T[K]",
    "pressure": "P[GPa]",
    "volume": "V[A^3]",
}


def observables(atoms: Atoms, conserved_energy: float = math.nan) -> dict:
    """Energies (eV), temperature (K), pressure and stress (GPa, kinetic part included) and
    volume (Å³) of ``atoms``; pressure, stress and volume are NaN unless fully periodic."""
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
        "stress": np.full((3, 3), math.nan),
    }
    if np.all(atoms.get_pbc()):
        stress = atoms.get_stress(voigt=False, include_ideal_gas=True) / units.GPa
        out["stress"] = stress
        out["pressure"] = float(-np.trace(stress) / 3.0)
        out["volume"] = float(atoms.get_volume())
    return out


def header() -> str:
    return " ".join(f"{_TITLES[name]:>{width}}" for name, _, width in COLUMNS)


def row(step: int, time_ps: float, obs: dict) -> str:
    values = {
        "step": step,
        "time_ps": time_ps,
        "epot": obs["potential_energy"],
        "ekin": obs["kinetic_energy"],
        "etot": obs["total_energy"],
        "temperature": obs["temperature"],
        "pressure": obs["pressure"],
        "volume": obs["volume"],
    }
    return " ".join(fmt.format(values[name]) for name, fmt, _ in COLUMNS)


def drift_per_atom_ps(times_ps, energies, n_atoms: int) -> float:
    """Least-squares slope of ``energies`` over ``times_ps`` per atom (eV/atom/ps)."""
    t = np.asarray(times_ps, dtype=np.float64)
    e = np.asarray(energies, dtype=np.float64)
    ok = np.isfinite(e)
    if ok.sum() < 2 or not np.ptp(t[ok]) > 1e-9:  # 1e-300 fs steps: polyfit's SVD fails
        return math.nan
    slope = np.polyfit(t[ok], e[ok], 1)[0]
    return float(slope / n_atoms)
