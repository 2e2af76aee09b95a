"""Cell-list neighbour search in torch: the neighbour list of the device step.

:func:`cell_list_edges` returns the same edge set as :func:`mdband.graph.build_edge_graph`
(vesin on numpy; ``src`` the neighbour, ``dst`` the centre, ``shift`` the integer cell shift of
the neighbour image, self images kept, coincident pairs with |v|² ≤ 1e-10 Å² dropped) for
periodic, triclinic, mixed and open boundaries and for cells thinner than the cutoff, computed
with torch operations on the positions' device. On the CPU it is the reference of the CUDA path
(tests compare it with vesin); on CUDA it is what :class:`mdband.neighbours.DeviceNeighbourList`
calls. vesin's own torch package is not used: its CUDA path needs a separate binary per torch
version, and these ~40 torch kernels build 650,000 edges in a few ms on an H200.

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
2.4 M candidates (≈ 3.7 per edge), float64 vectors; 4 host synchronisations (cell, per-atom
candidate counts, and one ``nonzero`` per batch of at most ``max_candidates`` candidates).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from mdband.graph import COINCIDENT_R2

#: slack on bin widths and stencils against rounding of fractional coordinates
_SLACK = 1e-9


def _box_basis(cell: np.ndarray, pbc: tuple[bool, bool, bool]) -> np.ndarray:
    """Rows: the cell vectors of periodic directions; unit vectors orthogonal to them (and to
    each other) for open directions, so open coordinates never mix into periodic ones."""
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
            if np.linalg.norm(w) > 1e-6 * max(1.0, np.linalg.norm(cand)):
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


def cell_list_edges(
    positions: torch.Tensor,
    cell: torch.Tensor | np.ndarray | None,
    pbc,
    cutoff: float,
    *,
    bins_per_cutoff: int = 2,
    max_candidates: int = 1 << 25,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every pair within ``cutoff`` as ``(src, dst, shifts)`` int64 tensors on the positions'
    device, sorted by ``dst``.

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

    The edge vector is ``r[src] + shifts @ cell - r[dst]``; periodic images of the
    neighbour beyond the first are found for cells thinner than ``cutoff``.
    """
    dev = positions.device
    i64 = dict(dtype=torch.int64, device=dev)
    pbc = tuple(bool(p) for p in np.broadcast_to(np.asarray(pbc, dtype=bool), (3,)))
    r = positions.detach().to(torch.float64)
    n_atoms = int(r.shape[0])
    empty = torch.zeros(0, **i64)
    if n_atoms == 0:
        return empty, empty, torch.zeros(0, 3, **i64)
    if cell is None:
        cell_np = np.zeros((3, 3))
    elif isinstance(cell, torch.Tensor):
        cell_np = cell.detach().to("cpu", torch.float64).numpy().reshape(3, 3)
    else:
        cell_np = np.asarray(cell, dtype=np.float64).reshape(3, 3)

    basis = _box_basis(cell_np, pbc)
    inv = np.linalg.inv(basis)
    scale = np.linalg.norm(inv, axis=0)  # |Δt_k| ≤ |Δr| · scale_k
    periodic = torch.tensor(pbc, device=dev)
    t = r @ torch.as_tensor(inv, device=dev)
    image = torch.where(periodic, torch.floor(t), torch.zeros_like(t))
    t = t - image
    if not all(pbc):
        lo = torch.where(periodic, torch.zeros_like(t), t).amin(0)
        hi = torch.where(periodic, torch.ones_like(t), t).amax(0)
        lo_np, hi_np = lo.cpu().numpy(), hi.cpu().numpy()
        extent = np.where(pbc, 1.0, np.maximum(hi_np - lo_np, 1e-6 * cutoff))
        scale = scale / extent
        t = (t - lo) / torch.as_tensor(extent, device=dev)
    n_bins, reach = _bins(scale, pbc, float(cutoff), int(bins_per_cutoff), n_atoms)
    n_t = torch.as_tensor(n_bins, **i64)
    b = torch.minimum((t * n_t).to(torch.int64), n_t - 1).clamp_(min=0)  # (N, 3)
    wrapped = r - image @ torch.as_tensor(basis, device=dev)  # positions inside the box

    bin_id = (b[:, 0] * n_t[1] + b[:, 1]) * n_t[2] + b[:, 2]
    order = torch.argsort(bin_id, stable=True)
    counts = torch.bincount(bin_id, minlength=int(np.prod(n_bins)))
    starts = torch.cumsum(counts, 0) - counts

    offsets = torch.tensor(
        list(itertools.product(*[range(-int(m), int(m) + 1) for m in reach])), **i64
    )  # (K, 3)
    cand = b[:, None, :] + offsets[None, :, :]  # (N, K, 3) stencil bins
    img = torch.div(cand, n_t, rounding_mode="floor")
    valid = torch.ones(cand.shape[:2], dtype=torch.bool, device=dev)
    if not all(pbc):  # open directions: bins outside the box do not exist
        open_dirs = ~periodic
        valid = ~((img != 0) & open_dirs).any(-1)
        img = torch.where(open_dirs, torch.zeros_like(img), img)
    w = cand - img * n_t
    nb_id = (w[..., 0] * n_t[1] + w[..., 1]) * n_t[2] + w[..., 2]
    nb_id = torch.where(valid, nb_id, torch.zeros_like(nb_id))
    cnt = torch.where(valid, counts[nb_id], torch.zeros_like(nb_id))  # (N, K)

    per_atom = cnt.sum(1).cpu().numpy()
    rc2 = float(cutoff) ** 2
    basis_t = torch.as_tensor(basis, device=dev)
    out_src, out_dst, out_shift = [], [], []
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
        v = wrapped[j] - wrapped[i] + s.to(torch.float64) @ basis_t
        d2 = (v * v).sum(1)
        keep = torch.nonzero((d2 < rc2) & (d2 > COINCIDENT_R2)).reshape(-1)
        j, i, s = j[keep], i[keep], s[keep]
        # back to the caller's (unwrapped) positions: r_j + S cell - r_i
        shift = s + (image[i] - image[j]).to(torch.int64)
        out_src.append(j)
        out_dst.append(i)
        out_shift.append(shift)
    if not out_src:
        return empty, empty, torch.zeros(0, 3, **i64)
    return torch.cat(out_src), torch.cat(out_dst), torch.cat(out_shift)


def _atom_batches(per_atom: np.ndarray, max_candidates: int):
    """Contiguous atom ranges with at most ``max_candidates`` candidates each (one atom may
    exceed it alone)."""
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
