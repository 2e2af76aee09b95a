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
Gate: the forward takes the logits h[:, 0]·Wg from a cuBLAS GEMM (E·L·C floats) and its kernel
reads x, h, the logits and writes y (3·Dm·C·4 + 4·L·C bytes per edge, 8.4 kB at L = 3, C = 64);
the backward kernel recomputes the logits and folds their cotangent back into row 0 itself
(tf32x3 tensor-core dots, relative error ≈ 2⁻²¹, 4·L·C² FLOP per edge), reading gy and h and
writing gh (no logit buffer, no GEMMs, measured faster than the GEMM route on an H200).
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.kernels import _split_dots as sd
from mdband.kernels import _stack_launch as launch
from mdband.kernels import _stack_weights as sw

OP = "mdband::so2_mix_layer"
OP_BWD = "mdband::so2_mix_layer_bwd"

PRECISIONS = ("ieee", *sw.SPLIT_MODES)
#: channel widths the kernel is compiled for (tl.dot tiles need a power of two ≥ 16)
CHANNELS = (16, 32, 64, 128)
_WORKING: dict = {}  # (device, configured launch) -> the launch that fit there
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


# ---------------------------------------------------------------------------- Triton kernels
if cm.TRITON_AVAILABLE:
    from triton.runtime.errors import OutOfResources
    from triton.tools.tensor_descriptor import TensorDescriptor

    triton, tl = cm.triton, cm.tl

    _split_x, _row_dot = sd.split_x, sd.row_dot

    @triton.jit
    def _linear_kernel(
        x_d, res_d, wh_d, wl_d, y_d, w_inv,
        L: tl.constexpr, C: tl.constexpr, BE: tl.constexpr, RES: tl.constexpr,
        MODE: tl.constexpr, ROWS: tl.constexpr, SLOTS: tl.constexpr,
    ):  # fmt: skip
        """Rows j0, j1 of y = x·W (+ res) on BE edges of focus f: acc (BE, C) each, one k-loop.

        TMA descriptors: x, res, y (F, E, Dm·C), tiles [1, BE, C] (zero-filled / clipped past
        E); wh, wl (F·Dm·2L·C, C), tiles [C, C]: tile (f, j, k) is the block of W feeding row j
        from input row k of the row's k-list, stored [c_out][c_in] (K-major), split by
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
        and their order are those of ROWS = 1. SLOTS: programs per edge block
        (:func:`~mdband.kernels._stack_launch.linear_slots`).
        """
        DM: tl.constexpr = 3 * L + 1
        NK: tl.constexpr = 2 * L
        G0: tl.constexpr = SLOTS - L  # programs of m = 0 row pairs (ROWS = 2)
        # one flat axis (row slot fastest, as the x tile of BE edges stays in L2 for its
        # slots): grid axis 1 holds at most 65,535 blocks, E / BE exceeds it from 4.2 M edges
        pid = tl.program_id(0)
        slot = pid % SLOTS
        f = tl.program_id(1)
        e0 = (pid // SLOTS) * BE
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
            xh, xl, inv = _split_x(xa, MODE)
            wr0 = wrow0 + k * C
            acc0 = _row_dot(xh, xl, inv, wh_d.load([wr0, 0]), wl_d, wr0, acc0, MODE)
            if ROWS == 2:
                wr1 = wrow1 + k * C
                acc1 = _row_dot(xh, xl, inv, wh_d.load([wr1, 0]), wl_d, wr1, acc1, MODE)
        if MODE != 0:
            acc0 = acc0 * w_inv
            acc1 = acc1 * w_inv
        if RES:
            acc0 += res_d.load([f, e0, j0 * C]).reshape(BE, C)
        y_d.store([f, e0, j0 * C], acc0.reshape(1, BE, C))
        if ROWS == 2:
            if RES:
                acc1 += res_d.load([f, e0, j1 * C]).reshape(BE, C)
            y_d.store([f, e0, j1 * C], acc1.reshape(1, BE, C))

    @triton.jit
    def _gate_tile(wg_ptr, f, lo, c, SG, L: tl.constexpr, C: tl.constexpr):
        """Gate weights of degree lo of focus f: (C_in, C_out), wg row stride SG = F·L·C."""
        return tl.load(wg_ptr + (c[:, None] * SG + (f * (L * C) + (lo - 1) * C) + c[None, :]))

    @triton.jit
    def _gate_fwd_kernel(
        x_ptr, h_ptr, lg_ptr, y_ptr, E,
        L: tl.constexpr, C: tl.constexpr, BE: tl.constexpr,
    ):  # fmt: skip
        """y = x + act(h) given the gate logits lg (F, E, L·C)."""
        DM: tl.constexpr = 3 * L + 1
        f = tl.program_id(1).to(tl.int64)
        e = tl.program_id(0).to(tl.int64) * BE + tl.arange(0, BE)
        em = (e < E)[:, None]
        c = tl.arange(0, C)
        base = (f * E + e)[:, None] * (DM * C) + c[None, :]
        gbase = (f * E + e)[:, None] * (L * C) + c[None, :]
        h0 = tl.load(h_ptr + base, mask=em, other=0.0)
        x0 = tl.load(x_ptr + base, mask=em, other=0.0)
        tl.store(y_ptr + base, x0 + h0 * tl.sigmoid(h0), mask=em)
        for lo in range(1, L + 1):
            gate = tl.sigmoid(tl.load(lg_ptr + gbase + (lo - 1) * C, mask=em, other=0.0))
            for r in range(3):
                off = base + (lo + r * L) * C
                hr = tl.load(h_ptr + off, mask=em, other=0.0)
                xr = tl.load(x_ptr + off, mask=em, other=0.0)
                tl.store(y_ptr + off, xr + hr * gate, mask=em)

    @triton.jit
    def _gate_bwd_kernel(
        gy_ptr, h_ptr, wg_ptr, gh_ptr, E, SG,
        L: tl.constexpr, C: tl.constexpr, BE: tl.constexpr,
    ):  # fmt: skip
        """gh = act'(h)ᵀ gy, the gate logits recomputed and their cotangent folded back into
        row 0 here (tf32x3 dots)."""
        DM: tl.constexpr = 3 * L + 1
        f = tl.program_id(1).to(tl.int64)
        e = tl.program_id(0).to(tl.int64) * BE + tl.arange(0, BE)
        em = (e < E)[:, None]
        c = tl.arange(0, C)
        base = (f * E + e)[:, None] * (DM * C) + c[None, :]
        h0 = tl.load(h_ptr + base, mask=em, other=0.0)
        s0 = tl.sigmoid(h0)
        gy0 = tl.load(gy_ptr + base, mask=em, other=0.0)
        gh0 = gy0 * (s0 * (1.0 + h0 * (1.0 - s0)))
        for lo in range(1, L + 1):
            wl = _gate_tile(wg_ptr, f, lo, c, SG, L, C)
            gate = tl.sigmoid(tl.dot(h0, wl, input_precision="tf32x3"))
            gg = tl.zeros((BE, C), tl.float32)
            for r in range(3):
                off = base + (lo + r * L) * C
                gyr = tl.load(gy_ptr + off, mask=em, other=0.0)
                gg += gyr * tl.load(h_ptr + off, mask=em, other=0.0)
                tl.store(gh_ptr + off, gyr * gate, mask=em)
            glg = gg * gate * (1.0 - gate)
            gh0 = tl.dot(glg, tl.trans(wl), gh0, input_precision="tf32x3")
        tl.store(gh_ptr + base, gh0, mask=em)


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
    F, E, _, C = x.shape
    L = lmax
    if precision == "ieee" or not _tma_capable(x.device):
        out = so2_linear(x, w0, wm, L, transpose)
        return out if res is None else out.add_(res)
    y = torch.empty_like(x)
    if cm.has_no_items(E) or cm.has_no_items(F):
        return y
    wh, wl, w_scale = sw.packed_weights(w0, wm, F, L, C, transpose, precision)
    primary = linear_config(precision, L, C)
    key = (x.device.type, x.device.index, precision, tuple(sorted(primary.items())))
    tried = [_WORKING[key]] if key in _WORKING else [primary, *FALLBACK_CONFIGS]
    for cfg in tried:
        be = cfg["BE"]
        rows = [TensorDescriptor.from_tensor(t.view(F, E, -1), [1, be, C])
                for t in (x, x if res is None else res, y)]  # fmt: skip
        wd = [TensorDescriptor.from_tensor(t, [C, C]) for t in (wh, wl)]
        try:
            n_rows = cfg.get("rows", 1)
            slots = launch.linear_slots(L, n_rows)
            cm.wrap(_linear_kernel)[(slots * triton.cdiv(E, be), F)](
                rows[0], rows[1], *wd, rows[2], 1.0 / w_scale,
                L=L, C=C, BE=be, RES=res is not None, MODE=sw.MODE_CODE[precision], ROWS=n_rows,
                SLOTS=slots,
                num_warps=cfg["warps"],
                num_stages=cfg["stages"],
            )  # fmt: skip
        except OutOfResources:  # not enough shared memory on this GPU: a smaller launch
            continue
        _WORKING[key] = cfg
        return y
    raise RuntimeError("so2_mix_layer: no launch configuration fits this GPU")


def _grid(E, F, be):
    return (triton.cdiv(E, be), F)


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
) -> tuple[torch.Tensor, torch.Tensor]:
    if _dispatch(x, lmax) == "reference":
        return so2_mix_layer_reference(x, w0, wm, wg, lmax, gated)
    if not gated:
        return _linear(x, x, w0, wm, lmax, False, precision), x.new_empty(0)
    F, E, _, C = x.shape
    h = _linear(x, None, w0, wm, lmax, False, precision)
    y = torch.empty_like(x)
    if not (cm.has_no_items(E) or cm.has_no_items(F)):
        lg = _gate_logits(h, wg, lmax)  # cuBLAS: faster here than dots inside the gate kernel
        gc = gate_config(lmax, C)
        cm.wrap(_gate_fwd_kernel)[_grid(E, F, gc["BE"])](x, h, lg, y, E, L=lmax, C=C, BE=gc["BE"],
                                                          num_warps=gc["fwd_warps"])  # fmt: skip
    return y, h


@_mix_op.register_fake
def _(x, w0, wm, wg, lmax, gated, precision):
    return torch.empty_like(x), (torch.empty_like(x) if gated else x.new_empty(0))


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
        gh = torch.empty_like(gy)
        gc = gate_config(lmax, C)
        cm.wrap(_gate_bwd_kernel)[_grid(E, F, gc["BE"])](gy, h, wg, gh, E, wg.shape[1], L=lmax,
                                                         C=C, BE=gc["BE"],
                                                         num_warps=gc["bwd_warps"],
                                                         num_stages=1)  # fmt: skip
    return _linear(gh, gy, w0, wm, lmax, True, precision)


@_mix_bwd_op.register_fake
def _(gy, h, w0, wm, wg, lmax, gated, precision):
    return torch.empty_like(gy)


def _setup(ctx, inputs, output):
    x, w0, wm, wg, lmax, gated, precision = inputs
    ctx.save_for_backward(output[1], w0, wm, wg)
    ctx.meta = (lmax, gated, precision)
    # h is saved for the backward, never differentiated: no zero-filled (F, E, Dm, C) cotangent
    ctx.set_materialize_grads(False)


def _backward(ctx, gy, _gh):
    if gy is None:  # y unused (grads are not materialised)
        return None, None, None, None, None, None, None
    h, w0, wm, wg = ctx.saved_tensors
    lmax, gated, precision = ctx.meta
    gx = torch.ops.mdband.so2_mix_layer_bwd(gy.contiguous(), h, w0, wm, wg, lmax, gated, precision)
    return gx, None, None, None, None, None, None


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
    y, _ = _mix_op(x.contiguous(), w0, wm, wg, lmax, gated, precision)
    return y
