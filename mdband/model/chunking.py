"""Chunk plans: which destination atoms (and so which edges) one chunk of an evaluation covers.

A plan is plain data over an edge list grouped by destination (stable sort by ``dst``, the CSR
the kernels use): chunk ``c`` owns the destination atoms ``atom_bounds[c]:atom_bounds[c+1]``
and exactly their incoming edges ``edge_bounds[c]:edge_bounds[c+1]``. A destination's edges
never straddle two chunks, so its attention softmax and its sums are complete inside one chunk
(large-cells.md §3). A caller may build a plan on the host before a CUDA-graph capture
(:func:`plan_chunks` from the row pointer) and hand it to the model; without one the model
decides from the memory budget (:func:`plan_for_budget`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mdband.errors import MemoryBudgetError
from mdband.settings import parse_memory_size

#: share of the free GPU memory an "auto" budget takes (the rest: allocator slack, other users)
AUTO_FRACTION = 0.9


@dataclass(frozen=True)
class ChunkPlan:
    """Destination-atom bounds and the matching edge bounds of each chunk.

    Attributes
    ----------
    atom_bounds : tuple of int
        ``0 = a_0 < a_1 < … < a_n = N``; chunk ``c`` owns atoms ``a_c … a_{c+1}−1``.
    edge_bounds : tuple of int
        ``0 = e_0 ≤ … ≤ e_n = E`` with ``e_c = row_ptr[a_c]``: the chunk's edges in the
        dst-sorted edge list.
    dst_sorted : bool
        The caller's edges are already sorted by destination (the model then skips its stable
        sort). A wrong claim gives wrong results; :func:`plan_chunks` leaves it False.
    """

    atom_bounds: tuple[int, ...]
    edge_bounds: tuple[int, ...]
    dst_sorted: bool = False

    def __post_init__(self) -> None:
        """Store the bounds as int tuples and check them (ValueError on a malformed plan)."""
        a, e = tuple(int(v) for v in self.atom_bounds), tuple(int(v) for v in self.edge_bounds)
        object.__setattr__(self, "atom_bounds", a)
        object.__setattr__(self, "edge_bounds", e)
        if len(a) < 2 or len(a) != len(e) or a[0] != 0 or e[0] != 0:
            raise ValueError("a chunk plan needs matching bounds that start at 0")
        if any(x >= y for x, y in zip(a, a[1:])) or any(x > y for x, y in zip(e, e[1:])):
            raise ValueError("chunk bounds must increase (atoms strictly, edges weakly)")

    @property
    def n_chunks(self) -> int:
        """Number of chunks."""
        return len(self.atom_bounds) - 1

    @property
    def max_chunk_edges(self) -> int:
        """Edges of the largest chunk."""
        e = self.edge_bounds
        return max(b - a for a, b in zip(e, e[1:]))

    @property
    def n_atoms(self) -> int:
        """Destination atoms the plan covers (N)."""
        return self.atom_bounds[-1]

    @property
    def n_edges(self) -> int:
        """Edges the plan covers (E)."""
        return self.edge_bounds[-1]

    def chunks(self):
        """(atom start, atom stop, edge start, edge stop) of each chunk."""
        a, e = self.atom_bounds, self.edge_bounds
        return [(a[c], a[c + 1], e[c], e[c + 1]) for c in range(self.n_chunks)]

    def check(self, n_atoms: int, n_edges: int) -> None:
        """ValueError unless the plan covers exactly ``n_atoms`` atoms and ``n_edges`` edges."""
        if self.n_atoms != n_atoms or self.n_edges != n_edges:
            raise ValueError(
                f"chunk plan covers {self.n_atoms} atoms and {self.n_edges} edges, the call has "
                f"{n_atoms} atoms and {n_edges} edges"
            )


def plan_chunks(
    row_ptr: Sequence[int] | np.ndarray, max_edges: int, dst_sorted: bool = False
) -> ChunkPlan:
    """Greedy chunks of consecutive destination atoms with at most ``max_edges`` edges each.

    ``row_ptr`` (N+1,) host ints: the CSR row pointer of the edges by destination
    (``row_ptr[k+1] − row_ptr[k]`` edges end at atom k). An atom with more than ``max_edges``
    edges gets a chunk of its own (its edges are never split); atoms without edges join the
    chunk before them. Pure function of its arguments.
    """
    ptr = np.asarray(row_ptr, dtype=np.int64).reshape(-1)
    if ptr.shape[0] < 2 or ptr[0] != 0 or np.any(np.diff(ptr) < 0):
        raise ValueError("row_ptr must start at 0, be non-decreasing and cover at least 1 atom")
    if max_edges < 1:
        raise ValueError(f"max_edges must be at least 1, got {max_edges}")
    n = ptr.shape[0] - 1
    atoms, edges = [0], [0]
    a = 0
    while a < n:
        # the last atom boundary b with row_ptr[b] ≤ row_ptr[a] + max_edges, at least a + 1
        b = int(np.searchsorted(ptr, ptr[a] + max_edges, side="right")) - 1
        b = min(max(b, a + 1), n)
        atoms.append(b)
        edges.append(int(ptr[b]))
        a = b
    return ChunkPlan(tuple(atoms), tuple(edges), dst_sorted)


def plan_even(
    row_ptr: Sequence[int] | np.ndarray, n_chunks: int, dst_sorted: bool = False
) -> ChunkPlan:
    """Plan ``n_chunks`` chunks of consecutive destination atoms with about equal edge counts.

    Chunk c starts at the first atom whose edges start at or after c·E/n (fewer chunks
    where atoms are larger than that). Pure function of its arguments.
    """
    ptr = np.asarray(row_ptr, dtype=np.int64).reshape(-1)
    n, e = ptr.shape[0] - 1, int(ptr[-1])
    targets = (np.arange(1, max(1, int(n_chunks)), dtype=np.int64) * e) // max(1, int(n_chunks))
    cuts = np.searchsorted(ptr, targets, side="left")
    atoms = np.unique(np.concatenate([[0], np.clip(cuts, 1, max(n - 1, 1)), [n]]))
    return ChunkPlan(tuple(atoms.tolist()), tuple(ptr[atoms].tolist()), dst_sorted)


def row_pointer(dst: torch.Tensor, n_atoms: int) -> tuple[np.ndarray, bool]:
    """Return the host CSR row pointer (N+1,) of ``dst`` and whether ``dst`` is already sorted.

    One device sync.
    """
    counts = torch.bincount(dst, minlength=n_atoms)
    if dst.shape[0] > 1:
        unsorted = (dst[1:] < dst[:-1]).any().reshape(1).to(counts.dtype)
    else:
        unsorted = counts.new_zeros(1)
    host = torch.cat([counts, unsorted]).cpu().numpy()
    ptr = np.zeros(n_atoms + 1, dtype=np.int64)
    np.cumsum(host[:n_atoms], out=ptr[1:])
    return ptr, not bool(host[n_atoms])


# ---------------------------------------------------------------------------- budget
def resolve_budget(setting: str, device) -> int | None:
    """Bytes one evaluation may use under the ``memory_budget`` setting; None = no limit.

    "auto": on CUDA :data:`AUTO_FRACTION` of the device's free memory plus what the caching
    allocator holds unused, on CPU no limit; "off": no limit; else the size given.
    """
    dev = torch.device(device)
    if setting == "off" or (setting == "auto" and dev.type != "cuda"):
        return None
    if setting == "auto":
        free, _ = torch.cuda.mem_get_info(dev)
        unused = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
        return int(AUTO_FRACTION * (free + unused))
    return parse_memory_size(setting)


def format_bytes(n: float) -> str:
    """``1.23 GB`` style (decimal units)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def describe_budget(setting: str, device) -> str:
    """One line: the setting and what it resolves to on ``device``."""
    dev = torch.device(device)
    if setting == "off":
        return "off (no limit: never chunked)"
    if setting == "auto" and dev.type != "cuda":
        return "auto: no limit on CPU (never chunked; give a size to chunk)"
    n = resolve_budget(setting, dev)
    assert n is not None  # only "off" and "auto" off CUDA resolve to no limit
    if setting == "auto":
        return f"auto: {format_bytes(n)} ({AUTO_FRACTION:.0%} of the free memory of {dev})"
    return f"{format_bytes(n)} ({setting})"


def plan_for_budget(estimate, budget: int | None, dst: torch.Tensor, n_atoms: int,
                    max_chunk_edges: int | None = None):  # fmt: skip
    """Return the plan of one call under ``budget`` bytes, or None to run unchunked.

    ``estimate`` is the model's :class:`~mdband.model.memory.MemoryEstimate`. Unchunked when
    no budget is set or its estimate fits and the call has at most ``max_chunk_edges`` edges
    (no device sync); otherwise the number of chunks the budget and ``max_chunk_edges`` need,
    rounded up to a power of two (:func:`plan_even`; doubled while a chunk is still too long),
    each of about the same number of edges. The rounding keeps the plan, and so the rounding
    of the results, the same when the free memory moves by less than a factor of two: a run
    resumed in another process (another budget under "auto") reproduces the uninterrupted run
    bit for bit. Raises
    :class:`~mdband.errors.MemoryBudgetError` when even a chunk of the atom with the most
    edges does not fit.
    """
    n_edges = int(dst.shape[0])
    cap = n_edges if max_chunk_edges is None else max(1, int(max_chunk_edges))
    if budget is None or (estimate.unchunked(n_atoms, n_edges) <= budget and n_edges <= cap):
        return None
    ptr, is_sorted = row_pointer(dst, n_atoms)
    max_deg = int(np.max(np.diff(ptr))) if n_atoms else 0
    max_edges = estimate.chunk_edges_within(budget, n_atoms, n_edges)
    if max_edges < max(max_deg, 1):
        need = estimate.chunked(n_atoms, n_edges, max(max_deg, 1))
        raise MemoryBudgetError(
            f"{n_atoms} atoms ({n_edges} edges) need an estimated {format_bytes(need)} even "
            f"one atom per chunk, above the memory budget of {format_bytes(budget)}"
        )
    limit = min(max_edges, cap)
    n_chunks = 1 << (-(-n_edges // limit) - 1).bit_length()  # a power of two
    while limit >= max_deg and n_chunks < n_atoms:
        plan = plan_even(ptr, n_chunks, dst_sorted=is_sorted)
        if plan.max_chunk_edges <= limit:
            return plan
        n_chunks *= 2  # atoms at the cuts made a chunk too long: twice as many
    # a cap below the largest atom's edges (after out-of-memory errors), or about an atom
    # per chunk: greedy chunks of at most ``limit`` edges, a larger atom alone
    return plan_chunks(ptr, limit, dst_sorted=is_sorted)
