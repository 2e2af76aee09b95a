"""The SO(2) linear kernel of so2_mix_layer (:mod:`mdband.kernels.so2_stack`) and its launches.

Shapes as there (F focus streams, E edges, L = ``lmax``, Dm = 3L+1 rows, C channels): x, res,
h, y (F, E, Dm, C); the weights packed into (F·Dm·2L·C, C) tile stacks by
:func:`mdband.kernels._stack_weights.packed_weights`.

Two uses:

* :func:`linear`: ``h = x·W (+ res)`` (or x·Wᵀ, the backward's transposed product), one launch.
* :func:`gated_linear`: a gated layer's ``h = x·W`` and ``y = x + act(h)`` from the same
  accumulators, in two launches. Launch A (programs of output row 0 only; with two rows per
  program also row 1) writes ``y₀ = x₀ + silu(h₀)``, computes the gate logits ``h₀·Wg_l`` for
  l = 1..L in its epilogue (tf32x3 tensor-core dots, relative error ≈ 2⁻²¹, 2·L·C² FLOP per
  edge) and writes the gates ``g = sigmoid(h₀·Wg)`` (F, E, L·C); launch B (every other row)
  writes ``y_r = x_r + h_r·g_{l(r)}``. h is stored only when a backward needs it (``save``).
  Against the unfused route (h written, the logits by a cuBLAS GEMM, an elementwise kernel
  reading x, h and the logits and writing y) this saves per edge one write of the logits and one
  read of h and of x (x comes from L2 here: the residual row is one the k-loop just read):
  (2·Dm·C + L·C)·4 bytes, 5.9 kB at L = 3, C = 64, and one launch of each of the two other
  kernels; it adds the gates' write and their reads by launch B, (1 + 3)·L·C·4 bytes (3.1 kB).
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.kernels import _split_dots as sd
from mdband.kernels import _stack_gate as sg
from mdband.kernels import _stack_launch as launch
from mdband.kernels import _stack_weights as sw

_WORKING: dict = {}  # (device, configured launch, gated) -> the launch that fit there
#: tf32x3's split of x (a key of :data:`mdband.kernels._split_dots.X_SPLITS`), read per launch
X_SPLIT = {"tf32x3": "rna"}

if cm.TRITON_AVAILABLE:
    from triton.runtime.errors import OutOfResources
    from triton.tools.tensor_descriptor import TensorDescriptor

    triton, tl = cm.triton, cm.tl
    _split_x, _row_dot = sd.split_x, sd.row_dot
    gate_tile = sg.gate_tile

    @triton.jit
    def _gated_row(res_d, g_d, f, e0, j, acc, L: tl.constexpr, C: tl.constexpr, BE: tl.constexpr):
        """y_j = x_j + h_j · g_l (row j > 0 of degree l), as a [1, BE, C] tile."""
        lj = tl.where(j <= L, j, (j - L - 1) % L + 1)
        xj = res_d.load([f, e0, j * C]).reshape(BE, C)
        gj = g_d.load([f, e0, (lj - 1) * C]).reshape(BE, C)
        return (xj + acc * gj).reshape(1, BE, C)

    @triton.jit
    def linear_kernel(
        x_d, res_d, wh_d, wl_d, y_d, w_inv, out_d, g_d, wg_ptr, SG,
        L: tl.constexpr, C: tl.constexpr, BE: tl.constexpr, RES: tl.constexpr,
        MODE: tl.constexpr, ROWS: tl.constexpr, SLOTS: tl.constexpr,
        GATE: tl.constexpr, SAVE: tl.constexpr, NS: tl.constexpr, S0: tl.constexpr,
        XS: tl.constexpr = 0,
    ):  # fmt: skip
        """Rows j0, j1 of h = x·W (+ res) on BE edges of focus f: acc (BE, C) each, one k-loop.

        TMA descriptors: x, res, y, out, g (F, E, ·), tiles [1, BE, C] (zero-filled / clipped
        past E); wh, wl (F·Dm·2L·C, C), tiles [C, C]: tile (f, j, k) is the block of W feeding
        row j from input row k of the row's k-list, stored [c_out][c_in] (K-major), split by
        :func:`mdband.kernels._stack_weights.pack_weights` in the mode MODE:
        0 tf32x3: W = wh + wl (TF32), x = xh + xl in registers, acc += xl·wh + xh·wl + xh·wh;
        1 fp16x3: the same products in fp16, lo parts scaled by 2¹¹ into their own accumulator;
        each edge's row segment of an x tile scaled by the power of two that puts its largest
        element in [2¹³, 2¹⁴) (:func:`~mdband.kernels._split_dots.row_scales`, undone on the
        tile's products), W by the power of two 1 / w_inv (undone at the end);
        2 fp16: acc += xh·wh, one fp16 product (scaled as in fp16x3).
        ROWS = 1: one output row per program (j1 = j0). ROWS = 2: two rows of one m-group
        (which read the same x rows) per program, so each x tile is loaded and split once for
        both: the m = 0 rows in pairs (0, 1), (2, 3), … (an odd last row computed twice and
        stored twice, the same values), the 2L |m| = 1 rows in L pairs. Each row's products
        and their order are those of ROWS = 1. SLOTS: row slots per edge block
        (:func:`~mdband.kernels._stack_launch.linear_slots`); this launch runs NS of them from
        slot S0 on.
        GATE = 0: y = h (+ res). GATE = 1 (slot 0, launch A) and 2 (the other slots, launch
        B): the gated layer's epilogue of the module docstring (res = x; y = h, stored iff
        SAVE; out = x + act(h); g the gates, written by A and read by B; wg (C, F·L·C) the
        gate weights, row stride SG).
        """
        DM: tl.constexpr = 3 * L + 1
        NK: tl.constexpr = 2 * L
        G0: tl.constexpr = SLOTS - L  # programs of m = 0 row pairs (ROWS = 2)
        # one flat axis (row slot fastest, as the x tile of BE edges stays in L2 for its
        # slots): grid axis 1 holds at most 65,535 blocks, E / BE exceeds it from 4.2 M edges
        pid = tl.program_id(0)
        slot = pid % NS + S0
        f = tl.program_id(1)
        e0 = (pid // NS) * BE
        if ROWS == 1:
            j0 = slot
            j1 = slot
        else:
            j0 = tl.where(slot < G0, 2 * slot, L + 1 + 2 * (slot - G0))
            j1 = tl.where(slot < G0, tl.minimum(2 * slot + 1, L), j0 + 1)
        m0 = j0 <= L
        nk = tl.where(m0, L + 1, NK)  # m = 0 rows read x rows 0..L; |m| = 1 rows read L+1..3L
        xr0 = tl.where(m0, 0, L + 1)
        wrow0 = (f * DM + j0) * (NK * C)
        wrow1 = (f * DM + j1) * (NK * C)
        acc0 = tl.zeros((BE, C), tl.float32)
        acc1 = tl.zeros((BE, C), tl.float32)
        for k in range(nk):
            xa = x_d.load([f, e0, (xr0 + k) * C]).reshape(BE, C)
            xh, xl, inv = _split_x(xa, MODE, XS)
            wr0 = wrow0 + k * C
            acc0 = _row_dot(xh, xl, inv, wh_d.load([wr0, 0]), wl_d, wr0, acc0, MODE)
            if ROWS == 2:
                wr1 = wrow1 + k * C
                acc1 = _row_dot(xh, xl, inv, wh_d.load([wr1, 0]), wl_d, wr1, acc1, MODE)
        if MODE != 0:
            acc0 = acc0 * w_inv
            acc1 = acc1 * w_inv
        if GATE == 0:
            if RES:
                acc0 += res_d.load([f, e0, j0 * C]).reshape(BE, C)
            y_d.store([f, e0, j0 * C], acc0.reshape(1, BE, C))
            if ROWS == 2:
                if RES:
                    acc1 += res_d.load([f, e0, j1 * C]).reshape(BE, C)
                y_d.store([f, e0, j1 * C], acc1.reshape(1, BE, C))
        else:
            if SAVE:
                y_d.store([f, e0, j0 * C], acc0.reshape(1, BE, C))
                if ROWS == 2:
                    y_d.store([f, e0, j1 * C], acc1.reshape(1, BE, C))
            if GATE == 1:  # j0 = 0 (and j1 = 1 with two rows)
                x0 = res_d.load([f, e0, 0]).reshape(BE, C)
                out_d.store([f, e0, 0], (x0 + acc0 * tl.sigmoid(acc0)).reshape(1, BE, C))
                c = tl.arange(0, C)
                for lo in tl.static_range(1, L + 1):
                    wgl = gate_tile(wg_ptr, f, lo, c, SG, L, C)
                    gate = tl.sigmoid(tl.dot(acc0, wgl, input_precision="tf32x3"))
                    g_d.store([f, e0, (lo - 1) * C], gate.reshape(1, BE, C))
                    if ROWS == 2 and lo == 1:
                        x1 = res_d.load([f, e0, C]).reshape(BE, C)
                        out_d.store([f, e0, C], (x1 + acc1 * gate).reshape(1, BE, C))
            else:
                out_d.store([f, e0, j0 * C], _gated_row(res_d, g_d, f, e0, j0, acc0, L, C, BE))
                if ROWS == 2:
                    out_d.store([f, e0, j1 * C], _gated_row(res_d, g_d, f, e0, j1, acc1, L, C, BE))


def _launch(x, res, w0, wm, L, transpose, precision, y, gate=None):
    """Run the linear kernel on x into y (and, for ``gate = (wg, out, g, save)``, the gated
    epilogue into out and g), trying smaller launches when shared memory runs out."""
    F, E, _, C = x.shape
    wh, wl, w_scale = sw.packed_weights(w0, wm, F, L, C, transpose, precision)
    primary = launch.linear_config(precision, L, C)
    key = (x.device.type, x.device.index, precision, tuple(sorted(primary.items())), gate is None)
    tried = [_WORKING[key]] if key in _WORKING else [primary, *launch.FALLBACK_CONFIGS]
    for cfg in tried:
        be, n_rows = cfg["BE"], cfg.get("rows", 1)
        slots = launch.linear_slots(L, n_rows)

        def desc(t, be=be):
            return TensorDescriptor.from_tensor(t.view(F, E, -1), [1, be, C])

        wd = [TensorDescriptor.from_tensor(t, [C, C]) for t in (wh, wl)]
        yd = desc(y)
        if gate is None:
            extra, phases = (yd, yd, wh, 0), [(0, slots, 0)]
        else:
            wg, out, g, save = gate
            extra = (desc(out), desc(g), wg, wg.shape[1])
            phases = [(1, 1, 0), (2, slots - 1, 1)]
        xd, rd = desc(x), desc(x if res is None else res)
        try:
            for g_code, ns, s0 in phases:
                cm.wrap(linear_kernel)[(ns * triton.cdiv(E, be), F)](
                    xd, rd, *wd, yd, 1.0 / w_scale, *extra,
                    L=L, C=C, BE=be, RES=res is not None, MODE=sw.MODE_CODE[precision],
                    ROWS=n_rows, SLOTS=slots, GATE=g_code, SAVE=gate is None or gate[3],
                    NS=ns, S0=s0, XS=sd.X_SPLITS[X_SPLIT["tf32x3"]],
                    num_warps=cfg["warps"],
                    num_stages=cfg["stages"],
                )  # fmt: skip
        except OutOfResources:  # not enough shared memory on this GPU: a smaller launch
            continue
        _WORKING[key] = cfg
        return
    raise RuntimeError("so2_mix_layer: no launch configuration fits this GPU")


def linear(x, res, w0, wm, lmax, transpose, precision):
    """x·W (or x·Wᵀ) + res with the Triton kernel (a split mode of
    :data:`mdband.kernels._stack_weights.SPLIT_MODES`; TMA-capable GPU or the interpreter)."""
    y = torch.empty_like(x)
    if not (cm.has_no_items(x.shape[1]) or cm.has_no_items(x.shape[0])):
        _launch(x, res, w0, wm, lmax, transpose, precision, y)
    return y


def gated_linear(x, w0, wm, wg, lmax, precision, save):
    """(y, h) of a gated layer: ``h = x·W``, ``y = x + act(h)`` (module docstring); h is an
    empty tensor unless ``save``."""
    F, E, _, C = x.shape
    out = torch.empty_like(x)
    h = torch.empty_like(x) if save else x.new_empty(0)
    if not (cm.has_no_items(E) or cm.has_no_items(F)):
        g = x.new_empty(F, E, lmax * C)
        _launch(x, x, w0, wm, lmax, False, precision, h if save else out, (wg, out, g, save))
    return out, h
