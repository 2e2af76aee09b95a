"""The band producer's op: the dispatch, the launch, the ``triton_op`` pair and the public function.

The launch follows the tuning table's ``band_producer`` record; the ``triton_op`` pair (forward,
closed-form backward) comes with their fakes and autograd; the public function is
:func:`band_producer` (package docstring: the math).
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.kernels.band_producer import hyperdual as bm
from mdband.kernels.band_producer.reference import (
    band_producer_bwd_reference,
    band_producer_reference,
)
from mdband.so3 import storage as st

if cm.TRITON_AVAILABLE:
    from mdband.kernels.band_producer.kernel import band_producer_kernel

OP = "mdband::band_producer"
OP_BWD = "mdband::band_producer_bwd"

#: largest degree the Triton kernel is compiled for (beyond it the reference runs)
TRITON_MAX_LMAX = 8


def backend(device, dtype, *, lmax: int) -> tuple[str | None, str]:
    """(backend, reason) shared by the dispatch and ``capability.spec_for_band_producer``."""
    if lmax < 0:
        return None, f"lmax must be >= 0 (got {lmax})"
    name = cm.select_backend(device, dtype, triton_ok=lmax <= TRITON_MAX_LMAX)
    return name, f"{name} on {torch.device(device).type} ({dtype}); writes the band directly"


def _block(E: int) -> tuple[int, int]:
    """Return (edges, warps) per program.

    The tuning table's, or in the CPU interpreter at most its ``interpreter_edges`` (the next power
    of two of E) and one warp.
    """
    launch = tuning.current().band_producer
    if cm.interpret_mode():
        return min(launch.interpreter_edges, cm.next_pow2(max(E, 1))), 1
    return launch.edges, launch.warps


def _launch(v, lmax, out, gband=None):
    """Forward (``gband`` None: out = band) or backward (out = dL/dv) launch."""
    E = v.shape[0]
    bwd = gband is not None
    t = st.kernel_tables(st.RotationLayout.BAND, lmax, lmax, v.device)
    coef = bm.coef_tensor(lmax, v.dtype, str(v.device))
    BE, warps = _block(E)
    gb = gband if bwd else out
    so = out.stride()
    cm.wrap(band_producer_kernel)[((E + BE - 1) // BE,)](
        v,
        coef,
        t["ent_a"],
        out,
        gb,
        out,
        E,
        *v.stride(),
        *so,
        *gb.stride(),
        *so,
        LMAX=lmax,
        COL_LANES=t["jp"],
        SLOT_LANES=t["sp"],
        BLOCK_EDGES=BE,
        BACKWARD=bwd,
        num_warps=warps,
    )


def _dispatch(v, lmax) -> str:
    return cm.chosen_backend("band_producer", backend(v.device, v.dtype, lmax=lmax))


@torch.library.triton_op(OP, mutates_args=())
def _band_op(v: torch.Tensor, lmax: int) -> torch.Tensor:
    E = v.shape[0]
    if _dispatch(v, lmax) == "reference":
        return band_producer_reference(v, lmax)
    band = v.new_empty(E, st.band_width(lmax))
    if not cm.has_no_items(E):
        _launch(v, lmax, band)
    return band


@_band_op.register_fake
def _(v, lmax):
    return v.new_empty(v.shape[0], st.band_width(lmax))


@torch.library.triton_op(OP_BWD, mutates_args=())
def _band_bwd_op(gband: torch.Tensor, v: torch.Tensor, lmax: int) -> torch.Tensor:
    E = v.shape[0]
    if _dispatch(v, lmax) == "reference":
        return band_producer_bwd_reference(gband, v, lmax)
    gv = torch.empty_like(v)
    if not cm.has_no_items(E):
        _launch(v, lmax, gv, gband)
    return gv


@_band_bwd_op.register_fake
def _(gband, v, lmax):
    return torch.empty_like(v)


def _setup(ctx, inputs, output):
    v, lmax = inputs
    ctx.save_for_backward(v)
    ctx.lmax = lmax


def _backward(ctx, gband):
    (v,) = ctx.saved_tensors
    return torch.ops.mdband.band_producer_bwd(gband, v, ctx.lmax), None


_band_op.register_autograd(_backward, setup_context=_setup)


def band_producer(edge_vec: torch.Tensor, lmax: int) -> torch.Tensor:
    """Band (E, 3(lmax+1)² − 2) of the edge vectors (E, 3); differentiable in ``edge_vec``."""
    if edge_vec.dim() != 2 or edge_vec.shape[1] != 3:
        raise ValueError(f"band_producer: edge_vec must be (E, 3), got {tuple(edge_vec.shape)}")
    if lmax < 0:
        raise ValueError(f"band_producer: lmax must be >= 0, got {lmax}")
    return _band_op(edge_vec, lmax)


def band_storage(edge_vec: torch.Tensor, lmax: int) -> st.RotationStorage:
    """Build a BAND RotationStorage with :func:`band_producer`."""
    return st.RotationStorage(st.RotationLayout.BAND, lmax, band_producer(edge_vec, lmax))
