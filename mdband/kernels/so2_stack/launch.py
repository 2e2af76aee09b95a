"""so2_mix_layer's launches: the linear, gate and pre-split kernels at the tuning table's launches.

The linear kernel (plain, or with the gated epilogue), the gate kernels and the pre-split kernel
run at the tuning table's ``so2_stack`` launches; where shared memory runs out a launch falls
back to the next smaller one, and the launch that fit is kept per device and launches to try (an
override's launches are a key of their own). Called inside the op's ``triton_op`` bodies only.
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.kernels.so2_stack import weights
from mdband.kernels.so2_stack.presplit import SplitRows, rows_per_program

#: the launch that fit, per (device, precision, gated, launches to try) of the linear kernel
#: and per (device, L, C, transpose, launches to try) of the pre-split kernel (a cache, not a
#: setting: the launches come from the tuning table, and a changed table is a new key)
_FITTED: dict = {}

if cm.TRITON_AVAILABLE:
    from triton.runtime.errors import OutOfResources
    from triton.tools.tensor_descriptor import TensorDescriptor

    from mdband.kernels.so2_stack.gate import so2_gate_bwd_kernel, so2_gate_fwd_kernel
    from mdband.kernels.so2_stack.linear import so2_linear_kernel
    from mdband.kernels.so2_stack.presplit import so2_presplit_linear_kernel

    triton = cm.triton


def forget_fitted_launches() -> None:
    """Forget which launches fit.

    The next call tries the tuning table's launches from the first (tests that simulate another
    device or refuse launches).
    """
    _FITTED.clear()


def _in_turn(key: tuple, launches: tuple) -> tuple:
    """Return the launches to try: the one that fit under ``key`` first, then the others.

    The others follow in their order.
    """
    kept = _FITTED.get(key)
    return launches if kept is None else (kept, *(x for x in launches if x != kept))


def linear_slots(L: int, rows: int) -> int:
    """Return the programs per edge block of the linear kernel.

    Its 3L + 1 output rows one by one (``rows = 1``), or in pairs of one m-group (``rows = 2``:
    ⌈(L + 1) / 2⌉ m = 0 pairs and L |m| = 1 pairs).
    """
    if rows == 1:
        return 3 * L + 1
    if rows == 2:
        return (L + 2) // 2 + L
    raise ValueError(f"so2_mix_layer: a launch has 1 or 2 rows per program, got {rows}")


def _linear_launch(x, res, w0, wm, L, transpose, precision, y, gate=None):
    """Run the linear kernel on x into y, trying smaller launches when shared memory runs out.

    For ``gate = (wg, out, g, save)`` it also runs the gated epilogue into out and g.
    """
    F, E, _, C = x.shape
    w_hi, w_lo, w_scale = weights.packed_weights(w0, wm, F, L, C, transpose, precision)
    table = tuning.current().so2_stack
    primary = table.linear_launch(precision, L, C)
    launches = (primary, *table.fallbacks)
    key = ("linear", x.device.type, x.device.index, precision, gate is None, launches)
    for launch in _in_turn(key, launches):
        be, rows = launch.edges, launch.rows
        slots = linear_slots(L, rows)

        def desc(t, be=be):
            return TensorDescriptor.from_tensor(t.view(F, E, -1), [1, be, C])

        w_desc = [TensorDescriptor.from_tensor(t, [C, C]) for t in (w_hi, w_lo)]
        y_desc = desc(y)
        if gate is None:
            extra, phases = (y_desc, y_desc, w_hi, 0), [(0, slots, 0)]
        else:
            wg, out, g, save = gate
            extra = (desc(out), desc(g), wg, wg.shape[1])
            phases = [(1, 1, 0), (2, slots - 1, 1)]
        x_desc, res_desc = desc(x), desc(x if res is None else res)
        try:
            for gate_code, n_slots, first in phases:
                cm.wrap(so2_linear_kernel)[(n_slots * triton.cdiv(E, be), F)](
                    x_desc,
                    res_desc,
                    *w_desc,
                    y_desc,
                    1.0 / w_scale,
                    *extra,
                    LMAX=L,
                    CHANNELS=C,
                    BLOCK_EDGES=be,
                    RESIDUAL=res is not None,
                    MODE=weights.mode_code(precision),
                    ROWS=rows,
                    SLOTS=slots,
                    GATE=gate_code,
                    SAVE=gate is None or gate[3],
                    N_SLOTS=n_slots,
                    FIRST_SLOT=first,
                    num_warps=launch.warps,
                    num_stages=launch.stages,
                )
        except OutOfResources:  # not enough shared memory on this GPU: a smaller launch
            continue
        _FITTED[key] = launch
        return
    raise RuntimeError("so2_mix_layer: no launch configuration fits this GPU")


def linear(x, res, w0, wm, lmax, transpose, precision):
    """Compute x·W (or x·Wᵀ) + res with the linear kernel in a split mode.

    Runs on a TMA-capable GPU or the interpreter.
    """
    y = torch.empty_like(x)
    if not (cm.has_no_items(x.shape[1]) or cm.has_no_items(x.shape[0])):
        _linear_launch(x, res, w0, wm, lmax, transpose, precision, y)
    return y


def gated_linear(x, w0, wm, wg, lmax, precision, save):
    """Return (y, h) of a gated layer: ``h = x·W``, ``y = x + act(h)`` (:mod:`.linear`).

    h is an empty tensor unless ``save``.
    """
    F, E, _, C = x.shape
    out = torch.empty_like(x)
    h = torch.empty_like(x) if save else x.new_empty(0)
    if not (cm.has_no_items(E) or cm.has_no_items(F)):
        g = x.new_empty(F, E, lmax * C)
        _linear_launch(x, x, w0, wm, lmax, False, precision, h if save else out, (wg, out, g, save))
    return out, h


def gate_fwd(x, h, logits, y, L: int) -> None:
    """Run the ieee path's gate forward into y."""
    F, E, _, C = x.shape
    launch = tuning.current().so2_stack.gate_launch(L, C)
    cm.wrap(so2_gate_fwd_kernel)[(triton.cdiv(E, launch.edges), F)](
        x,
        h,
        logits,
        y,
        E,
        LMAX=L,
        CHANNELS=C,
        BLOCK_EDGES=launch.edges,
        num_warps=launch.fwd_warps,
    )


def gate_bwd(gy, h, wg, gh, L: int) -> None:
    """Run the backward gate kernel into gh.

    gh is an fp32 tensor like gy, or a :class:`SplitRows` for the pre-split linear kernel.
    """
    F, E, _, C = gy.shape
    launch = tuning.current().so2_stack.gate_launch(L, C)
    split = isinstance(gh, tuple)
    outs = tuple(gh) if split else (gh, gh, gh)
    cm.wrap(so2_gate_bwd_kernel)[(triton.cdiv(E, launch.edges), F)](
        gy,
        h,
        wg,
        *outs,
        E,
        wg.shape[1],
        LMAX=L,
        CHANNELS=C,
        BLOCK_EDGES=launch.edges,
        SPLIT=split,
        num_warps=launch.bwd_warps,
        num_stages=1,
    )


def presplit_linear(x: SplitRows, res, w0, wm, L: int, transpose: bool) -> torch.Tensor:
    """Compute x·W + res (x·Wᵀ + res with ``transpose``) by the pre-split kernel.

    The result is fp32 (F, E, Dm, C). Runs on a TMA-capable GPU or the interpreter, trying the
    tuning table's launches in turn.
    """
    F, E, dm, C = x.hi.shape
    y = torch.empty(x.hi.shape, dtype=torch.float32, device=x.hi.device)
    if cm.has_no_items(E) or cm.has_no_items(F):
        return y
    dev = x.hi.device
    launches = tuning.current().so2_stack.presplit
    key = ("presplit", dev.type, dev.index, L, C, transpose, launches)
    for launch in _in_turn(key, launches):
        be, rows = launch.edges, rows_per_program(L, launch.rows)
        w_hi, w_lo, w_scale = weights.packed_weights(w0, wm, F, L, C, transpose, "fp16x3", rows)

        def desc(t, width, be=be):
            return TensorDescriptor.from_tensor(t.view(F, E, dm * C), [1, be, width])

        w_desc = [TensorDescriptor.from_tensor(t, [rows * C, C]) for t in (w_hi, w_lo)]
        try:
            cm.wrap(so2_presplit_linear_kernel)[((dm // rows) * triton.cdiv(E, be), F)](
                desc(x.hi, C),
                desc(x.lo, C),
                x.inv,
                desc(res, rows * C),
                *w_desc,
                desc(y, rows * C),
                1.0 / w_scale,
                E,
                LMAX=L,
                CHANNELS=C,
                BLOCK_EDGES=be,
                ROWS=rows,
                num_warps=launch.warps,
                num_stages=launch.stages,
            )
        except OutOfResources:  # not enough shared memory on this GPU: a smaller launch
            continue
        _FITTED[key] = launch
        return y
    raise RuntimeError("so2_mix_layer: no launch configuration of the pre-split kernel fits")
