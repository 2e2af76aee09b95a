"""Model deviation of a committee of models, with deepmd-kit's definitions (float64).

For M models with forces ``F_m,i`` (eV/Å) on atom i and virials ``W_m`` (3×3, eV):

* per atom  ``ε_F,i = sqrt( (1/M) Σ_m |F_m,i − ⟨F_i⟩|² )``  (population standard deviation over
  the models of each Cartesian component, then the norm over the three components);
  ``max_devi_f``, ``min_devi_f``, ``avg_devi_f`` are the maximum, minimum and arithmetic mean of
  ``ε_F,i`` over the atoms;
* per virial component ``ε_W,ab = std_m( W_m,ab / N )`` (the virial per atom, N atoms);
  ``max_devi_v`` and ``min_devi_v`` are the maximum and minimum over the 9 components, and
  ``avg_devi_v = sqrt( (1/9) Σ_ab ε_W,ab² )`` is their root mean square (deepmd-kit calls it the
  average; ``dp model-devi`` writes ``‖ε_W‖ / 3``, ``pair_style deepmd`` the same RMS);
* ``devi_e = std_m( E_m / N )``, the energy per atom (the 8th column of ``dp model-devi``).

These are the definitions of deepmd-kit's ``deepmd/infer/model_devi.py`` and of its LAMMPS pair
style (absolute deviations; the ``relative`` variants are not implemented).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

# the six numbers of a model_devi.out row after the step, in file order
COLUMNS = ("max_devi_v", "min_devi_v", "avg_devi_v", "max_devi_f", "min_devi_f", "avg_devi_f")
# unit of each column (and of the H5MD observables of the same names)
UNITS = {name: "eV" if name.endswith("_v") else "eV Angstrom-1" for name in COLUMNS}


@dataclass(frozen=True)
class ModelDeviation:
    """Deviations of one frame (eV for ``*_v`` and ``devi_e``, eV/Å for ``*_f``).

    ``devi_f`` holds the per-atom force deviation (N,) when it is known (None from reduced
    partial sums without the per-atom values).
    """

    max_devi_v: float
    min_devi_v: float
    avg_devi_v: float
    max_devi_f: float
    min_devi_f: float
    avg_devi_f: float
    devi_f: np.ndarray | None = field(default=None, repr=False, compare=False)
    devi_e: float = math.nan

    def row(self) -> tuple[float, ...]:
        """Return the six values of a ``model_devi.out`` row, in file order."""
        return tuple(getattr(self, name) for name in COLUMNS)

    def as_dict(self) -> dict[str, float]:
        """``{column: value}`` for the six columns."""
        return dict(zip(COLUMNS, self.row()))


def _centred(x: np.ndarray) -> np.ndarray:
    """Return ``x − mean(x)`` over the models (axis 0).

    Computed about the first model so that identical models give exactly zero (a plain mean of
    equal numbers need not round back).
    """
    d = x - x[:1]
    return d - d.mean(axis=0)


def force_deviation(forces) -> np.ndarray:
    """Per-atom force deviation ``ε_F,i`` (N,) of ``forces`` (M, N, 3) in eV/Å."""
    f = np.asarray(forces, dtype=np.float64)
    if f.ndim != 3 or f.shape[2] != 3:
        raise ValueError(f"forces must have shape (models, atoms, 3), got {f.shape}")
    diff = _centred(f)
    return np.sqrt(np.einsum("mik,mik->i", diff, diff) / f.shape[0])


def virial_deviation(virials, n_atoms: int) -> np.ndarray:
    """Per-component deviation (9,) of the virial per atom; ``virials`` (M, 3, 3) or (M, 9), eV."""
    v = np.asarray(virials, dtype=np.float64).reshape(len(virials), 9) / float(n_atoms)
    return np.sqrt(np.mean(_centred(v) ** 2, axis=0))


def energy_deviation(energies, n_atoms: int) -> float:
    """Return the standard deviation over the models of the energy per atom (eV)."""
    e = np.asarray(energies, dtype=np.float64) / float(n_atoms)
    return float(np.sqrt(np.mean(_centred(e) ** 2)))


def model_deviation(forces, virials, energies=None) -> ModelDeviation:
    """Compute the deviations of one frame from every model's forces, virials and energies.

    Forces (M, N, 3), virials (M, 3, 3) and, optionally, energies (M,); float64 throughout.
    """
    devi_f = force_deviation(forces)
    n = devi_f.shape[0]
    if n == 0:
        return from_partials(0.0, 0.0, 0.0, 0, virials, devi_f)
    out = from_partials(devi_f.max(), devi_f.min(), devi_f.sum(), n, virials, devi_f)
    if energies is None:
        return out
    return replace(out, devi_e=energy_deviation(energies, n))


def from_partials(
    f_max: float, f_min: float, f_sum: float, n_atoms: int, virials, devi_f=None
) -> ModelDeviation:
    """Compute the deviations from force deviations reduced over domains and total virials.

    The per-atom force deviations come reduced over domains (max, min and sum over all atoms),
    with the total virial of every model (M, 3, 3): what ``pair_style mdband`` gathers from its
    MPI ranks.
    """
    if n_atoms <= 0:
        nan = math.nan
        return ModelDeviation(nan, nan, nan, nan, nan, nan, devi_f)
    ev = virial_deviation(virials, n_atoms)
    return ModelDeviation(
        max_devi_v=float(ev.max()),
        min_devi_v=float(ev.min()),
        avg_devi_v=float(np.sqrt(np.mean(ev * ev))),
        max_devi_f=float(f_max),
        min_devi_f=float(f_min),
        avg_devi_f=float(f_sum) / n_atoms,
        devi_f=None if devi_f is None else np.asarray(devi_f, dtype=np.float64),
    )
