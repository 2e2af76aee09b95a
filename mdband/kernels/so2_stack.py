"""so2_mix_layer: one residual SO(2) mixing layer (linear + gate + residual) for forces.

Shapes (F focus streams, E edges, L = ``lmax``, Dm = 3L+1 reduced rows, C channels)::

    x     (F, E, Dm, C) contiguous, rows [(l,0) l=0..L] + [(l,−1) l=1..L] + [(l,+1) l=1..L]
    w0    ((L+1)·C, F·(L+1)·C)   m = 0 weights, W0_f[k, n] = w0[k, f·(L+1)C + n]
    wm    (L·C, F·2L·C)          |m| = 1 weights [Wu | Wv] per focus
    wg    (C, F·L·C)             gate weights (gated layers only)
    y     (F, E, Dm, C):  h = SO2Linear(x);  y = x + act(h)
          act(h)[0] = silu(h[0]);  act(h)[r] = h[r] · sigmoid(h[0] @ Wg)[l(r)]  (gated)
          act = identity (the stack's last layer)

The |m| = 1 block is the rotation-commuting complex product ``h₋ = x₋Wu − x₊Wv``,
``h₊ = x₋Wv + x₊Wu``. Only the pre-activation h is saved for the backward (gated layers; nothing
for the last one), instead of the four edge tensors autograd keeps for the torch layer:
``gh = act'(h)ᵀ gy`` (an elementwise kernel plus the small gate GEMMs), then ``gx = gy + gh Wᵀ``.
Weight gradients are not produced: the op serves force evaluation (frozen weights); training
uses the torch path.

The linear map, 2·C²·((L+1)² + 4L²) FLOP per edge (426 kFLOP at L = 3, C = 64):
``precision = "ieee"``: exact fp32 cuBLAS GEMMs (complex product with three GEMMs);
``"tf32x3"`` (GPUs with TMA, sm90+, and the interpreter): a Triton kernel, one (BE × C) output
row block per program; tiles come by TMA, x is split in registers and the weights once per call
into TF32 pairs (round to nearest), and three TF32 tensor-core products replace each fp32
product (relative error per product ≈ 2⁻²¹; end to end about 2e-7 relative on an H200).
Bytes moved per edge and layer: x read once per output row that uses it (Dm·(2L)·C·4 B from
L2), y written once (Dm·C·4 B); the weights, 2 × 4·Dm·2L·C² B, stay in L2.
Gate, forward: with the Triton linear kernel the gate is its epilogue
(:func:`mdband.kernels._stack_linear.gated_linear`: the logits from row 0's accumulator by
tf32x3 dots, y written beside h, h only when a backward will need it); on the ieee path the
logits h[:, 0]·Wg come from a cuBLAS GEMM and an elementwise kernel reads x, h, the logits and
writes y (3·Dm·C·4 + 4·L·C bytes per edge, 8.4 kB at L = 3, C = 64). Backward:
the gate kernel recomputes the logits and folds their cotangent back into row 0 itself
(tf32x3 tensor-core dots, relative error ≈ 2⁻²¹, 4·L·C² FLOP per edge), reading gy and h and
writing gh (no logit buffer, no GEMMs, measured faster than the GEMM route on an H200). In
``fp16x3`` it writes gh already split into fp16 parts with a scale per edge and row, which the
product reads as they are (:mod:`mdband.kernels._presplit_linear`; 2.19 ms against 2.93 at
647,154 edges, L = 3, C = 64, H200).
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.kernels import _presplit_linear as ps
from mdband.kernels import _stack_gate as sg
from mdband.kernels import _stack_launch as launch
from mdband.kernels import _stack_linear as sl
from mdband.kernels import _stack_weights as sw

OP = "mdband::so2_mix_layer"
OP_BWD = "mdband::so2_mix_layer_bwd"

PRECISIONS = ("ieee", *sw.SPLIT_MODES)
#: channel widths the kernel is compiled for (tl.dot tiles need a power of two ≥ 16)
CHANNELS = (16, 32, 64, 128)
CONFIG, FALLBACK_CONFIGS, SHAPE_CONFIG = launch.CONFIG, launch.FALLBACK_CONFIGS, launch.SHAPE_CONFIG
linear_config, gate_config = launch.linear_config, launch.gate_config


# ---------------------------------------------------------------------------- references
def _gauss(a, b, c, d):
    """(re, im) of (a + i·b)(c + i·d) with three real GEMMs."""
    t1 = torch.bmm(a + b, c)
    return t1 - torch.bmm(b, c + d), t1 + torch.bmm(a, d - c)


def so2_linear(x, w0, wm, L, transpose=False, gauss=True):
    """h = SO2Linear(x) (or x·Wᵀ) for x (F, E, Dm, Ci) with torch GEMMs (differentiable).

    m = 0 rows: one GEMM; |m| = 1 rows: the complex product ``h₋ + i·h₊ = (x₋ + i·x₊)(Wu + i·Wv)``
    with three GEMMs (``gauss``) or four.
    """
    F, E = x.shape[0], x.shape[1]
    W0, Wu, Wv = sw.oriented(w0, wm, F, L, transpose)
    x0, xn, xp = torch.split(x, [L + 1, L, L], dim=2)  # one backward concat, no zero-fill
    x0 = x0.reshape(F, E, W0.shape[1])
    xn, xp = xn.reshape(F, E, Wu.shape[1]), xp.reshape(F, E, Wu.shape[1])
    h0 = torch.bmm(x0, W0)
    if gauss:
        hn, hp = _gauss(xn, xp, Wu, Wv)
    else:
        hn = torch.bmm(xn, Wu) - torch.bmm(xp, Wv)
        hp = torch.bmm(xn, Wv) + torch.bmm(xp, Wu)
    co = Wu.shape[2] // L
    parts = [h0.view(F, E, L + 1, co), hn.view(F, E, L, co), hp.view(F, E, L, co)]
    return torch.cat(parts, dim=2)


def linear_reference(x, w0, wm, L):
    """h = SO2Linear(x) for x (F, E, Dm, C), four GEMMs (differentiable)."""
    return so2_linear(x, w0, wm, L, gauss=False)


def linear_t_reference(g, w0, wm, L):
    """gx = g Wᵀ: the transpose of :func:`linear_reference` (closed form)."""
    return so2_linear(g, w0, wm, L, transpose=True, gauss=False)


def _gate_weights(wg, F, L):
    """Per-focus gate weights Wg (F, C, L·C)."""
    return wg.view(wg.shape[0], F, wg.shape[1] // F).permute(1, 0, 2)


def _gate_logits(h, wg, L):
    """h[:, :, 0] @ Wg: (F, E, L·C)."""
    return torch.bmm(h[:, :, 0], _gate_weights(wg, h.shape[0], L))


def _gates(h, wg, L):
    F, E, _, C = h.shape
    return torch.sigmoid(_gate_logits(h, wg, L)).view(F, E, L, C)


def activation_reference(h, wg, L):
    """act(h) of a gated layer (differentiable)."""
    g = _gates(h, wg, L)
    F, E, _, C = h.shape
    rows = h[:, :, 1:].reshape(F, E, 3, L, C) * g[:, :, None]
    return torch.cat([torch.nn.functional.silu(h[:, :, :1]), rows.reshape(F, E, 3 * L, C)], 2)


def so2_mix_layer_reference(x, w0, wm, wg, lmax, gated):
    """(y, h): y = x + act(SO2Linear(x)); h = the pre-activation if gated else empty."""
    h = linear_reference(x, w0, wm, lmax)
    if not gated:
        return x + h, x.new_empty(0)
    return x + activation_reference(h, wg, lmax), h


def gate_bwd_reference(gy, h, wg, L):
    """gh = act'(h)ᵀ gy (closed form)."""
    F, E, _, C = h.shape
    g = _gates(h, wg, L)
    hr = h[:, :, 1:].reshape(F, E, 3, L, C)
    gyr = gy[:, :, 1:].reshape(F, E, 3, L, C)
    glogit = (gyr * hr).sum(2) * g * (1 - g)  # (F, E, L, C)
    s0 = torch.sigmoid(h[:, :, 0])
    gh0 = gy[:, :, 0] * (s0 * (1 + h[:, :, 0] * (1 - s0)))
    gh0 = gh0 + torch.bmm(glogit.reshape(F, E, L * C), _gate_weights(wg, F, L).transpose(1, 2))
    rows = (gyr * g[:, :, None]).reshape(F, E, 3 * L, C)
    return torch.cat([gh0[:, :, None], rows], dim=2)


def so2_mix_layer_bwd_reference(gy, h, w0, wm, wg, lmax, gated):
    gh = gate_bwd_reference(gy, h, wg, lmax) if gated else gy
    return gy + linear_t_reference(gh, w0, wm, lmax)


# ---------------------------------------------------------------------------- dispatch
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
    return cm.chosen_backend(
        "so2_mix_layer", backend(x.device, x.dtype, lmax=lmax, channels=x.shape[3])
    )


def _tma_capable(device) -> bool:
    """TMA and TF32 tensor cores: compute capability 9.0 or newer (the interpreter emulates
    both); older GPUs take the exact cuBLAS path."""
    if device.type != "cuda":
        return True
    return torch.cuda.get_device_capability(device) >= (9, 0)


def _linear(x, res, w0, wm, lmax, transpose, precision):
    """x·W (or x·Wᵀ) + res: the Triton kernel (tf32x3, fp16x3, fp16) or exact fp32 cuBLAS
    GEMMs (ieee)."""
    if precision == "ieee" or not _tma_capable(x.device):
        out = so2_linear(x, w0, wm, lmax, transpose)
        return out if res is None else out.add_(res)
    return sl.linear(x, res, w0, wm, lmax, transpose, precision)


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
    if precision != "ieee" and _tma_capable(x.device):  # the gate in the linear's epilogue
        return sl.gated_linear(x, w0, wm, wg, lmax, precision, save)
    F, E, _, C = x.shape
    h = _linear(x, None, w0, wm, lmax, False, precision)
    y = torch.empty_like(x)
    if not (cm.has_no_items(E) or cm.has_no_items(F)):
        lg = _gate_logits(h, wg, lmax)  # cuBLAS: faster here than dots inside the gate kernel
        gc = gate_config(lmax, C)
        sg.gate_fwd(x, h, lg, y, lmax, gc["BE"], gc["fwd_warps"])
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
    gh = gy
    if gated and not (cm.has_no_items(E) or cm.has_no_items(F)):
        gc = gate_config(lmax, C)
        # fp16x3: gh written split, as its product reads it
        if precision == "fp16x3" and _tma_capable(gy.device):
            gh = ps.SplitRows.empty_like(gy)
            sg.gate_bwd(gy, h, wg, gh, lmax, gc["BE"], gc["bwd_warps"])
            return ps.linear(gh, gy, w0, wm, lmax, True)
        gh = torch.empty_like(gy)
        sg.gate_bwd(gy, h, wg, gh, lmax, gc["BE"], gc["bwd_warps"])
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
        raise RuntimeError("so2_mix_layer: called with save=False (no gradient expected), so "
                           "its pre-activation was not kept for a backward")  # fmt: skip
    gx = torch.ops.mdband.so2_mix_layer_bwd(gy.contiguous(), h, w0, wm, wg, lmax, gated, precision)
    return gx, *(None,) * 7


_mix_op.register_autograd(_backward, setup_context=_setup)


# ---------------------------------------------------------------------------- public API
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
