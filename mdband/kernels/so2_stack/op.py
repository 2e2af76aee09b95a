"""so2_mix_layer's op: the dispatch, the ``triton_op`` pair and the public :func:`so2_mix_layer`.

The ``triton_op`` pair (forward, closed-form backward of x) comes with their fakes and autograd;
the math is in the package docstring.
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.kernels.so2_stack import launch
from mdband.kernels.so2_stack.presplit import SplitRows
from mdband.kernels.so2_stack.reference import (
    gate_logits,
    so2_linear,
    so2_mix_layer_bwd_reference,
    so2_mix_layer_reference,
)

OP = "mdband::so2_mix_layer"
OP_BWD = "mdband::so2_mix_layer_bwd"

PRECISIONS = ("ieee", *tuning.SPLIT_MODES)
#: channel widths the kernel is compiled for (tl.dot tiles need a power of two ≥ 16)
CHANNELS = (16, 32, 64, 128)


def kernel_supports(dtype, channels: int) -> bool:
    """Whether the Triton kernel is compiled for this dtype and channel width."""
    return dtype == torch.float32 and channels in CHANNELS


def backend(device, dtype, *, lmax: int, channels: int) -> tuple[str | None, str]:
    """(backend, reason): Triton for fp32 with C in CHANNELS and lmax ≥ 1, else the reference."""
    if lmax < 1:
        return None, f"the SO(2) mixing layer needs lmax >= 1 (got {lmax})"
    if not kernel_supports(dtype, channels):
        return "reference", f"reference: no kernel for {dtype}, C={channels}"
    name = cm.select_backend(device, dtype)
    return name, f"{name} on {torch.device(device).type} ({dtype}, C={channels})"


def _dispatch(x, lmax) -> str:
    decision = backend(x.device, x.dtype, lmax=lmax, channels=x.shape[3])
    return cm.chosen_backend("so2_mix_layer", decision)


def _linear(x, res, w0, wm, lmax, transpose, precision):
    """Compute x·W (or x·Wᵀ) + res.

    The Triton kernel (tf32x3, fp16x3, fp16) where TMA runs (``cm.has_tma``), else exact fp32
    cuBLAS GEMMs (ieee).
    """
    if precision == "ieee" or not cm.has_tma(x.device):
        out = so2_linear(x, w0, wm, lmax, transpose)
        return out if res is None else out.add_(res)
    return launch.linear(x, res, w0, wm, lmax, transpose, precision)


def _check(x, w0, wm, wg, lmax, gated, precision):
    if precision not in PRECISIONS:
        raise ValueError(f"so2_mix_layer: precision must be one of {PRECISIONS}, got {precision!r}")
    if x.dim() != 4 or x.shape[2] != 3 * lmax + 1:
        raise ValueError(f"so2_mix_layer: x must be (F, E, 3L+1, C), got {tuple(x.shape)}")
    F, _, _, C = x.shape
    want = {
        "w0": (w0, ((lmax + 1) * C, F * (lmax + 1) * C)),
        "wm": (wm, (lmax * C, F * 2 * lmax * C)),
    }
    if gated:
        want["wg"] = (wg, (C, F * lmax * C))
    for name, (t, shape) in want.items():
        if tuple(t.shape) != shape or not t.is_contiguous():
            got = tuple(t.shape)
            raise ValueError(f"so2_mix_layer: {name} must be row-major {shape}, got {got}")


@torch.library.triton_op(OP, mutates_args=())
def _mix_op(
    x: torch.Tensor,
    w0: torch.Tensor,
    wm: torch.Tensor,
    wg: torch.Tensor,
    lmax: int,
    gated: bool,
    precision: str,
    save: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    if _dispatch(x, lmax) == "reference":
        y, h = so2_mix_layer_reference(x, w0, wm, wg, lmax, gated)
        return y, (h if save else x.new_empty(0))
    if not gated:
        return _linear(x, x, w0, wm, lmax, False, precision), x.new_empty(0)
    if precision != "ieee" and cm.has_tma(x.device):  # the gate in the linear's epilogue
        return launch.gated_linear(x, w0, wm, wg, lmax, precision, save)
    F, E, _, C = x.shape
    h = _linear(x, None, w0, wm, lmax, False, precision)
    y = torch.empty_like(x)
    if not (cm.has_no_items(E) or cm.has_no_items(F)):
        logits = gate_logits(h, wg, lmax)  # cuBLAS: faster here than dots inside the kernel
        launch.gate_fwd(x, h, logits, y, lmax)
    return y, (h if save else x.new_empty(0))


@_mix_op.register_fake
def _(x, w0, wm, wg, lmax, gated, precision, save):
    return torch.empty_like(x), (torch.empty_like(x) if gated and save else x.new_empty(0))


@torch.library.triton_op(OP_BWD, mutates_args=())
def _mix_bwd_op(
    gy: torch.Tensor,
    h: torch.Tensor,
    w0: torch.Tensor,
    wm: torch.Tensor,
    wg: torch.Tensor,
    lmax: int,
    gated: bool,
    precision: str,
) -> torch.Tensor:
    if _dispatch(gy, lmax) == "reference":
        return so2_mix_layer_bwd_reference(gy, h, w0, wm, wg, lmax, gated)
    F, E, _, C = gy.shape
    gh: torch.Tensor | SplitRows = gy
    if gated and not (cm.has_no_items(E) or cm.has_no_items(F)):
        # fp16x3: gh written split, as its product reads it
        if precision == "fp16x3" and cm.has_tma(gy.device):
            gh = SplitRows.empty_like(gy)
            launch.gate_bwd(gy, h, wg, gh, lmax)
            return launch.presplit_linear(gh, gy, w0, wm, lmax, True)
        gh = torch.empty_like(gy)
        launch.gate_bwd(gy, h, wg, gh, lmax)
    return _linear(gh, gy, w0, wm, lmax, True, precision)


@_mix_bwd_op.register_fake
def _(gy, h, w0, wm, wg, lmax, gated, precision):
    return torch.empty_like(gy)


def _setup(ctx, inputs, output):
    x, w0, wm, wg, lmax, gated, precision, save = inputs
    ctx.save_for_backward(output[1], w0, wm, wg)
    ctx.meta = (lmax, gated, precision, save)
    # h is saved for the backward, never differentiated: no zero-filled (F, E, Dm, C) cotangent
    ctx.set_materialize_grads(False)


def _backward(ctx, gy, _gh):
    if gy is None:  # y unused (grads are not materialised)
        return (None,) * 8
    h, w0, wm, wg = ctx.saved_tensors
    lmax, gated, precision, save = ctx.meta
    if gated and not save:
        raise RuntimeError(
            "so2_mix_layer: called with save=False (no gradient expected), so its "
            "pre-activation was not kept for a backward"
        )
    gx = torch.ops.mdband.so2_mix_layer_bwd(gy.contiguous(), h, w0, wm, wg, lmax, gated, precision)
    return gx, *(None,) * 7


_mix_op.register_autograd(_backward, setup_context=_setup)


def so2_mix_layer(
    x: torch.Tensor,
    w0: torch.Tensor,
    wm: torch.Tensor,
    wg: torch.Tensor | None,
    lmax: int,
    precision: str = "ieee",
) -> torch.Tensor:
    """One residual SO(2) mixing layer ``x + act(SO2Linear(x))`` (gated iff ``wg`` is given).

    Differentiable in ``x`` only (weights are treated as constants: no weight gradients).
    """
    gated = wg is not None
    wg = wg if gated else w0.new_empty(0, 0)
    _check(x, w0, wm, wg, lmax, gated, precision)
    cm.check_dtypes("so2_mix_layer", x=x, w0=w0, wm=wm)
    # the pre-activation is kept only for a backward (no-grad stages skip writing it)
    save = gated and torch.is_grad_enabled() and x.requires_grad
    y, _ = _mix_op(x.contiguous(), w0, wm, wg, lmax, gated, precision, save)
    return y
