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
    DENSE = "dense"
    BAND = "band"


#: layout codes passed to kernels as constexpr
LAYOUT_CODE = {RotationLayout.DENSE: 0, RotationLayout.BAND: 1}


def dim_of(lmax: int) -> int:
    return (lmax + 1) ** 2


def band_width(lmax: int) -> int:
    return 3 * dim_of(lmax) - 2


def reduced_dim(lmax: int) -> int:
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
        D = dim_of(self.lmax)
        want = (band_width(self.lmax),) if self.layout is RotationLayout.BAND else (D, D)
        if tuple(self.data.shape[1:]) != want:
            raise LayoutMismatchError(
                f"{self.layout.value} storage for lmax={self.lmax} needs per-edge shape {want}, "
                f"got {tuple(self.data.shape[1:])}"
            )

    def require(self, layout: RotationLayout, consumer: str) -> torch.Tensor:
        """The data tensor, after checking the consumer reads this layout."""
        if self.layout is not layout:
            raise LayoutMismatchError(
                f"{consumer} reads {layout.value} rotations but got {self.layout.value} storage"
            )
        return self.data

    @property
    def n_edges(self) -> int:
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
    """m = 0 rows, i.e. Y_l(û) for l ≤ ``lmax``: (E, (lmax+1)²)."""
    d = dim_of(lmax)
    if storage.layout is RotationLayout.BAND:
        return storage.data[:, :d]
    t = tables(storage.lmax, storage.data.device)
    rows = t["rows"][: lmax + 1][t["deg"][:d]]  # dense row l²+l for each column
    cols = torch.arange(d, device=storage.data.device)
    return storage.data[:, rows, cols]


def rotate_to_local(storage: RotationStorage, x: torch.Tensor, lmax: int) -> torch.Tensor:
    """``x_loc[e, r(l,m)] = Σ_j D[e, l²+l+m, l²+j] x[e, l²+j]`` for l ≤ ``lmax``.

    x : (E, (lmax+1)², C) features already gathered at the edge source. Returns (E, 3·lmax+1, C)
    in m-major reduced order.
    """
    d = dim_of(lmax)
    t = tables(storage.lmax, x.device)
    if storage.layout is RotationLayout.DENSE:
        rows = _reduced_rows(t, storage.lmax, lmax)
        return torch.bmm(storage.data[:, rows, :d], x)
    band = storage.data
    Ds = dim_of(storage.lmax)
    deg = t["deg"][:d]
    E, _, C = x.shape
    m0 = (band[:, :d, None] * x).new_zeros(E, lmax + 1, C)
    m0 = m0.index_add(1, deg, band[:, :d, None] * x)
    if lmax == 0:
        return m0
    xs = x[:, 1:]
    dg = deg[1:] - 1
    mm = xs.new_zeros(E, lmax, C).index_add(1, dg, band[:, Ds : Ds + d - 1, None] * xs)
    mp = xs.new_zeros(E, lmax, C).index_add(
        1, dg, band[:, 2 * Ds - 1 : 2 * Ds - 2 + d, None] * xs
    )
    return torch.cat([m0, mm, mp], dim=1)


def rotate_back(storage: RotationStorage, x_loc: torch.Tensor, lmax: int) -> torch.Tensor:
    """``out[e, l²+j] = Σ_m D[e, l²+l+m, l²+j] x_loc[e, r(l,m)]`` (no ρ rescale): (E, D, C)."""
    d = dim_of(lmax)
    t = tables(storage.lmax, x_loc.device)
    if storage.layout is RotationLayout.DENSE:
        rows = _reduced_rows(t, storage.lmax, lmax)
        return torch.bmm(storage.data[:, rows, :d].transpose(1, 2), x_loc)
    band = storage.data
    Ds = dim_of(storage.lmax)
    deg = t["deg"][:d]
    out = band[:, :d, None] * x_loc[:, deg]
    if lmax == 0:
        return out
    dg = deg[1:] - 1
    rest = band[:, Ds : Ds + d - 1, None] * x_loc[:, lmax + 1 + dg]
    rest = rest + band[:, 2 * Ds - 1 : 2 * Ds - 2 + d, None] * x_loc[:, 2 * lmax + 1 + dg]
    return torch.cat([out[:, :1], out[:, 1:] + rest], dim=1)


def _reduced_rows(t: dict, lmax_storage: int, lmax: int) -> torch.Tensor:
    rows = t["rows"]
    L = lmax_storage
    return torch.cat([rows[: lmax + 1], rows[L + 1 : L + 1 + lmax], rows[2 * L + 1 : 2 * L + 1 + lmax]])
