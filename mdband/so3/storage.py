"""Rotation storage: the ONLY place in mdband that knows Wigner index formulas.

Dense layout: ``D`` (E, D, D), the block-diagonal real Wigner matrix of each edge, rows = local
(edge-frame) index ``l² + l + m``, columns = global index ``l² + j`` (j = m' + l).

Band layout (deepmd-kit's m-major "runs", layout A of band-kernels.md §2.2): only the rows
m ∈ {−1, 0, +1} of every degree block, ``3D − 2`` floats per edge::

    off(l, m, j) = k(m)·(D − 1) + l² + j,   k(0) = 0, k(−1) = 1, k(+1) = 2,   j ∈ [0, 2l]

so ``band[:, :D]`` are the m = 0 rows (the zonal coupling Y_l(û)), ``band[:, D:2D−1]`` the m = −1
rows and ``band[:, 2D−1:]`` the m = +1 rows of degrees l ≥ 1.

Reduced (local) order of SO(2) features, m-major: ``[(l,0) l=0..L] + [(l,−1) l=1..L] +
[(l,+1) l=1..L]`` — ``Dm = 3L + 1`` rows; reduced row of (l, m) is l, L + l, 2L + l.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache

import torch

from mdband.errors import LayoutMismatchError


class RotationLayout(enum.Enum):
    """Storage layout of the per-edge rotations: DENSE (E, D, D) or BAND (E, 3D−2)."""

    DENSE = "dense"
    BAND = "band"


#: layout codes passed to kernels as constexpr
LAYOUT_CODE = {RotationLayout.DENSE: 0, RotationLayout.BAND: 1}


def dim_of(lmax: int) -> int:
    """Return D = (lmax+1)², the packed size of the degrees 0..lmax."""
    return (lmax + 1) ** 2


def band_width(lmax: int) -> int:
    """Return the band's floats per edge, 3D − 2 (the rows m = 0, ±1 of every degree block)."""
    return 3 * dim_of(lmax) - 2


def reduced_dim(lmax: int) -> int:
    """Return Dm = 3·lmax + 1, the number of reduced rows (m = 0, ±1)."""
    return 3 * lmax + 1


def band_offset(lmax: int, l: int, m: int, j: int) -> int:
    """Offset of entry (row (l, m), column l² + j) in a band built for ``lmax``."""
    if not (0 <= j <= 2 * l) or abs(m) > min(l, 1):
        raise ValueError(f"no band entry for l={l}, m={m}, j={j}")
    k = {0: 0, -1: 1, 1: 2}[m]
    return k * (dim_of(lmax) - 1) + l * l + j


@lru_cache(maxsize=32)
def _tables(lmax: int, device_str: str):
    dev = torch.device(device_str)
    D = dim_of(lmax)
    deg = torch.tensor([l for l in range(lmax + 1) for _ in range(2 * l + 1)], device=dev)
    rows = [l * l + l for l in range(lmax + 1)]
    rows += [l * l + l - 1 for l in range(1, lmax + 1)]
    rows += [l * l + l + 1 for l in range(1, lmax + 1)]
    # flat dense index (row * D + col) of every band entry, in band order
    flat = []
    for m in (0, -1, 1):
        for l in range(1 if m else 0, lmax + 1):
            for j in range(2 * l + 1):
                flat.append((l * l + l + m) * D + l * l + j)
    return {
        "deg": deg,  # (D,) degree of each packed column
        "rows": torch.tensor(rows, device=dev),  # (Dm,) dense row of each reduced row
        "flat": torch.tensor(flat, device=dev),  # (3D-2,) dense flat index of band entries
    }


def tables(lmax: int, device) -> dict:
    """Return the cached index tables ``deg``, ``rows`` and ``flat`` of ``lmax`` on ``device``."""
    return _tables(lmax, str(torch.device(device)))


def rotate_inv_rescale(lmax: int, dtype=torch.float64, device="cpu") -> torch.Tensor:
    """ρ per packed column: sqrt((2l+1)/3) for l > 1 (mmax = 1), else 1. Shape (D,)."""
    vals = [
        (((2 * l + 1) / 3.0) ** 0.5 if l > 1 else 1.0)
        for l in range(lmax + 1)
        for _ in range(2 * l + 1)
    ]
    return torch.tensor(vals, dtype=dtype, device=device)


@dataclass(frozen=True)
class RotationStorage:
    """Per-edge rotations in one explicit layout.

    Attributes
    ----------
    layout : RotationLayout
    lmax : int
        Degree the storage was built for; consumers of a lower degree read a prefix of the
        degrees but always index with this ``lmax``.
    data : Tensor
        (E, 3D−2) for BAND, (E, D, D) for DENSE.
    """

    layout: RotationLayout
    lmax: int
    data: torch.Tensor

    def __post_init__(self) -> None:
        """Check the data's per-edge shape against the layout (LayoutMismatchError)."""
        D = dim_of(self.lmax)
        want = (band_width(self.lmax),) if self.layout is RotationLayout.BAND else (D, D)
        if tuple(self.data.shape[1:]) != want:
            raise LayoutMismatchError(
                f"{self.layout.value} storage for lmax={self.lmax} needs per-edge shape {want}, "
                f"got {tuple(self.data.shape[1:])}"
            )

    def require(self, layout: RotationLayout, consumer: str) -> torch.Tensor:
        """Return the data tensor, after checking the consumer reads this layout."""
        if self.layout is not layout:
            raise LayoutMismatchError(
                f"{consumer} reads {layout.value} rotations but got {self.layout.value} storage"
            )
        return self.data

    @property
    def n_edges(self) -> int:
        """Number of edges."""
        return int(self.data.shape[0])


# ---------------------------------------------------------------------------- conversions
def band_to_dense(band: torch.Tensor, lmax: int) -> torch.Tensor:
    """Scatter a band into a dense (E, D, D) matrix holding only the structural entries."""
    D = dim_of(lmax)
    out = band.new_zeros(band.shape[0], D * D)
    out[:, tables(lmax, band.device)["flat"]] = band
    return out.view(-1, D, D)


def dense_to_band(dense: torch.Tensor, lmax: int) -> torch.Tensor:
    """Gather the band rows of a dense (E, D, D) Wigner matrix (tests and references only)."""
    D = dim_of(lmax)
    return dense.reshape(-1, D * D)[:, tables(lmax, dense.device)["flat"]]


# ---------------------------------------------------------------------------- consumers' reads
def zonal(storage: RotationStorage, lmax: int) -> torch.Tensor:
    """Return the m = 0 rows, i.e. Y_l(û) for l ≤ ``lmax``: (E, (lmax+1)²)."""
    d = dim_of(lmax)
    if storage.layout is RotationLayout.BAND:
        return storage.require(RotationLayout.BAND, "zonal")[:, :d]
    data = storage.require(RotationLayout.DENSE, "zonal")
    t = tables(storage.lmax, data.device)
    rows = t["rows"][: lmax + 1][t["deg"][:d]]  # dense row l²+l for each column
    cols = torch.arange(d, device=data.device)
    return data[:, rows, cols]


def degree_block(storage: RotationStorage, l: int) -> torch.Tensor:
    """Rows m = −1, 0, +1 of degree block l as an (E, 3, 2l+1) matrix ((E, 1, 1) for l = 0).

    Both layouts yield the same numbers, so consumers built on it do identical arithmetic
    whatever the storage.
    """
    lo, w = l * l, 2 * l + 1
    if storage.layout is RotationLayout.BAND:
        data = storage.require(RotationLayout.BAND, "degree_block")
        if l == 0:
            return data[:, :1, None]
        s = dim_of(storage.lmax) - 1
        return torch.stack(
            [
                data[:, s + lo : s + lo + w],
                data[:, lo : lo + w],
                data[:, 2 * s + lo : 2 * s + lo + w],
            ],
            dim=1,
        )
    data = storage.require(RotationLayout.DENSE, "degree_block")
    if l == 0:
        return data[:, :1, :1]
    return data[:, lo + l - 1 : lo + l + 2, lo : lo + w]


#: devices on which the torch path applies a per-edge block-structured map (the rotations here,
#: the radial degree mixer of ``model/so2.py``) as one dense (E, rows, cols) product instead of
#: one small product per block. On the CPU ATen runs a batched product of fewer than 400
#: multiply-adds per matrix (l = 1 at C = 32: 3 × 3 × 32) in a plain loop; the dense product,
#: zeros and all, goes to the BLAS and is faster on one thread
#: (``benchmarks/one_product.py``, BENCHMARKS.md "2026-12-05"). CUDA keeps the per-block
#: products (not timed there).
ONE_PRODUCT_DEVICES = frozenset({"cpu"})


def row_matrix(storage: RotationStorage, lmax: int, consumer: str = "row_matrix") -> torch.Tensor:
    """Build the row matrix W (E, Dm, D) of the rotations, zero off the band.

    ``W[e, r(l,m), l²+j] = D[e, l²+l+m, l²+j]`` for l ≤ ``lmax``. Differentiable; band and dense
    storages give the same W exactly.
    """
    data = storage.require(storage.layout, consumer)
    t = entry_table(storage.layout, storage.lmax, lmax, data.device)
    E = data.shape[0]
    dm, d = reduced_dim(lmax), dim_of(lmax)
    vals = data.reshape(E, per_edge_size(storage.layout, storage.lmax))[:, t["pos"]]
    w = data.new_zeros(E, dm * d).index_copy(1, t["row"] * d + t["col"], vals)
    return w.view(E, dm, d)


def rotate_to_local(storage: RotationStorage, x: torch.Tensor, lmax: int) -> torch.Tensor:
    """``x_loc[e, r(l,m)] = Σ_j D[e, l²+l+m, l²+j] x[e, l²+j]`` for l ≤ ``lmax``.

    x : (E, (lmax+1)², C) features already gathered at the edge source. Returns (E, 3·lmax+1, C)
    in m-major reduced order. One (E, 3, 2l+1) × (E, 2l+1, C) product per degree, or one
    :func:`row_matrix` product on :data:`ONE_PRODUCT_DEVICES`.
    """
    if x.device.type in ONE_PRODUCT_DEVICES:
        return torch.bmm(row_matrix(storage, lmax, "rotate_to_local"), x)
    m0, mm, mp = [], [], []
    parts = torch.split(x, [2 * l + 1 for l in range(lmax + 1)], dim=1)
    for l in range(lmax + 1):
        y = torch.bmm(degree_block(storage, l), parts[l])
        if l == 0:
            m0.append(y[:, 0])
        else:
            mm.append(y[:, 0])
            m0.append(y[:, 1])
            mp.append(y[:, 2])
    return torch.stack(m0 + mm + mp, dim=1)


def rotate_back(
    storage: RotationStorage, x_loc: torch.Tensor, lmax: int, scale: torch.Tensor | None = None
) -> torch.Tensor:
    """Rotate the reduced rows ``x_loc`` back to the global frame: (E, D, C).

    ``out[e, l²+j] = s[l²+j] Σ_m D[e, l²+l+m, l²+j] x_loc[e, r(l,m)]``, with ``s`` the per-row
    ``scale`` (D,) (none: 1; the model's ρ rescale). One product per degree, or one
    :func:`row_matrix` product on :data:`ONE_PRODUCT_DEVICES` (the scale folded into it).
    """
    L = lmax
    if x_loc.device.type in ONE_PRODUCT_DEVICES:
        wt = row_matrix(storage, L, "rotate_back").transpose(1, 2)
        return torch.bmm(wt if scale is None else wt * scale[:, None], x_loc)
    outs = []
    for l in range(L + 1):
        blk = degree_block(storage, l)
        if l == 0:
            xl = x_loc[:, :1]
        else:
            xl = torch.stack([x_loc[:, L + l], x_loc[:, l], x_loc[:, 2 * L + l]], dim=1)
        outs.append(torch.bmm(blk.transpose(1, 2), xl))
    out = torch.cat(outs, dim=1)
    return out if scale is None else out * scale[:, None]


# ---------------------------------------------------------------------------- kernel index tables
#: slot order of the band rows inside a degree block, used by every table below
SLOT_M = (0, -1, 1)
#: slot axis of the kernel tables, padded to a power of two (slot 3 is always empty)
KERNEL_SLOTS = 4


def reduced_index(lmax: int) -> list[tuple[int, int]]:
    """(l, m) of every reduced (local) row of degree ``lmax``, m-major: row r ↔ entry r."""
    rows = [(l, 0) for l in range(lmax + 1)]
    rows += [(l, -1) for l in range(1, lmax + 1)]
    rows += [(l, 1) for l in range(1, lmax + 1)]
    return rows


def _reduced_row(lmax: int, l: int, m: int) -> int:
    return {0: l, -1: lmax + l, 1: 2 * lmax + l}[m]


def _check_degrees(layout: RotationLayout, lmax_storage: int, lmax: int) -> None:
    if not isinstance(layout, RotationLayout):
        raise LayoutMismatchError(f"unknown rotation layout {layout!r}")
    if not 0 <= lmax <= lmax_storage:
        raise LayoutMismatchError(
            f"a {layout.value} storage built for lmax={lmax_storage} cannot serve a consumer of "
            f"degree {lmax}"
        )


@lru_cache(maxsize=128)
def _entries(layout: RotationLayout, lmax_storage: int, lmax: int) -> tuple:
    """Every structural entry (l, m, j) of degree ≤ ``lmax``, in band order of ``lmax``.

    Per entry: (reduced row of ``lmax``, packed column l²+j, flat per-edge position in the
    storage's data, kernel index pair (a, b) with address ``a·stride(1) + b·stride(2)``).
    """
    _check_degrees(layout, lmax_storage, lmax)
    Ds = dim_of(lmax_storage)
    out = []
    for m in SLOT_M:
        for l in range(1 if m else 0, lmax + 1):
            for j in range(2 * l + 1):
                if layout is RotationLayout.BAND:
                    a = band_offset(lmax_storage, l, m, j)
                    pos, b = a, 0
                else:
                    a, b = l * l + l + m, l * l + j
                    pos = a * Ds + b
                out.append((_reduced_row(lmax, l, m), l * l + j, pos, a, b, l, m))
    return tuple(out)


def entry_table(layout: RotationLayout, lmax_storage: int, lmax: int, device) -> dict:
    """Index vectors over the 3D−2 structural entries of degree ≤ ``lmax`` (torch references).

    Returns a dict of int64 tensors of length P = 3(lmax+1)² − 2: ``row`` (reduced row of
    ``lmax``), ``col`` (packed column l²+j), ``pos`` (flat index into ``data.reshape(E, -1)`` of a
    contiguous storage of ``layout`` built for ``lmax_storage``), ``deg`` and ``m``.
    """
    return _entry_table(layout, lmax_storage, lmax, str(torch.device(device)))


@lru_cache(maxsize=128)
def _entry_table(layout, lmax_storage, lmax, device_str):
    ent = _entries(layout, lmax_storage, lmax)
    dev = torch.device(device_str)
    cols = list(zip(*ent))

    def t(i):
        return torch.tensor(cols[i], dtype=torch.long, device=dev)

    return {"row": t(0), "col": t(1), "pos": t(2), "deg": t(5), "m": t(6)}


def per_edge_size(layout: RotationLayout, lmax_storage: int) -> int:
    """Return the number of floats per edge of a storage (3D−2 for BAND, D² for DENSE)."""
    if layout is RotationLayout.BAND:
        return band_width(lmax_storage)
    return dim_of(lmax_storage) ** 2


def storage_shape(layout: RotationLayout, lmax_storage: int, n_edges: int) -> tuple:
    """Shape of the data tensor of a storage (also the shape of its cotangent)."""
    D = dim_of(lmax_storage)
    if layout is RotationLayout.BAND:
        return (n_edges, band_width(lmax_storage))
    return (n_edges, D, D)


def kernel_strides(layout: RotationLayout, data: torch.Tensor) -> tuple[int, int, int]:
    """(edge stride, stride of index a, stride of index b) of a storage's data for the kernels."""
    if layout is RotationLayout.BAND:
        return data.stride(0), data.stride(1), 0
    return data.stride(0), data.stride(1), data.stride(2)


def kernel_tables(layout: RotationLayout, lmax_storage: int, lmax: int, device) -> dict:
    """Build the padded per-degree-block tables for the Triton consumers of a storage.

    Block b holds degree l = b; slot s ∈ {0, 1, 2} is its band row m = SLOT_M[s] (the slot axis is
    padded to SP = 4 lanes, slot 3 is always empty); lane j ∈ [0, JP) is the column l² + j
    (JP = next power of two ≥ 2·lmax + 1). Entries:

    * ``col``  (NB, JP) int32: packed column l²+j, −1 on padding lanes;
    * ``row``  (NB, SP) int32: reduced row of ``lmax`` of slot s, −1 when the block has no such row;
    * ``ent_a``, ``ent_b`` (NB, SP, JP) int32: the entry sits at
      ``data[e, a]`` (BAND, stride(2) unused) or ``data[e, a, b]`` (DENSE); 0 on padding.

    Plus ``jp``, ``sp`` and ``nblk`` (ints). Kernels address the storage only through these tables.
    """
    return _kernel_tables(layout, lmax_storage, lmax, str(torch.device(device)))


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


@lru_cache(maxsize=128)
def _kernel_tables(layout, lmax_storage, lmax, device_str):
    ent = _entries(layout, lmax_storage, lmax)
    nb, jp, sp = lmax + 1, _next_pow2(2 * lmax + 1), KERNEL_SLOTS
    col = [[-1] * jp for _ in range(nb)]
    row = [[-1] * sp for _ in range(nb)]
    ea = [[[0] * jp for _ in range(sp)] for _ in range(nb)]
    eb = [[[0] * jp for _ in range(sp)] for _ in range(nb)]
    for r, c, _pos, a, b, l, m in ent:
        s = SLOT_M.index(m)
        j = c - l * l
        col[l][j] = c
        row[l][s] = r
        ea[l][s][j] = a
        eb[l][s][j] = b
    dev = torch.device(device_str)

    def t(v):
        return torch.tensor(v, dtype=torch.int32, device=dev)

    return {
        "col": t(col),
        "row": t(row),
        "ent_a": t(ea),
        "ent_b": t(eb),
        "jp": jp,
        "sp": sp,
        "nblk": nb,
    }
