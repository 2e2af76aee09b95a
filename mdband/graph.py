"""EdgeGraph: the neighbour list every SeZM evaluation starts from.

Edges follow deepmd-kit's schema: ``src`` is the neighbour, ``dst`` the centre and
``edge_vec = r[src] + shift @ cell - r[dst]`` (Å). Every neighbour within the cutoff is kept
(no ``sel`` cap), periodic images map to their owner atom, self-images (``src == dst`` with a
non-zero shift) are kept and coincident pairs (|v|² ≤ 1e-10 Å²) are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import vesin

from mdband.errors import StructureError

COINCIDENT_R2 = 1e-10


@dataclass(frozen=True)
class EdgeGraph:
    """Directed edges of one frame.

    Attributes
    ----------
    src, dst : (E,) int64 arrays
        Neighbour and centre atom of each edge.
    shifts : (E, 3) int64 array
        Integer cell shift of the neighbour image.
    n_atoms : int
        Number of atoms (nodes).
    """

    src: np.ndarray
    dst: np.ndarray
    shifts: np.ndarray
    n_atoms: int

    @property
    def n_edges(self) -> int:
        return int(self.src.shape[0])

    def edge_vectors(self, positions: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """``r[src] + shift @ cell - r[dst]`` as a differentiable (E, 3) tensor."""
        src = torch.as_tensor(self.src, device=positions.device)
        dst = torch.as_tensor(self.dst, device=positions.device)
        shift = torch.as_tensor(self.shifts, device=positions.device, dtype=positions.dtype)
        return positions[src] - positions[dst] + shift @ cell


def validate_structure(positions: np.ndarray, cell: np.ndarray, pbc: np.ndarray) -> None:
    """Raise :class:`StructureError` for NaN/inf coordinates or a zero-volume periodic cell."""
    if positions.ndim != 2 or positions.shape[1] != 3:
        raise StructureError(f"positions must have shape (N, 3), got {positions.shape}")
    if not np.all(np.isfinite(positions)):
        raise StructureError("positions contain NaN or inf")
    if cell.shape != (3, 3) or not np.all(np.isfinite(cell)):
        raise StructureError("cell must be a finite 3x3 matrix")
    if pbc.any():
        vol = abs(float(np.linalg.det(cell)))
        if vol < 1e-8:
            raise StructureError("cell has zero volume but periodic boundary conditions are on")
        for k in np.nonzero(pbc)[0]:
            if np.linalg.norm(cell[k]) < 1e-8:
                raise StructureError(f"cell vector {k} is zero but direction {k} is periodic")


def build_edge_graph(
    positions: np.ndarray, cell: np.ndarray | None, pbc, cutoff: float
) -> EdgeGraph:
    """Neighbour list within ``cutoff`` (vesin), for periodic, mixed or open boundaries."""
    positions = np.ascontiguousarray(positions, dtype=np.float64)
    cell = np.zeros((3, 3)) if cell is None else np.asarray(cell, dtype=np.float64).reshape(3, 3)
    pbc = np.broadcast_to(np.asarray(pbc, dtype=bool), (3,)).copy()
    validate_structure(positions, cell, pbc)
    n = positions.shape[0]
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return EdgeGraph(empty, empty, np.zeros((0, 3), dtype=np.int64), 0)
    box = cell.copy()
    if not pbc.any():
        box = np.zeros((3, 3))
    nl = vesin.NeighborList(cutoff=float(cutoff), full_list=True)
    i, j, shifts, vec = nl.compute(points=positions, box=box, periodic=pbc, quantities="ijSD")
    keep = np.einsum("ij,ij->i", vec, vec) > COINCIDENT_R2
    return EdgeGraph(
        src=j[keep].astype(np.int64),
        dst=i[keep].astype(np.int64),
        shifts=shifts[keep].astype(np.int64),
        n_atoms=n,
    )
