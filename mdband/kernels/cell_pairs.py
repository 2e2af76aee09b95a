"""cell_pairs: the cell list's candidate pairs filtered to the cutoff, one program per atom.

Inputs (N atoms, K stencil bins, B bins; :func:`mdband.cell_list.cell_list_edges` builds them)::

    wrapped  (N, 3) float64   positions wrapped into the box
    bins     (N, 3) int64     each atom's bin along the three box rows
    order    (N,)   int64     atoms sorted by bin id (stable: atom order inside a bin)
    starts   (B,)   int64     bin k holds order[starts[k] : starts[k] + counts[k]]
    counts   (B,)   int64
    offsets  (K, 3) int64     the stencil (bin offsets one cutoff can span)
    n_bins (3,) ints; periodic (3,) bools; basis (3, 3) float64 (box rows)

Output: ``(src, dst, shift)`` int64, every candidate j of atom i (the atoms of the bins
``bins[i] + offsets[k]``, wrapped along periodic rows, clipped along open ones) with
``1e-10 < |v|² < rc²`` for ``v = wrapped[j] − wrapped[i] + img_k @ basis``; ``shift`` is the
image ``img_k`` of the wrapped neighbour (the caller moves it back to unwrapped positions).
Order: by i, then stencil slot k, then bin order — the order of the torch path
(:func:`mdband.cell_list.candidate_pairs_reference`), so both give the same tensors.

Two passes share the candidate code (:func:`_atom_slots`, :func:`_tile`): ``count`` writes
each atom's number of pairs, a cumulative sum gives the rows, one host synchronisation reads the
total, ``fill`` writes the pairs. A program holds its atom's BLOCK_SLOTS stencil slots (K padded
to a power of two) and walks them as (BLOCK_SLOTS, BW) tiles (BW = BLOCK_CANDIDATES, the tuning
table's ``cell_pairs.width``), candidates w0 .. w0 + BW − 1 of every slot's bin
(a bin holds ≈ 5 atoms at 2 bins per cutoff in condensed matter; fuller bins take more steps);
``fill`` counts each slot's pairs first so that rows follow slot order. No (N, K) or
per-candidate tensor exists in memory: the torch path needs about 25 kernels and
(candidates,)-sized index tensors (≈ 100 B per candidate, 2.4 M candidates at 4,096 atoms of
diamond, rc 6 Å); here each candidate costs a few gathers from L2 (``order``, three
coordinates) per tile visit, three visits in all. Distances in
float64 as in the torch path: a pair exactly at the cutoff may differ by rounding of the image
vector (an FMA order), nothing else. Integer outputs: no gradient, so no autograd or
``triton_op`` registration (the output size is data-dependent: the list is never traced).
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.kernels import tuning

#: largest stencil the kernels take (thin cells can need more bins: the torch path then)
MAX_STENCIL = 1024

if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    @triton.jit
    def _atom_slots(
        atom,
        bins_ptr,
        offsets_ptr,
        starts_ptr,
        counts_ptr,
        basis_ptr,
        n_stencil,
        bins_x,
        bins_y,
        bins_z,
        BLOCK_SLOTS: tl.constexpr,
        PERIODIC_X: tl.constexpr,
        PERIODIC_Y: tl.constexpr,
        PERIODIC_Z: tl.constexpr,
    ):
        """Return the atom's stencil slots (BLOCK_SLOTS,).

        Candidates per slot, the slot's first index into ``order``, its image (ix, iy, iz) and image
        vector (vx, vy, vz) = img @ basis; periodic rows wrap (the image counts the wraps), open
        rows clip (no candidates).
        """
        i = atom
        nx, ny, nz = bins_x, bins_y, bins_z
        kk = tl.arange(0, BLOCK_SLOTS)
        valid = kk < n_stencil
        cx = tl.load(bins_ptr + 3 * i) + tl.load(offsets_ptr + 3 * kk, mask=valid, other=0)
        cy = tl.load(bins_ptr + 3 * i + 1) + tl.load(offsets_ptr + 3 * kk + 1, mask=valid, other=0)
        cz = tl.load(bins_ptr + 3 * i + 2) + tl.load(offsets_ptr + 3 * kk + 2, mask=valid, other=0)
        # floor division of small integers, exact in float64 (C-style // truncates)
        ix = tl.floor(cx.to(tl.float64) / nx).to(tl.int64)
        iy = tl.floor(cy.to(tl.float64) / ny).to(tl.int64)
        iz = tl.floor(cz.to(tl.float64) / nz).to(tl.int64)
        if not PERIODIC_X:
            valid = valid & (ix == 0)
            ix = ix * 0
        if not PERIODIC_Y:
            valid = valid & (iy == 0)
            iy = iy * 0
        if not PERIODIC_Z:
            valid = valid & (iz == 0)
            iz = iz * 0
        nb = ((cx - ix * nx) * ny + (cy - iy * ny)) * nz + (cz - iz * nz)  # bin id, z fastest
        nb = tl.where(valid, nb, 0)
        cnt = tl.where(valid, tl.load(counts_ptr + nb, mask=valid, other=0), 0)
        first = tl.load(starts_ptr + nb, mask=valid, other=0)
        fx, fy, fz = ix.to(tl.float64), iy.to(tl.float64), iz.to(tl.float64)
        vx = fx * tl.load(basis_ptr) + fy * tl.load(basis_ptr + 3) + fz * tl.load(basis_ptr + 6)
        vy = fx * tl.load(basis_ptr + 1) + fy * tl.load(basis_ptr + 4) + fz * tl.load(basis_ptr + 7)
        vz = fx * tl.load(basis_ptr + 2) + fy * tl.load(basis_ptr + 5) + fz * tl.load(basis_ptr + 8)
        return cnt, first, ix, iy, iz, vx, vy, vz

    @triton.jit
    def _tile(
        atom,
        w0,
        cnt,
        first,
        image,
        positions_ptr,
        order_ptr,
        cutoff_sq,
        min_dist_sq,
        BLOCK_CANDIDATES: tl.constexpr,
    ):
        """Return the (BLOCK_SLOTS, BLOCK_CANDIDATES) tile of candidates of every slot of the atom.

        Candidates w0 .. w0 + BW − 1 of every slot: the neighbour j and keep (|v|² in (min_dist_sq,
        cutoff_sq), v = pos[j] − pos[atom] + the slot's image vector ``image`` = (vx, vy, vz)).
        """
        i = atom
        vx, vy, vz = image
        ww = w0 + tl.arange(0, BLOCK_CANDIDATES)
        m = ww[None, :] < cnt[:, None]
        j = tl.load(order_ptr + first[:, None] + ww[None, :], mask=m, other=0)
        pos_ptr = positions_ptr
        dx = tl.load(pos_ptr + 3 * j, mask=m, other=0.0) - tl.load(pos_ptr + 3 * i) + vx[:, None]
        dy = tl.load(pos_ptr + 3 * j + 1, mask=m, other=0.0) - tl.load(pos_ptr + 3 * i + 1)
        dz = tl.load(pos_ptr + 3 * j + 2, mask=m, other=0.0) - tl.load(pos_ptr + 3 * i + 2)
        dy = dy + vy[:, None]
        dz = dz + vz[:, None]
        d2 = dx * dx + dy * dy + dz * dz
        return j, m & (d2 < cutoff_sq) & (d2 > min_dist_sq)

    @triton.jit
    def cell_pairs_kernel(
        # pointers: the wrapped positions and the bins (module docstring), outputs
        positions_ptr,
        bins_ptr,
        order_ptr,
        starts_ptr,
        counts_ptr,
        offsets_ptr,
        basis_ptr,
        first_row_ptr,
        n_pairs_ptr,
        src_ptr,
        dst_ptr,
        shift_ptr,
        # sizes and the cutoff
        n_stencil,
        bins_x,
        bins_y,
        bins_z,
        cutoff_sq: tl.float64,
        min_dist_sq: tl.float64,
        # meta-parameters
        FILL: tl.constexpr,
        BLOCK_SLOTS: tl.constexpr,
        BLOCK_CANDIDATES: tl.constexpr,
        PERIODIC_X: tl.constexpr,
        PERIODIC_Y: tl.constexpr,
        PERIODIC_Z: tl.constexpr,
    ):
        """Count (FILL = 0) or write (FILL = 1) the pairs of atom i = program_id(0).

        FILL = 0: n_pairs[i] = atom i's pairs. FILL = 1: its pairs at rows first_row[i]... of src,
        dst, shift (first_row = exclusive cumulative sum of n_pairs), slot by slot in bin order.
        """
        i = tl.program_id(0).to(tl.int64)
        cutoff_sq = cm.scalar_as(cutoff_sq, positions_ptr.dtype.element_ty)
        min_dist_sq = cm.scalar_as(min_dist_sq, positions_ptr.dtype.element_ty)
        cnt, first, ix, iy, iz, vx, vy, vz = _atom_slots(
            i,
            bins_ptr,
            offsets_ptr,
            starts_ptr,
            counts_ptr,
            basis_ptr,
            n_stencil,
            bins_x,
            bins_y,
            bins_z,
            BLOCK_SLOTS,
            PERIODIC_X,
            PERIODIC_Y,
            PERIODIC_Z,
        )
        image = (vx, vy, vz)
        widest = tl.max(cnt, 0)
        per_slot = cnt * 0  # pairs per slot
        for w0 in range(0, widest, BLOCK_CANDIDATES):
            _, keep = _tile(
                i,
                w0,
                cnt,
                first,
                image,
                positions_ptr,
                order_ptr,
                cutoff_sq,
                min_dist_sq,
                BLOCK_CANDIDATES,
            )
            per_slot += tl.sum(keep.to(tl.int64), 1)
        if FILL:
            # each slot's rows start after the pairs of the slots before it
            at0 = tl.load(first_row_ptr + i) + tl.cumsum(per_slot, 0) - per_slot
            for w0 in range(0, widest, BLOCK_CANDIDATES):
                j, keep = _tile(
                    i,
                    w0,
                    cnt,
                    first,
                    image,
                    positions_ptr,
                    order_ptr,
                    cutoff_sq,
                    min_dist_sq,
                    BLOCK_CANDIDATES,
                )
                kept = keep.to(tl.int64)
                at = at0[:, None] + tl.cumsum(kept, 1) - kept
                tl.store(src_ptr + at, j, mask=keep)
                tl.store(dst_ptr + at, i + j * 0, mask=keep)
                tl.store(shift_ptr + 3 * at, ix[:, None] + j * 0, mask=keep)
                tl.store(shift_ptr + 3 * at + 1, iy[:, None] + j * 0, mask=keep)
                tl.store(shift_ptr + 3 * at + 2, iz[:, None] + j * 0, mask=keep)
                at0 += tl.sum(kept, 1)
        else:
            tl.store(n_pairs_ptr + i, tl.sum(per_slot, 0))


def applies(device, n_stencil: int) -> bool:
    """Tell whether :func:`cell_pairs` runs for this device and stencil size.

    It does when the tuning table's ``cell_pairs.kernels`` allows it, Triton runs (on CUDA or a
    forced interpreter) and the stencil is ≤ :data:`MAX_STENCIL`.
    """
    if tuning.current().cell_pairs.kernels == "torch" or n_stencil > MAX_STENCIL:
        return False
    return cm.select_backend(device, torch.float64) == "triton"


def cell_pairs(
    wrapped,
    bins,
    order,
    starts,
    counts,
    offsets,
    n_bins,
    periodic,
    basis,
    rc2: float,
    r2_min: float,
):
    """Return ``(src, dst, shift)`` of the module docstring from the kernels' two passes.

    One host synchronisation: the number of pairs. ``n_bins``: 3 ints (bin id = (bx·ny + by)·nz +
    bz); ``periodic``: 3 bools; tensors as in the module docstring, on one device.
    """
    dev = wrapped.device
    n = int(wrapped.shape[0])
    i64 = dict(dtype=torch.int64, device=dev)
    K = int(offsets.shape[0])
    args = (
        wrapped.contiguous(),
        bins.contiguous(),
        order.contiguous(),
        starts.contiguous(),
        counts.contiguous(),
        offsets.contiguous(),
        basis.contiguous(),
    )
    scalars = (K, *(int(v) for v in n_bins), float(rc2), float(r2_min))
    launch = tuning.current().cell_pairs
    meta = dict(
        BLOCK_SLOTS=cm.next_pow2(max(K, 2)),
        BLOCK_CANDIDATES=launch.width,
        PERIODIC_X=bool(periodic[0]),
        PERIODIC_Y=bool(periodic[1]),
        PERIODIC_Z=bool(periodic[2]),
        num_warps=launch.warps,
    )
    per_atom = torch.empty(n, **i64)
    dummy = per_atom[:0]
    # not inside a triton_op: launched directly
    cell_pairs_kernel[(n,)](
        *args, dummy, per_atom, dummy, dummy, dummy, *scalars, FILL=False, **meta
    )
    rows = torch.cumsum(per_atom, 0)
    total = int(rows[-1]) if n else 0  # the one synchronisation
    src, dst = torch.empty(total, **i64), torch.empty(total, **i64)
    shift = torch.empty(total, 3, **i64)
    if total:
        start_rows = rows - per_atom
        cell_pairs_kernel[(n,)](
            *args, start_rows, per_atom, src, dst, shift, *scalars, FILL=True, **meta
        )
    return src, dst, shift
