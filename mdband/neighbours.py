"""Neighbour lists that follow a trajectory: rebuilt only when an atom moved past skin / 2.

Two implementations of one contract, chosen by :meth:`mdband.potential.Potential.neighbour_list`
for the potential's device:

* :class:`HostNeighbourList` (CPU potentials): vesin on numpy arrays
  (:func:`mdband.graph.build_edge_graph`); edges are numpy arrays.
* :class:`DeviceNeighbourList` (CUDA potentials): the cell list
  (:func:`mdband.cell_list.cell_list_edges`) on the device; positions, reference positions and
  edges stay there, and the skin test costs one scalar copied back per call.

With ``skin > 0`` the list is built with ``cutoff + skin`` and reused while every atom stays
within ``skin / 2`` of where it was at the build and the cell, periodicity and atom count are
unchanged; before each evaluation it is filtered back to ``cutoff``, so the model sees exactly
the edges a fresh list gives (in another order, so sums agree to rounding). ``skin = 0``
builds a fresh list for every call. A list is a deterministic function of the positions it was
built from: storing :meth:`reference` in a checkpoint and calling :meth:`restore` reproduces it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from mdband.cell_list import cell_list_edges
from mdband.errors import MdbandError
from mdband.graph import (
    EdgeGraph,
    build_edge_graph,
    check_neighbour_work,
    validate_structure,
    vesin_can_search,
)

log = logging.getLogger(__name__)


def host_edge_graph(positions, cell, pbc, cutoff: float) -> EdgeGraph:
    """Build a neighbour list on the host: vesin, or mdband's cell list where vesin fails.

    This is :func:`mdband.graph.build_edge_graph` (vesin), or mdband's cell list on the CPU
    (the same edges) for the boxes vesin cannot search (:func:`mdband.graph.vesin_can_search`).
    """
    positions = np.ascontiguousarray(positions, dtype=np.float64)
    cell = np.zeros((3, 3)) if cell is None else np.asarray(cell, dtype=np.float64).reshape(3, 3)
    pbc = np.broadcast_to(np.asarray(pbc, dtype=bool), (3,)).copy()
    validate_structure(positions, cell, pbc)
    check_neighbour_work(positions, cell, pbc, cutoff)
    if vesin_can_search(positions, cell, pbc, cutoff):
        return build_edge_graph(positions, cell, pbc, cutoff)
    src, dst, shifts = cell_list_edges(torch.from_numpy(positions), cell, pbc, cutoff)
    return EdgeGraph(src.numpy(), dst.numpy(), shifts.numpy(), int(positions.shape[0]))


@dataclass
class NeighbourReference:
    """Where a reusable (cutoff + skin) neighbour list was built (numpy, for checkpoints)."""

    positions: np.ndarray
    cell: np.ndarray
    pbc: np.ndarray


def _host(cell, host_cell) -> np.ndarray:
    """Return the cell as a numpy (3, 3) array (``host_cell`` when the caller has it)."""
    if host_cell is not None:
        return np.asarray(host_cell, dtype=np.float64).reshape(3, 3)
    return torch.as_tensor(cell).detach().to("cpu", torch.float64).numpy().reshape(3, 3)


def _check_skin(skin: float) -> float:
    skin = float(skin)
    if not np.isfinite(skin) or skin < 0:
        raise MdbandError(f"skin must be a finite non-negative length in Å, got {skin}")
    return skin


class HostNeighbourList:
    """vesin neighbour list on numpy arrays with an optional Verlet skin (CPU potentials)."""

    def __init__(self, cutoff: float, skin: float = 0.0) -> None:
        self.cutoff = float(cutoff)
        self.skin = _check_skin(skin)
        self.n_builds = 0
        self._reference: NeighbourReference | None = None
        self._full: EdgeGraph | None = None
        self._shift_vectors: np.ndarray | None = None

    def reference(self) -> NeighbourReference | None:
        """Return where the current reusable list was built (None if none)."""
        return self._reference

    def restore(self, reference: NeighbourReference | None) -> None:
        """Rebuild the reusable list from ``reference`` (None, or no skin: drop the list)."""
        self._reference = self._full = None
        if reference is not None and self.skin > 0:
            self._build(
                np.asarray(reference.positions, dtype=np.float64),
                np.asarray(reference.cell, dtype=np.float64),
                np.asarray(reference.pbc, dtype=bool),
            )

    def _build(self, positions, cell, pbc) -> None:
        self._full = host_edge_graph(positions, cell, pbc, self.cutoff + self.skin)
        # the list is reused only while the cell is unchanged: its image offsets are constant
        self._shift_vectors = self._full.shifts @ cell
        self._reference = NeighbourReference(positions.copy(), cell.copy(), pbc.copy())
        self.n_builds += 1
        log.debug(
            "neighbour list rebuilt (#%d): %d edges within cutoff + skin %g Å",
            self.n_builds,
            self._full.n_edges,
            self.cutoff + self.skin,
        )

    def _reusable(self, positions, cell, pbc) -> bool:
        ref = self._reference
        if ref is None or ref.positions.shape != positions.shape:
            return False
        if not (np.array_equal(ref.cell, cell) and np.array_equal(ref.pbc, pbc)):
            return False
        d = positions - ref.positions
        return bool(np.einsum("ij,ij->i", d, d).max(initial=0.0) < (0.5 * self.skin) ** 2)

    def edges(self, positions, cell, pbc) -> EdgeGraph:
        """Edges within the cutoff for these positions (numpy (N, 3), (3, 3), (3,) bool)."""
        positions = np.ascontiguousarray(positions, dtype=np.float64)
        cell = np.asarray(cell, dtype=np.float64).reshape(3, 3)
        pbc = np.broadcast_to(np.asarray(pbc, dtype=bool), (3,)).copy()
        if self.skin <= 0:
            self.n_builds += 1
            return host_edge_graph(positions, cell, pbc, self.cutoff)
        validate_structure(positions, cell, pbc)
        if not self._reusable(positions, cell, pbc):
            self._build(positions, cell, pbc)
        full = self._full
        assert full is not None  # built above
        vec = np.take(positions, full.src, axis=0)
        vec -= np.take(positions, full.dst, axis=0)
        vec += self._shift_vectors
        keep = np.flatnonzero(np.einsum("ij,ij->i", vec, vec) < self.cutoff**2)
        return EdgeGraph(full.src[keep], full.dst[keep], full.shifts[keep], full.n_atoms)


class DeviceNeighbourList:
    """Torch cell list on the positions' device with an optional Verlet skin.

    :meth:`edges` takes device tensors (positions (N, 3) float64, cell (3, 3) float64) and
    returns an :class:`~mdband.graph.EdgeGraph` whose ``src``, ``dst``, ``shifts`` are int64
    device tensors sorted by ``dst``.
    """

    def __init__(self, cutoff: float, skin: float = 0.0, device="cuda") -> None:
        self.cutoff = float(cutoff)
        self.skin = _check_skin(skin)
        self.device = torch.device(device)
        self.n_builds = 0
        self._ref_pos: torch.Tensor | None = None
        self._ref_cell: torch.Tensor | None = None
        self._ref_pbc: tuple[bool, ...] | None = None
        self._full: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._shift_vectors: torch.Tensor | None = None

    def reference(self) -> NeighbourReference | None:
        """Return where the current reusable list was built, copied to numpy (None if none)."""
        if self._ref_pos is None:
            return None
        assert self._ref_cell is not None  # set together with _ref_pos by _build
        return NeighbourReference(
            self._ref_pos.cpu().numpy().copy(),
            self._ref_cell.cpu().numpy().copy(),
            np.array(self._ref_pbc, dtype=bool),
        )

    def restore(self, reference: NeighbourReference | None) -> None:
        """Rebuild the reusable list from ``reference`` on the device (None or no skin: drop it)."""
        self._ref_pos = self._full = None
        if reference is not None and self.skin > 0:
            dev = self.device
            pos = torch.as_tensor(np.asarray(reference.positions, np.float64), device=dev)
            cell = torch.as_tensor(np.asarray(reference.cell, np.float64), device=dev)
            self._build(pos, cell, tuple(bool(p) for p in np.asarray(reference.pbc)))

    def _build(self, positions, cell, pbc, host_cell=None) -> None:
        check_neighbour_work(positions, _host(cell, host_cell), pbc, self.cutoff + self.skin, False)
        src, dst, shifts = cell_list_edges(
            positions, cell, pbc, self.cutoff + self.skin, host_cell=host_cell
        )
        self._full = (src, dst, shifts)
        self._shift_vectors = shifts.to(torch.float64) @ cell
        self._ref_pos, self._ref_cell, self._ref_pbc = positions.clone(), cell.clone(), pbc
        self.n_builds += 1
        log.debug(
            "device neighbour list rebuilt (#%d): %d edges within cutoff + skin %g Å",
            self.n_builds,
            int(src.shape[0]),
            self.cutoff + self.skin,
        )

    def _rebuild_needed(self, positions, cell, pbc) -> bool:
        ref = self._ref_pos
        if ref is None or ref.shape != positions.shape or pbc != self._ref_pbc:
            return True
        if ref.device != positions.device:
            return True
        d2 = (positions - ref).pow(2).sum(1).amax() if positions.shape[0] else ref.new_zeros(())
        # one scalar back to the host: displacement test and cell change together
        moved = (d2 >= (0.5 * self.skin) ** 2) | (cell != self._ref_cell).any()
        return bool(moved)

    def edges(
        self, positions: torch.Tensor, cell: torch.Tensor, pbc, host_cell: np.ndarray | None = None
    ) -> EdgeGraph:
        """Return the edges within the cutoff for these positions.

        ``host_cell``, the same cell as a numpy array when the caller has it, saves copying
        ``cell`` back to the host at a build.
        """
        pbc = tuple(bool(p) for p in np.broadcast_to(np.asarray(pbc, dtype=bool), (3,)))
        n = int(positions.shape[0])
        if self.skin <= 0:
            self.n_builds += 1
            check_neighbour_work(positions, _host(cell, host_cell), pbc, self.cutoff, host=False)
            edges = cell_list_edges(positions, cell, pbc, self.cutoff, host_cell=host_cell)
            return EdgeGraph(*edges, n_atoms=n)
        if self._rebuild_needed(positions, cell, pbc):
            self._build(positions, cell, pbc, host_cell)
        assert self._full is not None and self._shift_vectors is not None  # set by _build
        src, dst, shifts = self._full
        vec = positions[src] - positions[dst] + self._shift_vectors
        keep = torch.nonzero((vec * vec).sum(1) < self.cutoff**2).reshape(-1)
        return EdgeGraph(src[keep], dst[keep], shifts[keep], n_atoms=n)
