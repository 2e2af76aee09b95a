"""ASE calculator backed by a :class:`~mdband.potential.Potential`.

The calculator keeps the loaded model between calls and, when ``skin > 0``, reuses the
neighbour list while every atom stays within ``skin / 2`` of where it was when the list was
built. The reused list is filtered back to the model's cutoff before every evaluation, so
the edge set the model sees is exactly the one a fresh list would give.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ase.calculators.calculator import Calculator as _AseCalculator
from ase.calculators.calculator import all_changes
from ase.stress import full_3x3_to_voigt_6_stress

from mdband.errors import MdbandError
from mdband.graph import EdgeGraph, build_edge_graph, validate_structure
from mdband.potential import Potential

_MIN_VOLUME = 1e-10


@dataclass
class NeighbourReference:
    """Where a reusable (cutoff + skin) neighbour list was built.

    Storing it in a checkpoint and calling :meth:`Calculator.restore_neighbours` rebuilds the
    identical list, so a resumed run sees the same edges in the same order.
    """

    positions: np.ndarray
    cell: np.ndarray
    pbc: np.ndarray


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
    Stress is the Cauchy stress in ASE's sign convention,

    .. math:: \sigma = -W / V, \qquad W = -\sum_e \frac{\partial E}{\partial \mathbf{r}_e}
              \otimes \mathbf{r}_e ,

    returned in Voigt order (xx, yy, zz, yz, xz, xy) in eV/Å³. It is available whenever the
    cell has a non-zero volume (periodic, mixed, or an open system given a box).
    """

    implemented_properties = ["energy", "free_energy", "energies", "forces", "stress"]

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
        skin = float(skin)
        if not np.isfinite(skin) or skin < 0:
            raise MdbandError(f"skin must be a finite non-negative length in Å, got {skin}")
        self.skin = skin
        self._reference: NeighbourReference | None = None
        self._full_graph: EdgeGraph | None = None
        self._shift_vectors: np.ndarray | None = None  # shifts @ cell of the reusable list
        self.n_neighbour_builds = 0

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
    def neighbour_reference(self) -> NeighbourReference | None:
        """The positions/cell/pbc the current reusable list was built from (None if none)."""
        return self._reference

    def restore_neighbours(self, reference: NeighbourReference | None) -> None:
        """Rebuild the reusable list exactly as it was built from ``reference``."""
        self._reference = None
        self._full_graph = None
        if reference is not None and self.skin > 0:
            self._build(reference.positions, reference.cell, reference.pbc)

    def _build(self, positions, cell, pbc) -> None:
        self._full_graph = build_edge_graph(positions, cell, pbc, self.potential.cutoff + self.skin)
        # the list is reused only while the cell is unchanged: its image offsets are constant
        self._shift_vectors = self._full_graph.shifts @ cell
        self._reference = NeighbourReference(positions.copy(), cell.copy(), pbc.copy())
        self.n_neighbour_builds += 1

    def _reusable(self, positions, cell, pbc) -> bool:
        ref = self._reference
        if ref is None or ref.positions.shape != positions.shape:
            return False
        if not (np.array_equal(ref.cell, cell) and np.array_equal(ref.pbc, pbc)):
            return False
        disp2 = np.einsum("ij,ij->i", positions - ref.positions, positions - ref.positions)
        return bool(disp2.max(initial=0.0) < (0.5 * self.skin) ** 2)

    def _graph(self, positions, cell, pbc) -> EdgeGraph | None:
        """The graph to evaluate with, or None to let the potential build a fresh one."""
        if self.skin <= 0:
            return None
        validate_structure(positions, cell, pbc)
        if not self._reusable(positions, cell, pbc):
            self._build(positions, cell, pbc)
        full = self._full_graph
        vec = np.take(positions, full.src, axis=0)
        vec -= np.take(positions, full.dst, axis=0)
        vec += self._shift_vectors
        r2 = np.einsum("ij,ij->i", vec, vec)
        keep = np.flatnonzero(r2 < self.potential.cutoff**2)
        return EdgeGraph(full.src[keep], full.dst[keep], full.shifts[keep], full.n_atoms)

    def _evaluate(self, positions, cell, pbc, numbers):
        """The potential's :class:`~mdband.potential.Result` of one frame (a subclass hook)."""
        graph = self._graph(positions, cell, pbc)
        return self.potential.evaluate(positions, cell, pbc, numbers, graph=graph)

    # ------------------------------------------------------------------ ASE interface
    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes) -> None:
        super().calculate(atoms, properties, system_changes)
        atoms = self.atoms
        positions = np.ascontiguousarray(atoms.get_positions(), dtype=np.float64)
        cell = np.asarray(atoms.get_cell().array, dtype=np.float64)
        pbc = np.asarray(atoms.get_pbc(), dtype=bool)
        numbers = atoms.get_atomic_numbers()
        res = self._evaluate(positions, cell, pbc, numbers)
        self.results = {
            "energy": res.energy,
            "free_energy": res.energy,
            "energies": np.asarray(res.atom_energy, dtype=np.float64),
            "forces": np.asarray(res.forces, dtype=np.float64),
        }
        volume = abs(float(np.linalg.det(cell)))
        if volume > _MIN_VOLUME:
            self.results["stress"] = full_3x3_to_voigt_6_stress(res.stress(volume))
