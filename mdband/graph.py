"""EdgeGraph: the neighbour list every SeZM evaluation starts from.

Edges follow deepmd-kit's schema: ``src`` is the neighbour, ``dst`` the centre and
``edge_vec = r[src] + shift @ cell - r[dst]`` (Å). Every neighbour within the cutoff is kept
(no ``sel`` cap), periodic images map to their owner atom, self-images (``src == dst`` with a
non-zero shift) are kept and coincident pairs (|v|² ≤ 1e-10 Å²) are dropped.

Work is bounded before a list is built (:func:`check_neighbour_work`): far-flung coordinates,
cells needing too many periodic images and lists estimated too large are refused in one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
import vesin

from mdband.errors import StructureError

COINCIDENT_R2 = 1e-10
#: vesin's CPU cell list keeps at most this many cells, scaling a finer grid down with its
#: aspect ratio kept (vesin 0.6, cpu_cell_list.cpp)
_VESIN_MAX_CELLS = 1e5


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

    src: np.ndarray | torch.Tensor
    dst: np.ndarray | torch.Tensor
    shifts: np.ndarray | torch.Tensor
    n_atoms: int

    @property
    def n_edges(self) -> int:
        """Number of edges."""
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


#: coordinates (Å) beyond this are refused: float64 keeps 1e-8 Å there, and far-flung atoms
#: are no physical input (an atom 1e300 Å away, or one that overflows image counters)
MAX_COORDINATE = 1.0e8
#: periodic images one atom may be from the cell (fractional coordinate), so image flags and
#: the neighbour search's cell indices stay far inside 32-bit integers
MAX_CELL_SHIFT = 2**20
#: periodic images of the cell one neighbour search may visit: prod over periodic directions
#: of (2 ceil(cutoff / width) + 1); a cell far thinner than the cutoff needs more
MAX_IMAGES = 10**6
#: edges a neighbour list may hold (estimated before it is built): 2**31 edges are over
#: 100 GB of neighbour list alone
MAX_EDGES = 2**31
#: bytes per edge of a host neighbour list (vesin's pairs, shifts and vectors, mdband's copies)
EDGE_BYTES = 100


def face_widths(cell: np.ndarray) -> np.ndarray:
    """Return the distance between opposite faces of the cell along each cell vector (Å).

    It is 0 where the cell is flat.
    """
    cell = np.asarray(cell, dtype=np.float64).reshape(3, 3)
    volume = abs(float(np.linalg.det(cell)))
    out = np.zeros(3)
    for k in range(3):
        area = float(np.linalg.norm(np.cross(cell[(k + 1) % 3], cell[(k + 2) % 3])))
        out[k] = volume / area if area > 0 else 0.0
    return out


def check_neighbour_work(positions, cell, pbc, cutoff: float, host: bool = True) -> int:
    """Refuse an absurd neighbour list in one line; return its estimated number of edges.

    A list is refused when its size or its search is absurd.

    Checked before any list is built (:class:`~mdband.errors.StructureError`): every coordinate
    within :data:`MAX_COORDINATE` Å and, along periodic directions, within
    :data:`MAX_CELL_SHIFT` cells of the cell; at most :data:`MAX_IMAGES` periodic images of
    the cell within the cutoff (cell widths against the cutoff); at most :data:`MAX_EDGES`
    edges, estimated from the atom count, the density (periodic widths, the atoms' extent
    along open directions) and the cutoff, and (``host``) no more than the machine's memory
    at :data:`EDGE_BYTES` per edge. ``positions``: numpy (N, 3) or a torch tensor (then the
    few numbers needed come back from its device in one copy).
    """
    cell = np.zeros((3, 3)) if cell is None else np.asarray(cell, dtype=np.float64).reshape(3, 3)
    pbc = np.broadcast_to(np.asarray(pbc, dtype=bool), (3,))
    n = int(positions.shape[0])
    if n == 0:
        return _work(0, cell, pbc, cutoff, None, host)
    periodic = pbc.any() and face_widths(cell).min() > 0
    inv = np.linalg.inv(cell) if periodic else np.zeros((3, 3))
    if isinstance(positions, torch.Tensor):
        r = positions.detach().to(torch.float64)
        far_t, far_at = r.abs().amax(1).max(0)
        frac_t = (r @ torch.as_tensor(inv, device=r.device)).abs()
        shift, shift_at = frac_t.max(0)
        extent = r.amax(0) - r.amin(0)
        both = [far_t[None], far_at[None].double(), extent, shift, shift_at.double()]
        stats = torch.cat(both).cpu().numpy()
    else:
        pos = np.asarray(positions, dtype=np.float64)
        far = np.abs(pos).max(axis=1)
        frac = np.abs(pos @ inv)
        stats = np.concatenate(
            [[far.max(), far.argmax()], pos.max(0) - pos.min(0), frac.max(0), frac.argmax(0)]
        )
    return _work(n, cell, pbc, cutoff, stats, host)


def _work(n: int, cell, pbc, cutoff, stats, host: bool) -> int:
    """Run the checks of :func:`check_neighbour_work` on ``stats``.

    ``stats``: the largest |coordinate| and its atom, the extent along x, y, z, the largest
    |fractional coordinate| per cell vector and its atom.
    """
    cutoff = float(cutoff)
    if not (np.isfinite(cutoff) and cutoff > 0):
        raise StructureError(f"cutoff {cutoff} Å must be a finite positive length")
    if n == 0:
        return 0
    far, far_at, extent, shift, shift_at = stats[0], stats[1], stats[2:5], stats[5:8], stats[8:]
    if far > MAX_COORDINATE:
        raise StructureError(
            f"atom {int(far_at)} is {far:.3g} Å from the origin, beyond {MAX_COORDINATE:.0e} Å: "
            "no physical structure (check the coordinates' units; in MD, the atoms flew apart)"
        )
    images = 1.0
    lengths = np.zeros(3)
    widths = face_widths(cell) if pbc.any() else np.zeros(3)
    for k in np.nonzero(pbc)[0]:
        if widths[k] <= 0:
            continue  # a flat periodic cell is refused by validate_structure
        images *= 2 * np.ceil(cutoff / widths[k]) + 1
        if images > MAX_IMAGES:
            raise StructureError(
                f"the cell is {widths[k]:.3g} Å wide along cell vector {k}, far below the "
                f"cutoff {cutoff:g} Å: the neighbour search would visit {images:.2g} "
                f"periodic images of the cell (at most {MAX_IMAGES:.0e}); use a larger cell"
            )
        if shift[k] > MAX_CELL_SHIFT:
            raise StructureError(
                f"atom {int(shift_at[k])} is {shift[k]:.3g} cells away from the cell along "
                f"cell vector {k} (at most {MAX_CELL_SHIFT}); wrap the structure into its cell"
            )
        lengths[k] = widths[k]
    for k in np.nonzero(~pbc)[0]:
        lengths[k] = max(float(extent[k]), 2 * cutoff)
    density = n / float(np.prod(lengths))
    per_atom = min(n * images, density * 4.0 / 3.0 * np.pi * cutoff**3)
    edges = n * per_atom
    if edges > MAX_EDGES:
        raise StructureError(
            f"the neighbour list would hold about {edges:.2g} edges ({n} atoms, cutoff "
            f"{cutoff:g} Å, {per_atom:.3g} neighbours per atom; at most {MAX_EDGES:.2g}): check "
            "the cell, the coordinates' units and the model's cutoff"
        )
    memory = _physical_memory()
    if host and memory and edges * EDGE_BYTES > memory:
        raise StructureError(
            f"the neighbour list would hold about {edges:.2g} edges ({n} atoms, cutoff "
            f"{cutoff:g} Å), {edges * EDGE_BYTES / 1e9:.3g} GB, more than this machine's "
            f"{memory / 1e9:.3g} GB of memory"
        )
    return int(edges)


def _physical_memory() -> int | None:
    """Bytes of memory of this machine (None where unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def vesin_can_search(positions: np.ndarray, cell: np.ndarray, pbc, cutoff: float) -> bool:
    """Tell whether vesin's CPU cell list can search this box (False where it would fail).

    It fails where its grid is scaled down to :data:`_VESIN_MAX_CELLS` cells keeping the aspect
    ratio, which rounds a direction to zero cells for long, flat boxes (an open structure with
    an atom 1e6 Å away, a large open flake) and kills the process with SIGFPE. The grid is
    estimated as vesin makes it (face distances of the cell along periodic directions, the
    atoms' extent along open ones), with a margin of 2 cells.
    """
    pbc = np.broadcast_to(np.asarray(pbc, dtype=bool), (3,))
    positions = np.asarray(positions, dtype=np.float64)
    if positions.shape[0] == 0:
        return True
    widths = face_widths(cell) if pbc.any() else np.zeros(3)
    extent = positions.max(axis=0) - positions.min(axis=0)
    d = np.where(pbc, widths, extent)
    n = np.maximum(1.0, np.trunc(d / float(cutoff)))
    if float(np.prod(n)) <= _VESIN_MAX_CELLS:
        return True
    rxy, ryz = n[0] / n[1], n[1] / n[2]
    nz = np.cbrt(_VESIN_MAX_CELLS / (rxy * ryz * ryz))
    ny = ryz * nz
    nx = rxy * ny
    return min(nx, ny, nz) >= 2.0


def build_edge_graph(
    positions: np.ndarray, cell: np.ndarray | None, pbc, cutoff: float
) -> EdgeGraph:
    """Neighbour list within ``cutoff`` (vesin), for periodic, mixed or open boundaries.

    Absurd work (coordinates, images, edges: :func:`check_neighbour_work`) and
    boxes vesin cannot search (:func:`vesin_can_search`) are a
    :class:`~mdband.errors.StructureError`; :func:`mdband.neighbours.host_edge_graph` takes
    mdband's own cell list for the latter.
    """
    positions = np.ascontiguousarray(positions, dtype=np.float64)
    cell = np.zeros((3, 3)) if cell is None else np.asarray(cell, dtype=np.float64).reshape(3, 3)
    pbc = np.broadcast_to(np.asarray(pbc, dtype=bool), (3,)).copy()
    validate_structure(positions, cell, pbc)
    check_neighbour_work(positions, cell, pbc, cutoff)
    if not vesin_can_search(positions, cell, pbc, cutoff):
        raise StructureError(
            "vesin cannot search this box (a grid too long and flat); use "
            "mdband.neighbours.host_edge_graph"
        )
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
