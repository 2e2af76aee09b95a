"""Shared plumbing of the mdband kernels: Triton import, backend dispatch, CSR, storage access.

Dispatch rule (every op): CUDA tensors of a kernel dtype → Triton; anything else → the torch
reference. :func:`force_backend` overrides it for tests (``"triton"`` on CPU needs
``TRITON_INTERPRET=1``) and for the GPU check script (``"reference"`` on CUDA).
"""

from __future__ import annotations

import contextlib
import os

import torch

from mdband.errors import LayoutMismatchError
from mdband.so3 import storage as st

try:  # pragma: no cover - exercised only without triton
    import triton
    import triton.language as tl

    TRITON_AVAILABLE = True
except ImportError:  # pragma: no cover
    triton = None
    tl = None
    TRITON_AVAILABLE = False

#: dtypes the Triton kernels are compiled for (float64 always exact; float32 exact FMAs, or
#: tf32x3 tl.dot products where the tuning table picks them, which is float32's default on
#: GPUs with TF32 tensor cores)
KERNEL_DTYPES = (torch.float32, torch.float64)

BACKENDS = ("triton", "reference")

#: launcher of Triton kernels inside ``torch.library.triton_op`` bodies
# Launch kernels through ``wrap`` only inside a ``triton_op`` (whose backend turns the wrapper's
# tracing off): called outside one, torch traces each launch and keeps its non-tensor arguments
# (TensorDescriptors, and so their tensors) in its kernel side table for good (a benchmark
# calling the linear kernel's launcher directly ran out of GPU memory after ~200 launches).
wrap = torch.library.wrap_triton

#: process-wide override (not thread-local: autograd runs CUDA backwards on its own threads)
_FORCED: list = [None]


def interpret_mode() -> bool:
    """Tell whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def triton_available(device) -> bool:
    """Triton importable and the device can run it (CUDA, or any device when interpreting)."""
    if not TRITON_AVAILABLE:
        return False
    dev = torch.device(device)
    return dev.type == "cuda" or interpret_mode()


def forced_backend() -> str | None:
    """Return the backend pinned by :func:`force_backend`, or None when dispatch is automatic."""
    return _FORCED[0]


@contextlib.contextmanager
def force_backend(name: str | None):
    """Pin every mdband op to ``"triton"`` or ``"reference"`` inside the block (None = auto)."""
    if name is not None and name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or None, got {name!r}")
    old = _FORCED[0]
    _FORCED[0] = name
    try:
        yield
    finally:
        _FORCED[0] = old


def force_triton():
    """Shorthand of ``force_backend("triton")`` used by the tests."""
    return force_backend("triton")


def select_backend(device, dtype, triton_ok: bool = True) -> str:
    """Return the backend an op uses for tensors on ``device`` of ``dtype``.

    ``triton_ok`` is the op's own kernel predicate (shape/option limits of its kernel).
    """
    dev = torch.device(device)
    forced = forced_backend()
    if forced == "reference":
        return "reference"
    if forced == "triton":
        if not triton_available(dev):
            raise RuntimeError(
                f"force_backend('triton') on {dev.type} needs Triton and (CUDA or "
                "TRITON_INTERPRET=1)"
            )
        if not triton_ok or dtype not in KERNEL_DTYPES:
            raise RuntimeError(f"no Triton kernel for this call (dtype {dtype})")
        return "triton"
    if triton_ok and dev.type == "cuda" and TRITON_AVAILABLE and dtype in KERNEL_DTYPES:
        return "triton"
    return "reference"


def chosen_backend(op: str, decision: tuple[str | None, str]) -> str:
    """Return the backend name of an op's ``backend(...)`` decision.

    Raises ValueError naming ``op`` when no backend applies (the decision's reason says why).
    """
    name, why = decision
    if name is None:
        raise ValueError(f"{op}: {why}")
    return name


def has_tf32_cores(device) -> bool:
    """Tell whether tl.dot's "tf32x3" runs on tensor cores on ``device``.

    True for CUDA compute capability 8.0 or newer, or the interpreter (which emulates it). The one
    predicate of every "auto" choice of a tf32x3 kernel.
    """
    dev = torch.device(device)
    if interpret_mode() and dev.type != "cuda":
        return True
    return dev.type == "cuda" and torch.cuda.get_device_capability(dev) >= (8, 0)


def has_tma(device) -> bool:
    """Tell whether the SO(2) linear kernels run on ``device``.

    They need TMA and TF32 tensor cores, compute capability 9.0 or newer (the interpreter emulates
    both); older GPUs take the exact cuBLAS path.
    """
    dev = torch.device(device)
    if dev.type != "cuda":
        return True
    return torch.cuda.get_device_capability(dev) >= (9, 0)


def dot_precision(choice: str, device) -> str:
    """Return tl.dot's input precision for a launch setting ``choice``.

    "tf32x3" or "ieee" as given, "auto" → "tf32x3" where :func:`has_tf32_cores`, else "ieee".
    """
    if choice not in ("auto", "tf32x3", "ieee"):
        raise ValueError(f"dot precision {choice!r} is not one of auto, tf32x3, ieee")
    if choice == "auto":
        return "tf32x3" if has_tf32_cores(device) else "ieee"
    return choice


def has_no_items(n) -> bool:
    """Tell whether ``n`` is a concrete zero size (never guards a symbolic size)."""
    return type(n) is int and n == 0


def next_pow2(n: int) -> int:
    """Return the smallest power of two ≥ ``n`` (1 for n ≤ 1)."""
    p = 1
    while p < n:
        p *= 2
    return p


def dot_width(n: int) -> int:
    """Tile width of ``n`` for tl.dot: the next power of two, at least 16."""
    return max(16, next_pow2(n))


def csr(index: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR of edges grouped by ``index`` (E,) into ``n`` segments: (perm (E,), row_ptr (n+1,)).

    ``perm`` lists the edges of segment k in ``perm[row_ptr[k]:row_ptr[k+1]]``, in increasing
    edge order (stable sort), so the reductions over a segment are deterministic.
    """
    index = index.to(torch.int64)
    perm = torch.argsort(index, stable=True)
    bounds = torch.arange(n + 1, device=index.device, dtype=torch.int64)
    row_ptr = torch.searchsorted(index[perm], bounds)
    return perm, row_ptr


def unpack_storage(storage, consumer: str) -> tuple[torch.Tensor, int, int]:
    """Return (data, layout code, storage lmax) of a RotationStorage, read through ``require``."""
    layout = storage.layout
    if layout not in st.LAYOUT_CODE:
        raise LayoutMismatchError(f"{consumer}: unknown rotation layout {layout!r}")
    data = storage.require(layout, consumer)
    want = st.storage_shape(layout, storage.lmax, data.shape[0])
    if tuple(data.shape) != tuple(want):
        raise LayoutMismatchError(
            f"{consumer}: {layout.value} storage for lmax={storage.lmax} needs shape "
            f"{tuple(want[1:])} per edge, got {tuple(data.shape[1:])}"
        )
    return data, st.LAYOUT_CODE[layout], int(storage.lmax)


def check_dtypes(consumer: str, **tensors) -> None:
    """All given (non-None) tensors share one floating dtype and one device."""
    items = [(k, t) for k, t in tensors.items() if t is not None]
    k0, t0 = items[0]
    for k, t in items[1:]:
        if t.dtype != t0.dtype or t.device != t0.device:
            raise ValueError(
                f"{consumer}: {k} is {t.dtype} on {t.device} but {k0} is {t0.dtype} on "
                f"{t0.device}; all inputs must share dtype and device"
            )


def layout_of(code: int) -> st.RotationLayout:
    """Return the rotation layout of a layout ``code`` (LayoutMismatchError for an unknown code)."""
    for layout, c in st.LAYOUT_CODE.items():
        if c == code:
            return layout
    raise LayoutMismatchError(f"unknown rotation layout code {code}")


def check_rot(rot: torch.Tensor, code: int, rot_lmax: int, lmax: int, consumer: str) -> None:
    """Validate the raw (data, code, lmax) triple an op receives."""
    layout = layout_of(code)
    want = st.storage_shape(layout, rot_lmax, rot.shape[0])
    if tuple(rot.shape) != tuple(want):
        raise LayoutMismatchError(
            f"{consumer}: {layout.value} rotations for lmax={rot_lmax} need shape {tuple(want)}, "
            f"got {tuple(rot.shape)}"
        )
    if not 0 <= lmax <= rot_lmax:
        raise LayoutMismatchError(
            f"{consumer}: storage built for lmax={rot_lmax} cannot serve degree {lmax}"
        )


def kernel_tables(code: int, rot_lmax: int, lmax: int, device) -> dict:
    """storage.kernel_tables for a layout code (cached per device)."""
    return st.kernel_tables(layout_of(code), rot_lmax, lmax, device)


def row_matrix(rot: torch.Tensor, code: int, rot_lmax: int, lmax: int) -> torch.Tensor:
    """Return W (E, Dm, D) of a storage's data ``rot``.

    See :func:`mdband.so3.storage.row_matrix`; differentiable in ``rot``; band and dense storages
    give the same W exactly.
    """
    return st.row_matrix(st.RotationStorage(layout_of(code), rot_lmax, rot), lmax)


def rot_grad_from_matrix(gw: torch.Tensor, code: int, rot_lmax: int, lmax: int) -> torch.Tensor:
    """Cotangent of a storage's data from the cotangent of :func:`row_matrix` (reference)."""
    layout = layout_of(code)
    t = st.entry_table(layout, rot_lmax, lmax, gw.device)
    E = gw.shape[0]
    d = st.dim_of(lmax)
    g = gw.new_zeros(E, st.per_edge_size(layout, rot_lmax))
    g[:, t["pos"]] = gw.reshape(E, -1)[:, t["row"] * d + t["col"]]
    return g.view(st.storage_shape(layout, rot_lmax, E))


def rot_args(rot: torch.Tensor, code: int) -> tuple[int, int, int]:
    """Return (edge stride, stride of index a, stride of index b) of ``rot`` for the kernels."""
    return st.kernel_strides(layout_of(code), rot)


def rot_cotangent(rot: torch.Tensor, code: int, rot_lmax: int, lmax: int) -> torch.Tensor:
    """Return a buffer of a storage cotangent that a kernel fills.

    Uninitialised when the kernel writes every entry (a band built for this degree), else zeros
    (dense, or a band of higher lmax); contiguous either way.
    """
    full = code == st.LAYOUT_CODE[st.RotationLayout.BAND] and lmax == rot_lmax
    return rot.new_empty(rot.shape) if full else rot.new_zeros(rot.shape)


# ---------------------------------------------------------------------------- Triton helpers
# (a nested jit call costs about a millisecond in the CPU interpreter: kernels call these per
# program or per degree block, never per element)
if TRITON_AVAILABLE:
    #: layout code of the band (the only layout whose entries need one index per edge)
    BAND_CODE = tl.constexpr(st.LAYOUT_CODE[st.RotationLayout.BAND])
    #: combine function of ``tl.sum``; kernels call ``tl.reduce(x, axis, SUM)`` directly, which is
    #: the same reduction on the GPU and skips a nested jit call (milliseconds) when interpreting.
    #: Beware: Triton rewrites a product of two broadcast 2-d tiles summed over the middle axis,
    #: ``sum(a[:, :, None] * b[None, :, :], 1)``, into a dot at its default fp32 precision (TF32,
    #: ≈ 1e-3 relative, seen on a GPU once a has 16 rows): the kernels keep such products
    #: below 16 rows (band slots) or call tl.dot with an explicit precision
    SUM = tl.standard._sum_combine

    @triton.jit
    def block_tables(
        col_table_ptr, row_table_ptr, block, COL_LANES: tl.constexpr, SLOT_LANES: tl.constexpr
    ):
        """Load the tables of degree block ``block`` of :func:`kernel_tables`.

        Returns the packed columns col (COL_LANES,) and their mask jm, reduced rows (SLOT_LANES,)
        and their mask sv, the (SLOT_LANES, COL_LANES) entry mask m2 and table index tix.
        """
        jj = tl.arange(0, COL_LANES)
        ss = tl.arange(0, SLOT_LANES)
        col = tl.load(col_table_ptr + block * COL_LANES + jj)
        rows = tl.load(row_table_ptr + block * SLOT_LANES + ss)
        jm = col >= 0
        sv = rows >= 0
        m2 = sv[:, None] & jm[None, :]
        tix = (block * SLOT_LANES + ss)[:, None] * COL_LANES + jj[None, :]
        return col, jm, rows, sv, m2, tix

    @triton.jit
    def entry_index(entry_a_ptr, entry_b_ptr, table_index, mask, LAYOUT: tl.constexpr):
        """Load (ia, ib), the storage indices of the rotation entries at ``table_index``.

        An entry sits at ``ia·stride_a + ib·stride_b`` of its edge's row; ib = 0 for the band, whose
        entries need one index.
        """
        ia = tl.load(entry_a_ptr + table_index, mask=mask, other=0).to(tl.int64)
        if LAYOUT == BAND_CODE:
            ib = ia * 0
        else:
            ib = tl.load(entry_b_ptr + table_index, mask=mask, other=0).to(tl.int64)
        return ia, ib

    @triton.jit
    def node_segment(offsets_ptr, n_channels, BLOCK_CHANNELS: tl.constexpr):
        """Set up a program of destination/source node n = program_id(0) over its CSR segment.

        Returns n, the segment's bounds [beg, end) in the CSR offsets, the channel lanes cc
        (BLOCK_CHANNELS,) and their mask (cc < n_channels).
        """
        n = tl.program_id(0).to(tl.int64)
        beg = tl.load(offsets_ptr + n).to(tl.int64)
        end = tl.load(offsets_ptr + n + 1).to(tl.int64)
        cc = tl.arange(0, BLOCK_CHANNELS)
        cmask = cc < n_channels
        return n, beg, end, cc, cmask

    @triton.jit
    def node_block(
        offsets_ptr,
        col_table_ptr,
        row_table_ptr,
        entry_a_ptr,
        entry_b_ptr,
        n_channels,
        BLOCK_CHANNELS: tl.constexpr,
        COL_LANES: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        LAYOUT: tl.constexpr,
    ):
        """Set up a (node n, degree block b) program, grid (N, NB).

        Runs :func:`node_segment`, then loads block b's tables (:func:`block_tables`), its reduced
        rows rs (clamped to ≥ 0) with the (SLOT_LANES, BLOCK_CHANNELS) row mask rm, and the storage
        indices (ia, ib) of its entries (:func:`entry_index`).
        """
        n, beg, end, cc, cmask = node_segment(offsets_ptr, n_channels, BLOCK_CHANNELS)
        b = tl.program_id(1)
        col, jm, rows, sv, m2, tix = block_tables(
            col_table_ptr, row_table_ptr, b, COL_LANES, SLOT_LANES
        )
        rs = tl.maximum(rows, 0).to(tl.int64)
        rm = sv[:, None] & cmask[None, :]
        ia, ib = entry_index(entry_a_ptr, entry_b_ptr, tix, m2, LAYOUT)
        return n, b, beg, end, cc, cmask, col, jm, rs, rm, m2, ia, ib

    @triton.jit
    def dot_block_rows(
        col_table_ptr,
        row_table_ptr,
        entry_a_ptr,
        entry_b_ptr,
        block,
        n_channels,
        stride_rot_a,
        stride_rot_b,
        COL_LANES: tl.constexpr,
        DOT_COLS: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        LAYOUT: tl.constexpr,
    ):
        """Build the index tiles of degree block ``block`` for the "dot" kernels' steps.

        A step has R = BLOCK_EDGES·SLOT_LANES rows r = i·SLOT_LANES + s (edge i of the step, band
        slot s). Returns the channel lanes cc/cmask (BLOCK_CHANNELS,), the block's packed columns
        col (DOT_COLS,) with mask jm, per row its slot sl and reduced row rs (clamped ≥ 0) (R,), the
        (R, BLOCK_CHANNELS) row mask rowm, the (R, DOT_COLS) entry mask m2 and the entries' storage
        indices (ia, ib), with off = ia·stride_rot_a + ib·stride_rot_b (an entry of edge e sits at
        e·stride_rot_edge + off).
        """
        cc = tl.arange(0, BLOCK_CHANNELS)
        cmask = cc < n_channels
        jj = tl.arange(0, DOT_COLS)
        col = tl.load(col_table_ptr + block * COL_LANES + jj, mask=jj < COL_LANES, other=-1)
        jm = col >= 0
        sl = tl.arange(0, BLOCK_EDGES * SLOT_LANES) % SLOT_LANES
        rows = tl.load(row_table_ptr + block * SLOT_LANES + sl)
        sv = rows >= 0
        rs = tl.maximum(rows, 0).to(tl.int64)
        rowm = sv[:, None] & cmask[None, :]
        m2 = sv[:, None] & jm[None, :]
        tix = (block * SLOT_LANES + sl)[:, None] * COL_LANES + jj[None, :]
        ia, ib = entry_index(entry_a_ptr, entry_b_ptr, tix, m2, LAYOUT)
        return cc, cmask, col, jm, sl, rs, rowm, m2, ia, ib, ia * stride_rot_a + ib * stride_rot_b

    @triton.jit
    def div_ieee(a, b):
        """Divide a by b, rounded to nearest.

        fp32 ``/`` is approximate on NVIDIA; fp64 is exact.
        """
        if a.dtype == tl.float32:
            r = tl.div_rn(a, b)
        else:
            r = a / b
        return r

    @triton.jit
    def load_tile(
        matrix_ptr,
        first_row,
        n_rows,
        n_cols,
        stride_row,
        BLOCK_ROWS: tl.constexpr,
        BLOCK_COLS: tl.constexpr,
    ):
        """Load a weight tile of the register-resident MLP ops.

        Rows [first_row, first_row + n_rows) × n_cols of a row-major matrix, zero-padded to
        (BLOCK_ROWS, BLOCK_COLS).
        """
        r, c = tl.arange(0, BLOCK_ROWS), tl.arange(0, BLOCK_COLS)
        m = (r < n_rows)[:, None] & (c < n_cols)[None, :]
        return tl.load(
            matrix_ptr + (first_row + r)[:, None] * stride_row + c[None, :], mask=m, other=0.0
        )

    @triton.jit
    def silu_grad(h):
        """Return the derivative d silu(h) / dh = σ(h) (1 + h (1 − σ(h)))."""
        s = 1.0 / (1.0 + tl.exp(-h))
        return s + h * s * (1.0 - s)

    @triton.jit
    def scalar_as(value, dtype: tl.constexpr):
        """Return a float argument of a kernel in ``dtype``.

        Every float parameter of a kernel is annotated ``tl.float64``: without it a Python float
        arrives as fp32 on the GPU (float64's 1/rcut rounded to 24 bits), while the interpreter,
        which the CPU tests run, keeps all 53. ``tl.full`` converts the GPU's fp64 scalar and
        the interpreter's Python float alike (``tl.cast`` would round the Python float to fp32
        first); float32 kernels get the value rounded to nearest, as an fp32 argument was.
        """
        return tl.full((), value, dtype)

    @triton.jit
    def sqrt_ieee(a):
        """Return the square root of ``a``, rounded to nearest.

        ``tl.sqrt`` is approximate for fp32 on NVIDIA.
        """
        if a.dtype == tl.float32:
            r = tl.sqrt_rn(a)
        else:
            r = tl.sqrt(a)
        return r
