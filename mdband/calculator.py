"""ASE calculator backed by a :class:`~mdband.potential.Potential`.

A spin model (``potential.spin``) reads each atom's magnetic moment from
``atoms.get_initial_magnetic_moments()`` as (N, 3) vectors in μB (held fixed: nothing moves
them) and adds ``magnetic_forces`` (-∂E/∂moment, eV/μB) to ``results``.

The calculator keeps the loaded model between calls and a neighbour list from
:meth:`Potential.neighbour_list` (on the GPU for CUDA potentials): with ``skin > 0`` it is reused
while every atom stays within ``skin / 2`` of where it was when the list was built, and filtered
back to the model's cutoff before every evaluation, so the edge set the model sees is exactly
the one a fresh list would give.
"""

from __future__ import annotations

import time

import numpy as np
from ase.calculators.calculator import Calculator as _AseCalculator
from ase.calculators.calculator import all_changes
from ase.stress import full_3x3_to_voigt_6_stress

from mdband.atom_virial import ase_stresses
from mdband.errors import MdbandError, SpinInputError
from mdband.neighbours import NeighbourReference
from mdband.potential import Potential
from mdband.spin import check_magmoms

__all__ = ["Calculator", "NeighbourReference", "magmoms_of"]

_MIN_VOLUME = 1e-10


def magmoms_of(atoms, potential: Potential) -> np.ndarray | None:
    """Return the magnetic moments (N, 3; μB) a spin model reads from ``atoms``.

    They are the atoms' initial magnetic moments; None for other models (which ignore any
    moments). Raises :class:`~mdband.errors.SpinInputError` when a spin model finds none, or
    one number per atom (collinear moments say no direction).
    """
    if potential.spin is None:
        return None
    if not atoms.has("initial_magmoms"):
        raise SpinInputError(
            f"this is a {potential.spin.scheme} spin model: the atoms need magnetic moment "
            "vectors, atoms.set_initial_magnetic_moments((N, 3) array in μB) (extxyz: an "
            "initial_magmoms column of 3 numbers)"
        )
    m = np.asarray(atoms.get_initial_magnetic_moments(), dtype=np.float64)
    check_magmoms(m, len(atoms), potential.spin)  # returns m, or raises
    return m


class Calculator(_AseCalculator):
    r"""ASE calculator for SeZM / DPA4 (and any mdband) potentials.

    Parameters
    ----------
    model : Potential or str or path-like
        A loaded potential, or a model path for :func:`mdband.load_model`.
    device : str, optional
        Device to load a model path on (default: CUDA when available, else CPU). For an
        already loaded potential it must match the potential's device if given.
    dtype : {"float32", "float64"}, optional
        Precision to load a model path in (default ``"float32"``); same rule as ``device``.
    skin : float, default 0.0
        Verlet skin in Å. With ``skin > 0`` the neighbour list is built with ``cutoff + skin``
        and reused while no atom moved more than ``skin / 2`` and cell, periodicity and atom
        count are unchanged. ``0`` rebuilds it on every call.
    head : str, optional
        Branch of a multi-task deepmd-kit checkpoint (only with a model path).

    Notes
    -----
    A model trained with deepmd-kit's ``add_chg_spin_ebd`` (the DPA4-OMol25 models) reads the
    system's total charge (e) and spin multiplicity (2S+1) from ``atoms.info["charge"]`` and
    ``atoms.info["spin"]`` (fairchem's convention); what is absent comes from the model's
    ``default_chg_spin``, and a model without one raises
    :class:`~mdband.charge_spin.MissingChargeSpinError` naming what is missing. Changing either
    value makes the next property call recompute. Other models ignore these keys, which many
    files carry as metadata (``Potential.evaluate`` refuses a charge or spin given to them).

    Stress is the Cauchy stress in ASE's sign convention,

    .. math:: \sigma = -W / V, \qquad W = -\sum_e \frac{\partial E}{\partial \mathbf{r}_e}
              \otimes \mathbf{r}_e ,

    returned in Voigt order (xx, yy, zz, yz, xz, xy) in eV/Å³. It is available whenever the
    cell has a non-zero volume (periodic, mixed, or an open system given a box).

    With a spin model, ``results["magnetic_forces"]`` (N, 3) is ``-∂E/∂m`` (eV/μB) at the
    moments ``m`` of ``atoms.get_initial_magnetic_moments()`` ((N, 3) vectors, required; see
    :func:`magmoms_of`); the stress is then that of a strain that leaves the moments unchanged
    (deepmd-kit's virial). Moments fixed in space exert a torque on the lattice, so that
    virial is not symmetric: ASE's stress is its symmetric part (``Result.virial`` of
    :meth:`Potential.evaluate` keeps all of it).

    ``stresses`` (``atoms.get_stresses()``, computed only when asked for) are the per-atom
    stresses as ASE's own pair potentials define them: ``σ_i = −W_i / V`` (N, 6; Voigt, eV/Å³)
    with ``W_i`` deepmd-kit's per-atom virial (half of each edge's ``−g ⊗ r`` on each of its
    atoms, :mod:`mdband.atom_virial`), so ``Σ_i σ_i`` is ``stress``.
    """

    implemented_properties = [
        "energy", "free_energy", "energies", "forces", "stress", "stresses", "magnetic_forces",
    ]  # fmt: skip

    def __init__(
        self,
        model: Potential | str,
        device: str | None = None,
        dtype: str | None = None,
        *,
        skin: float = 0.0,
        head: str | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(model, Potential):
            self.potential = model
            self._check_matches(device, dtype)
        else:
            from mdband.loader import load_model

            self.potential = load_model(model, device=device, dtype=dtype or "float32", head=head)
        self._neighbours = self.potential.neighbour_list(skin)
        self.skin = self._neighbours.skin
        #: wall seconds spent in evaluations (neighbour list and model, results on the host)
        #: and their number: what ``mdband run`` reports as time in the model
        self.model_seconds = 0.0
        self.model_calls = 0

    def _check_matches(self, device, dtype) -> None:
        from mdband.potential import resolve_device, resolve_dtype

        pot = self.potential
        if device is not None and resolve_device(device) != pot.device:
            raise MdbandError(
                f"the potential is on {pot.device}, not {device}; load it with that device "
                "or pass a model path"
            )
        if dtype is not None and resolve_dtype(dtype) != pot.dtype:
            raise MdbandError(
                f"the potential is {pot.dtype}, not {dtype}; load it with that dtype "
                "or pass a model path"
            )

    # ------------------------------------------------------------------ neighbour list
    @property
    def n_neighbour_builds(self) -> int:
        """How many neighbour lists this calculator has built."""
        return self._neighbours.n_builds

    def neighbour_reference(self) -> NeighbourReference | None:
        """Return the positions/cell/pbc the current reusable list was built from (or None)."""
        return self._neighbours.reference()

    def restore_neighbours(self, reference: NeighbourReference | None) -> None:
        """Rebuild the reusable list exactly as it was built from ``reference``."""
        self._neighbours.restore(reference)

    def _evaluate(self, positions, cell, pbc, numbers, magmoms=None, atom_virial=False,
                  charge=None, spin=None):  # fmt: skip
        """Return the potential's :class:`~mdband.potential.Result` of one frame.

        A subclass hook; ``magmoms``: a spin model's moments; ``atom_virial``: with the per-atom
        virials; ``charge``, ``spin``: a charge/spin model's, :meth:`charge_spin`.
        """
        return self.potential.evaluate(positions, cell, pbc, numbers, neighbours=self._neighbours,
                                       magmoms=magmoms, atom_virial=atom_virial, charge=charge,
                                       spin=spin)  # fmt: skip

    def charge_spin(self, atoms) -> dict:
        """Return the ``{"charge": ..., "spin": ...}`` of ``atoms`` for the potential.

        These are its ``atoms.info`` values for a charge/spin model (None where absent: the
        model's default), nothing (an empty dict) for other models.
        """
        if self.potential.charge_spin is None:
            return {}
        return {"charge": atoms.info.get("charge"), "spin": atoms.info.get("spin")}

    def check_state(self, atoms, tol: float = 1e-15) -> list[str]:
        """Return ASE's changes since the last calculation, plus ``"info"`` where needed.

        ``"info"`` is added when the total charge or spin multiplicity a charge/spin model reads
        changed (ASE compares no ``info``).
        """
        changes = super().check_state(atoms, tol)
        if self.atoms is not None and self.charge_spin(atoms) != self.charge_spin(self.atoms):
            changes.append("info")
        return changes

    # ------------------------------------------------------------------ ASE interface
    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes) -> None:
        """Evaluate the potential on ``atoms`` and store ASE's ``results``.

        ``stresses`` are computed only when in ``properties``; ``stress`` only for a cell of
        non-zero volume; ``magnetic_forces`` only for a spin model.
        """
        super().calculate(atoms, properties, system_changes)
        atoms = self.atoms
        positions = np.ascontiguousarray(atoms.get_positions(), dtype=np.float64)
        cell = np.asarray(atoms.get_cell().array, dtype=np.float64)
        pbc = np.asarray(atoms.get_pbc(), dtype=bool)
        numbers = atoms.get_atomic_numbers()
        magmoms = magmoms_of(atoms, self.potential)
        t0 = time.perf_counter()
        per_atom = "stresses" in properties
        cs = self.charge_spin(atoms)
        res = self._evaluate(positions, cell, pbc, numbers, magmoms, per_atom, **cs)  # numpy
        self.model_seconds += time.perf_counter() - t0
        self.model_calls += 1
        self.results = {
            "energy": res.energy,
            "free_energy": res.energy,
            "energies": np.asarray(res.atom_energy, dtype=np.float64),
            "forces": np.asarray(res.forces, dtype=np.float64),
        }
        if res.magnetic_forces is not None:
            self.results["magnetic_forces"] = np.asarray(res.magnetic_forces, dtype=np.float64)
        volume = abs(float(np.linalg.det(cell)))
        if volume > _MIN_VOLUME:
            self.results["stress"] = full_3x3_to_voigt_6_stress(res.stress(volume))
            if per_atom:
                self.results["stresses"] = ase_stresses(res.atom_virial, volume)
