"""Reading and checking the starting structure; initial velocities."""

from __future__ import annotations

import numpy as np
from ase import Atoms, units

from mdband.errors import StructureError
from mdband.graph import validate_structure
from mdband.io.structure import read_structure  # noqa: F401 - its home before io/structure.py
from mdband.potential import Potential


def check_structure(atoms: Atoms, potential: Potential, min_distance: float) -> None:
    """Raise for NaN/inf, a zero-volume periodic cell, unknown elements or overlapping atoms."""
    positions = np.asarray(atoms.get_positions(), dtype=np.float64)
    cell = np.asarray(atoms.get_cell().array, dtype=np.float64)
    pbc = np.asarray(atoms.get_pbc(), dtype=bool)
    validate_structure(positions, cell, pbc)
    potential.types_of(atoms.get_atomic_numbers())
    if min_distance > 0 and len(atoms) > 1:
        i, j, d = closest_pair(positions, cell, pbc, min_distance)
        if i is not None:
            raise StructureError(
                f"atoms {i} and {j} are {d:.3f} Å apart, closer than the minimum distance "
                f"{min_distance} Å (set min_distance to change it)"
            )


def closest_pair(positions, cell, pbc, cutoff: float):
    """Return the closest pair ``(i, j, distance)`` below ``cutoff``, or ``(None, None, None)``.

    The pairs come from the neighbour list of :func:`mdband.neighbours.host_edge_graph`: bounded
    work, and no box vesin cannot search.
    """
    from mdband.neighbours import host_edge_graph

    g = host_edge_graph(positions, cell, pbc, cutoff)
    if g.n_edges == 0:
        return None, None, None
    vec = positions[g.src] - positions[g.dst] + g.shifts @ np.asarray(cell, dtype=np.float64)
    d = np.sqrt(np.einsum("ij,ij->i", vec, vec))
    k = int(np.argmin(d))
    i, j = sorted((int(g.dst[k]), int(g.src[k])))
    return i, j, float(d[k])


def has_velocities(atoms: Atoms) -> bool:
    """Tell whether the structure carries non-zero momenta."""
    return atoms.has("momenta") and bool(np.any(atoms.get_momenta() != 0))


def maxwell_boltzmann_momenta(
    masses: np.ndarray, temperature: float, rng: np.random.Generator
) -> np.ndarray:
    """Momenta drawn at ``temperature`` (K) with zero total momentum (ASE units)."""
    masses = np.asarray(masses, dtype=np.float64)
    kt = units.kB * temperature
    p = rng.standard_normal((len(masses), 3)) * np.sqrt(masses * kt)[:, None]
    if len(masses) > 1:
        p -= masses[:, None] * (p.sum(axis=0) / masses.sum())
    return p
