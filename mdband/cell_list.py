"""Cell-list neighbour search in torch: the neighbour list of the device step.

:func:`cell_list_edges` returns the same edge set as :func:`mdband.graph.build_edge_graph`
(vesin on numpy; ``src`` the neighbour, ``dst`` the centre, ``shift`` the integer cell shift of
the neighbour image, self images kept, coincident pairs with |v|² ≤ 1e-10 Å² dropped) for
periodic, triclinic, mixed and open boundaries and for cells thinner than the cutoff, computed
with torch operations on the positions' device, the candidate pairs by the Triton kernels of
:mod:`mdband.kernels.cell_pairs` where they run (CUDA), by torch elsewhere. On the CPU it is the
reference of the CUDA path (tests compare it with vesin, and the kernels with the torch path:
the same tensors); on CUDA it is what :class:`mdband.neighbours.DeviceNeighbourList` calls.
vesin's own torch package is not used: its CUDA list, about as fast as this one
(BENCHMARKS.md "2026-12-04 (third session)"), returns pairs unsorted and fails on cells thinner
than the cutoff (a fixed pair capacity per atom), and its CUDA path needs a binary matching the
torch version.

Method. Positions go to fractional coordinates ``t`` of a box basis ``B`` (periodic rows: the
cell vectors; open directions: unit vectors orthogonal to the periodic ones, scaled to the extent
of the atoms) and are wrapped into [0, 1) along periodic directions. The box is cut into
``n_k`` bins per direction, at least ``1 / bins_per_cutoff`` of the cutoff wide, so two atoms
within the cutoff are at most ``m_k`` bins apart (``m_k`` ≈ ``bins_per_cutoff``; more for cells
thinner than the cutoff, where one bin is visited through several images). Each atom visits the
``Π (2 m_k + 1)`` bins of its stencil (periodic: wrapped, with the image shift; open: clipped);
the candidates are all atoms of those bins, kept when ``|v|² < rc²``. Output is sorted by
destination (the CSR order the model uses), then stencil, then bin order.

Cost (4,096 atoms of diamond, rc 6 Å, 2 bins per cutoff): 125 stencil bins per atom, about
2.4 M candidates (≈ 3.7 per edge), float64 vectors. Host synchronisations: the kernels' one
(the number of pairs), or on the torch path two (per-atom candidate counts, and one ``nonzero``
per batch of at most ``max_candidates`` candidates); one more for a device cell given without
``host_cell`` and one for open directions (the atoms' extent). The kernels' list against the
torch path on a GPU: BENCHMARKS.md "2026-12-04 (third session)".
The box basis, bins and stencil are cached per cell, periodicity, cutoff and atom count.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, NamedTuple

import numpy as np
import torch

from mdband.graph import COINCIDENT_R2
from mdband.kernels import cell_pairs

#: slack on bin widths and stencils against rounding of fractional coordinates
_SLACK = 1e-9


class _Frame(NamedTuple):
    basis: torch.Tensor  # (3, 3) float64: box rows (periodic: cell vectors)
    inv: torch.Tensor  # its inverse: fractional coordinates t = r @ inv
    scale: np.ndarray  # (3,) fractional change per Å along each box row
    periodic: torch.Tensor  # (3,) bool


class _Grid(NamedTuple):
    n_bins: torch.Tensor  # (3,) bins per direction
    last: torch.Tensor  # n_bins - 1
    stride: torch.Tensor  # (3,) bin id = b · stride
    offsets: torch.Tensor  # (K, 3) stencil
    total: int  # bins in all
    sizes: tuple[int, int, int]  # n_bins on the host (the pair kernels' arguments: no copy back)


def _box_basis(cell: np.ndarray, pbc: tuple[bool, bool, bool]) -> np.ndarray:
    """Build the box basis of a cell: one row per direction.

    Rows: the cell vectors of periodic directions; unit vectors orthogonal to them (and to each
    other) for open directions, so open coordinates never mix into periodic ones.
    """
    basis = np.zeros((3, 3))
    periodic = [k for k in range(3) if pbc[k]]
    for k in periodic:
        basis[k] = cell[k]
    span = [cell[k] / np.linalg.norm(cell[k]) for k in periodic]
    # Gram-Schmidt of the periodic rows, then fill the open rows from the cell or the axes
    ortho: list[np.ndarray] = []
    for v in span:
        w = v - sum((v @ u) * u for u in ortho)
        ortho.append(w / np.linalg.norm(w))
    for k in range(3):
        if pbc[k]:
            continue
        for cand in (cell[k], *np.eye(3)):
            w = cand - sum((cand @ u) * u for u in ortho)
            if np.linalg.norm(w) > 1e-6 * max(1.0, float(np.linalg.norm(cand))):
                w = w / np.linalg.norm(w)
                ortho.append(w)
                basis[k] = w
                break
    return basis


def _bins(scale: np.ndarray, pbc, cutoff: float, bins_per_cutoff: int, n_atoms: int):
    """(n_k, m_k) per direction from ``scale_k`` = fractional change per Å along k."""
    reach = cutoff * scale * (1.0 + _SLACK)  # fractional distance one cutoff can span
    n = np.maximum(1, np.floor(bins_per_cutoff / np.maximum(reach, 1e-300))).astype(np.int64)
    n = np.minimum(n, 1 << 20)
    cap = max(64, 4 * n_atoms)  # never more bins than a few per atom (sparse or open cells)
    while int(np.prod(n)) > cap:
        k = int(np.argmax(n))
        n[k] = max(1, n[k] // 2)
    m = np.ceil(reach * n * (1.0 + _SLACK)).astype(np.int64)
    for k in range(3):
        if not pbc[k]:
            m[k] = min(m[k], n[k] - 1)  # open: only the bins that exist
    return n, m


@functools.lru_cache(maxsize=16)
def _frame(cell_key: bytes, pbc: tuple[bool, bool, bool], device: torch.device) -> _Frame:
    """Return the box basis of a cell and its inverse on ``device``.

    Cached: an MD run's cell rarely changes, and each of these small host → device copies costs
    a few µs of latency on CUDA.
    """
    cell = np.frombuffer(cell_key, dtype=np.float64).reshape(3, 3)
    basis = _box_basis(cell, pbc)
    inv = np.linalg.inv(basis)
    return _Frame(
        basis=torch.as_tensor(basis, device=device),
        inv=torch.as_tensor(inv, device=device),
        scale=np.linalg.norm(inv, axis=0),  # |Δt_k| ≤ |Δr| · scale_k
        periodic=torch.tensor(pbc, device=device),
    )


@functools.lru_cache(maxsize=16)
def _grid(scale: tuple, pbc, cutoff: float, bins_per_cutoff: int, n_atoms: int, device) -> _Grid:
    """Bins and stencil of a frame (cached like :func:`_frame`)."""
    n_bins, reach = _bins(np.asarray(scale), pbc, cutoff, bins_per_cutoff, n_atoms)
    i64 = dict(dtype=torch.int64, device=device)
    n_t = torch.as_tensor(n_bins, **i64)
    stride = torch.as_tensor([n_bins[1] * n_bins[2], n_bins[2], 1], **i64)
    offsets = torch.tensor(
        list(itertools.product(*[range(-int(m), int(m) + 1) for m in reach])), **i64
    )  # (K, 3)
    sizes = (int(n_bins[0]), int(n_bins[1]), int(n_bins[2]))
    return _Grid(n_t, n_t - 1, stride, offsets, int(np.prod(n_bins)), sizes)


def _host_cell(cell) -> np.ndarray:
    if cell is None:
        return np.zeros((3, 3))
    if isinstance(cell, torch.Tensor):
        return cell.detach().to("cpu", torch.float64).numpy().reshape(3, 3)
    return np.asarray(cell, dtype=np.float64).reshape(3, 3)


def cell_list_edges(
    positions: torch.Tensor,
    cell: torch.Tensor | np.ndarray | None,
    pbc,
    cutoff: float,
    *,
    bins_per_cutoff: int = 2,
    max_candidates: int = 1 << 25,
    host_cell: np.ndarray | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Find every pair within ``cutoff``, sorted by ``dst``.

    The pairs are ``(src, dst, shifts)`` int64 tensors on the positions' device.

    Parameters
    ----------
    positions : (N, 3) tensor, Å (any float dtype; distances in float64)
    cell : (3, 3) rows are the cell vectors (Å); ignored along open directions
    pbc : bool or 3 bools
    cutoff : float, Å
    bins_per_cutoff : int
        Bins per cutoff length; 2 visits a 5×5×5 stencil (≈ 45 % fewer candidates than 3×3×3).
    max_candidates : int
        Candidates handled at once (memory ≈ 100 B each); more are split into atom batches.
    host_cell : (3, 3) numpy array, optional
        The same cell on the host, when the caller has it: saves copying a device cell back
        (a synchronisation).

    The edge vector is ``r[src] + shifts @ cell - r[dst]``; periodic images of the
    neighbour beyond the first are found for cells thinner than ``cutoff``.
    """
    dev = positions.device
    i64: dict[str, Any] = dict(dtype=torch.int64, device=dev)
    pbc = tuple(bool(p) for p in np.broadcast_to(np.asarray(pbc, dtype=bool), (3,)))
    r = positions.detach().to(torch.float64)
    n_atoms = int(r.shape[0])
    empty = torch.zeros(0, **i64)
    if n_atoms == 0:
        return empty, empty, torch.zeros(0, 3, **i64)
    cell_np = _host_cell(cell if host_cell is None else host_cell)
    frame = _frame(np.ascontiguousarray(cell_np).tobytes(), pbc, dev)
    t = r @ frame.inv
    if all(pbc):
        image = torch.floor(t)
    else:
        image = torch.where(frame.periodic, torch.floor(t), torch.zeros_like(t))
    t = t - image
    scale = frame.scale
    if not all(pbc):
        lo = torch.where(frame.periodic, torch.zeros_like(t), t).amin(0)
        hi = torch.where(frame.periodic, torch.ones_like(t), t).amax(0)
        lo_np, hi_np = lo.cpu().numpy(), hi.cpu().numpy()
        extent = np.where(pbc, 1.0, np.maximum(hi_np - lo_np, 1e-6 * cutoff))
        scale = scale / extent
        t = (t - lo) / torch.as_tensor(extent, device=dev)
    grid = _grid(tuple(scale.tolist()), pbc, float(cutoff), int(bins_per_cutoff), n_atoms, dev)
    n_t = grid.n_bins
    b = torch.minimum((t * n_t).to(torch.int64), grid.last).clamp_(min=0)  # (N, 3)
    wrapped = r - image @ frame.basis  # positions inside the box

    bin_id = (b * grid.stride).sum(1)
    order = torch.argsort(bin_id, stable=True)
    # bin k holds order[starts[k] : starts[k] + counts[k]] (no bincount: it synchronises)
    edges = torch.arange(grid.total + 1, **i64)  # not cached: up to 4 N + 1 of them
    bounds = torch.searchsorted(bin_id[order], edges)
    starts = bounds[:-1]
    counts = bounds[1:] - starts

    rc2 = float(cutoff) ** 2
    if cell_pairs.applies(dev, grid.offsets.shape[0]):
        j, i, s = cell_pairs.cell_pairs(wrapped, b, order, starts, counts, grid.offsets,
                                        grid.sizes, pbc, frame.basis, rc2,
                                        COINCIDENT_R2)  # fmt: skip
    else:
        j, i, s = candidate_pairs_reference(
            b, wrapped, order, starts, counts, grid, frame, pbc, rc2, max_candidates
        )
    # back to the caller's (unwrapped) positions: r_j + S cell - r_i
    return j, i, s + (image[i] - image[j]).to(torch.int64)


def candidate_pairs_reference(b, wrapped, order, starts, counts, grid, frame, pbc, rc2,
                              max_candidates):  # fmt: skip
    """Return the pairs ``(j, i, s)`` among the stencil candidates, with torch operations.

    Every candidate j of atom i in its stencil bins with ``COINCIDENT_R2 < |v|² < rc2`` (v
    between wrapped positions, s the neighbour's image), by i, stencil slot, bin order: torch
    operations, atoms batched to ``max_candidates`` candidates (the path of CPUs and the
    reference of :func:`mdband.kernels.cell_pairs.cell_pairs`).
    """
    i64 = dict(dtype=torch.int64, device=wrapped.device)
    n_t = grid.n_bins
    offsets = grid.offsets
    cand = b[:, None, :] + offsets[None, :, :]  # (N, K, 3) stencil bins
    img = torch.div(cand, n_t, rounding_mode="floor")
    valid = None
    if not all(pbc):  # open directions: bins outside the box do not exist
        open_dirs = ~frame.periodic
        valid = ~((img != 0) & open_dirs).any(-1)
        img = torch.where(open_dirs, torch.zeros_like(img), img)
    nb_id = ((cand - img * n_t) * grid.stride).sum(-1)
    if valid is None:
        cnt = counts[nb_id]  # (N, K)
    else:
        nb_id = torch.where(valid, nb_id, torch.zeros_like(nb_id))
        cnt = torch.where(valid, counts[nb_id], torch.zeros_like(nb_id))

    per_atom = cnt.sum(1).cpu().numpy()
    # image vectors per (atom, stencil bin), (N·K, 3): formed before the gather to candidates,
    # where a K = 3 GEMM would run once per candidate pair instead of once per (atom, bin)
    img_vec = (img.reshape(-1, 3).to(torch.float64) @ frame.basis).reshape(img.shape)
    out = []
    for a0, a1 in _atom_batches(per_atom, max_candidates):
        c = cnt[a0:a1].reshape(-1)
        total = int(per_atom[a0:a1].sum())
        if total == 0:
            continue
        slot = torch.repeat_interleave(torch.arange(c.shape[0], **i64), c, output_size=total)
        first = torch.cumsum(c, 0) - c
        within = torch.arange(total, **i64) - first[slot]
        j = order[starts[nb_id[a0:a1].reshape(-1)[slot]] + within]
        i = a0 + torch.div(slot, offsets.shape[0], rounding_mode="floor")
        s = img[a0:a1].reshape(-1, 3)[slot]  # image shift of the wrapped neighbour
        v = wrapped[j] - wrapped[i] + img_vec[a0:a1].reshape(-1, 3)[slot]
        d2 = (v * v).sum(1)
        keep = torch.nonzero((d2 < rc2) & (d2 > COINCIDENT_R2)).reshape(-1)
        out.append((j[keep], i[keep], s[keep]))
    if not out:
        empty = torch.zeros(0, **i64)
        return empty, empty, torch.zeros(0, 3, **i64)
    if len(out) == 1:
        return out[0]
    return tuple(torch.cat(parts) for parts in zip(*out))


def _atom_batches(per_atom: np.ndarray, max_candidates: int):
    """Yield contiguous atom ranges with at most ``max_candidates`` candidates each.

    One atom may exceed it alone.
    """
    n = per_atom.shape[0]
    if int(per_atom.sum()) <= max_candidates:
        yield 0, n
        return
    cum = np.cumsum(per_atom)
    a0 = 0
    while a0 < n:
        base = cum[a0 - 1] if a0 > 0 else 0
        a1 = int(np.searchsorted(cum, base + max_candidates, side="right"))
        a1 = max(a1, a0 + 1)
        yield a0, min(a1, n)
        a0 = a1
