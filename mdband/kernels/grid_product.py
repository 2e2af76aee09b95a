"""grid_product: the grid nets' quadratic product ``B·((T·left) ⊙ (T·right))`` in one kernel.

Shapes (M nodes (and foci), D = (L+1)² coefficient rows, K frames, C channels per frame,
J = D·K, G grid points, J' = D'·K output rows, D' ≤ D)::

    t       (G, J)       to_grid T of :class:`mdband.model.grids.GridProjector`
    b       (J', G)      from_grid B, its first J' rows
    left    (M, D, K·C)  coefficients, row j = d·K + k at [d, k·C : (k+1)·C]; any strides
    right   (M, D, K·C)  with unit channel stride
    out     (M, D', K·C) out[m] = B·((T·left[m]) ⊙ (T·right[m])), contiguous

The torch path materialises both (M, G, C) grids and their product (M·G·C elements each) and
runs three FFMA GEMMs; here one program holds one node's
(G, BC) grid tiles in registers, so per node and channel block it reads left, right and the
constant T, B (from L2) and writes out: (2J + J')·C·s bytes per node (s = 4 or 8).

Backward (closed form, the grids recomputed)::

    gp = Bᵀ·gout,   gleft = Tᵀ·(gp ⊙ T·right),   gright = Tᵀ·(gp ⊙ T·left)

Accuracy: float32 dots with three TF32 products each (``tf32x3``, relative error per product ≈
2⁻²¹, like the SO(2) stack's default) on GPUs with TF32 tensor cores (sm80+), exact fp32 FMAs
elsewhere and when asked (``exact``: the model's ``stack_precision = "ieee"``); float64 exact
FMAs. The sums run over J (≤ 48) and G (≤ 200) terms in another order
than cuBLAS: fp32 rounding-level differences. Differentiable once (force evaluation); training
keeps the torch path (the ``kernels = "torch"`` setting). Launches (channels per program and
warps, per pass and channel count): the tuning table's ``grid_product`` record.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mdband.kernels import _common as cm
from mdband.kernels import tuning

OP = "mdband::grid_product"
OP_BWD = "mdband::grid_product_bwd"


def grid_product_reference(t: Tensor, b: Tensor, left: Tensor, right: Tensor, k: int) -> Tensor:
    """Compute out (M, J'/K, K·C) with torch GEMMs (differentiable to any order)."""
    M, D, KC = left.shape
    c = KC // k
    gl = t @ left.reshape(M, D * k, c)
    gr = t @ right.reshape(M, D * k, c)
    return (b @ (gl * gr)).reshape(M, b.shape[0] // k, KC)


def grid_product_bwd_reference(gout, t, b, left, right, k):
    """Return (gleft, gright), each (M, D, K·C), of the closed-form backward with torch GEMMs."""
    M, D, KC = left.shape
    c = KC // k
    L, R = left.reshape(M, D * k, c), right.reshape(M, D * k, c)
    gp = b.T @ gout.reshape(M, -1, c)
    gl = t.T @ (gp * (t @ R))
    gr = t.T @ (gp * (t @ L))
    return gl.reshape(M, D, KC), gr.reshape(M, D, KC)


if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl
    from triton.runtime.errors import OutOfResources

    @triton.jit
    def _dot(a, b, PRECISION: tl.constexpr):
        if PRECISION == 1:
            out = tl.dot(a, b, input_precision="tf32x3")
        else:
            out = tl.dot(a, b, input_precision="ieee")
        return out

    @triton.jit
    def _coeff_tile(
        coeff_ptr,
        node,
        stride_node,
        stride_row,
        rows,
        row_mask,
        chans,
        chan_mask,
        FRAMES: tl.constexpr,
        CHANNELS: tl.constexpr,
    ):
        """Load the (JP, BC) tile of coefficient rows ``rows`` of the node, channels ``chans``.

        Row j = d·K + k.
        """
        off = node * stride_node + (rows // FRAMES) * stride_row + (rows % FRAMES) * CHANNELS
        return tl.load(
            coeff_ptr + off[:, None] + chans[None, :],
            mask=row_mask[:, None] & chan_mask[None, :],
            other=0.0,
        )

    @triton.jit
    def _program(
        to_grid_ptr,
        left_ptr,
        right_ptr,
        strides,
        n_grid,
        n_rows,
        n_out_rows,
        FRAMES: tl.constexpr,
        CHANNELS: tl.constexpr,
        BLOCK_GRID: tl.constexpr,
        BLOCK_ROWS: tl.constexpr,
        BLOCK_OUT_ROWS: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        """Set up what both passes' programs start from.

        Node m, channel block c (mask), grid points g, output rows jo (mask om), and T with the
        node's grid values T·left, T·right (BLOCK_GRID, BC) (zero past G). ``strides``: left's and
        right's node and row strides.
        """
        sl0, sl1, sr0, sr1 = strides
        m = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1) * BLOCK_CHANNELS + tl.arange(0, BLOCK_CHANNELS)
        cmask = c < CHANNELS
        g = tl.arange(0, BLOCK_GRID)
        j = tl.arange(0, BLOCK_ROWS)
        jm = j < n_rows
        T = tl.load(
            to_grid_ptr + g[:, None] * n_rows + j[None, :],
            mask=(g < n_grid)[:, None] & jm[None, :],
            other=0.0,
        )
        gl = _dot(
            T, _coeff_tile(left_ptr, m, sl0, sl1, j, jm, c, cmask, FRAMES, CHANNELS), PRECISION
        )
        gr = _dot(
            T, _coeff_tile(right_ptr, m, sr0, sr1, j, jm, c, cmask, FRAMES, CHANNELS), PRECISION
        )
        jo = tl.arange(0, BLOCK_OUT_ROWS)
        return m, c, cmask, tl.arange(0, BLOCK_GRID), jo, jo < n_out_rows, T, gl, gr

    @triton.jit
    def grid_product_fwd_kernel(
        # pointers
        to_grid_ptr,
        from_grid_ptr,
        left_ptr,
        right_ptr,
        out_ptr,
        # sizes
        n_grid,
        n_rows,
        n_out_rows,
        # strides
        stride_left_node,
        stride_left_row,
        stride_right_node,
        stride_right_row,
        # meta-parameters
        FRAMES: tl.constexpr,
        CHANNELS: tl.constexpr,
        BLOCK_GRID: tl.constexpr,
        BLOCK_ROWS: tl.constexpr,
        BLOCK_OUT_ROWS: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        """Compute out[m] = B·((T·left[m]) ⊙ (T·right[m])) of node m = program_id(0).

        One channel block per program (program_id(1)).
        """
        strides = (stride_left_node, stride_left_row, stride_right_node, stride_right_row)
        m, c, cmask, g, jo, om, _, gl, gr = _program(
            to_grid_ptr,
            left_ptr,
            right_ptr,
            strides,
            n_grid,
            n_rows,
            n_out_rows,
            FRAMES,
            CHANNELS,
            BLOCK_GRID,
            BLOCK_ROWS,
            BLOCK_OUT_ROWS,
            BLOCK_CHANNELS,
            PRECISION,
        )
        B = tl.load(
            from_grid_ptr + jo[:, None] * n_grid + g[None, :],
            mask=om[:, None] & (g < n_grid)[None, :],
            other=0.0,
        )
        out = _dot(B, gl * gr, PRECISION)  # (BLOCK_OUT_ROWS, BC)
        tl.store(
            out_ptr + m * (n_out_rows * CHANNELS) + jo[:, None] * CHANNELS + c[None, :],
            out,
            mask=om[:, None] & cmask[None, :],
        )

    @triton.jit
    def grid_product_bwd_kernel(
        # pointers
        to_grid_ptr,
        from_grid_ptr,
        left_ptr,
        right_ptr,
        gout_ptr,
        gleft_ptr,
        gright_ptr,
        # sizes
        n_grid,
        n_rows,
        n_out_rows,
        # strides
        stride_left_node,
        stride_left_row,
        stride_right_node,
        stride_right_row,
        # meta-parameters
        FRAMES: tl.constexpr,
        CHANNELS: tl.constexpr,
        BLOCK_GRID: tl.constexpr,
        BLOCK_ROWS: tl.constexpr,
        BLOCK_OUT_ROWS: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        """Compute gleft and gright of node m, one channel block per program (grids recomputed).

        gp = Bᵀ·gout, gleft = Tᵀ·(gp ⊙ T·right), gright = Tᵀ·(gp ⊙ T·left).
        """
        strides = (stride_left_node, stride_left_row, stride_right_node, stride_right_row)
        m, c, cmask, g, jo, om, T, gl, gr = _program(
            to_grid_ptr,
            left_ptr,
            right_ptr,
            strides,
            n_grid,
            n_rows,
            n_out_rows,
            FRAMES,
            CHANNELS,
            BLOCK_GRID,
            BLOCK_ROWS,
            BLOCK_OUT_ROWS,
            BLOCK_CHANNELS,
            PRECISION,
        )
        Bt = tl.load(
            from_grid_ptr + jo[None, :] * n_grid + g[:, None],
            mask=om[None, :] & (g < n_grid)[:, None],
            other=0.0,
        )
        go = tl.load(
            gout_ptr + m * (n_out_rows * CHANNELS) + jo[:, None] * CHANNELS + c[None, :],
            mask=om[:, None] & cmask[None, :],
            other=0.0,
        )
        gp = _dot(Bt, go, PRECISION)  # (BLOCK_GRID, BC)
        Tt = tl.trans(T)  # (BLOCK_ROWS, BLOCK_GRID)
        j = tl.arange(0, BLOCK_ROWS)
        mask = (j < n_rows)[:, None] & cmask[None, :]
        out = m * (n_rows * CHANNELS) + j[:, None] * CHANNELS + c[None, :]
        tl.store(gleft_ptr + out, _dot(Tt, gp * gr, PRECISION), mask=mask)
        tl.store(gright_ptr + out, _dot(Tt, gp * gl, PRECISION), mask=mask)


def backend(device, dtype) -> tuple[str, str]:
    """(backend, reason): Triton for float32/float64 on CUDA (or forced), else the reference."""
    if not cm.TRITON_AVAILABLE:
        return "reference", "reference: Triton is not installed"
    name = cm.select_backend(device, dtype)
    return name, f"{name} on {torch.device(device).type} ({dtype})"


def _precision(x: Tensor, exact: bool) -> int:
    """1: tf32x3 dots (float32 on a GPU with TF32 tensor cores); 0: exact FMAs."""
    if exact or x.dtype != torch.float32 or x.device.type != "cuda":
        return 0
    return int(cm.has_tf32_cores(x.device))


def _launch_args(t, b, left, right, k, exact, pass_, channels=None):
    """Return (grid, sizes and strides, meta) of pass ``"fwd"`` or ``"bwd"``.

    At the tuning table's grid_product launch for C = ``left.shape[2] / k`` channels per frame
    (``channels``: that many channels per program instead of the table's).
    """
    M, D, KC = left.shape
    C = KC // k
    launch = tuning.current().grid_product.launch(pass_, C)
    G, J, JO = t.shape[0], t.shape[1], b.shape[0]
    p2 = cm.dot_width  # tl.dot tiles: every dimension a power of two, at least 16
    bc = min(p2(C), max(16, launch.channels if channels is None else channels))
    meta = dict(
        FRAMES=k,
        CHANNELS=C,
        BLOCK_GRID=p2(G),
        BLOCK_ROWS=p2(J),
        BLOCK_OUT_ROWS=p2(JO),
        BLOCK_CHANNELS=bc,
        PRECISION=_precision(left, exact),
        num_warps=launch.warps,
    )
    grid = (M, triton.cdiv(C, bc))
    strides = (left.stride(0), left.stride(1), right.stride(0), right.stride(1))
    return grid, (G, J, JO, *strides), meta


#: (device, pass, T's and B's shapes, C, dtype, the table's launch) -> channels per program that
#: fit shared memory
#: (0: none does; the pass runs as torch GEMMs)
_FITTED: dict[tuple, int] = {}


def _launch_fitting(kernel, pass_, t, b, left, right, k, exact, tensors) -> bool:
    """Launch ``kernel`` on ``tensors`` at the table's launch, or at fewer channels where it must.

    Where the table's tiles do not fit the GPU's shared memory (lmax 4 grids of wide models), the
    launch takes half the channels per program, down to 16; False where none fits (the caller
    computes the pass with torch GEMMs). The launch that fit is kept per device and shape, so every
    later call (and a CUDA-graph capture) starts there.
    """
    table = tuning.current().grid_product.launch(pass_, left.shape[2] // k)
    key: tuple = (
        left.device,
        pass_,
        tuple(t.shape),
        tuple(b.shape),
        left.shape[2] // k,
        left.dtype,
    )
    key += (table,)  # a changed table (tuning.override) is a new key
    channels = _FITTED.get(key)
    if channels == 0:
        return False
    while True:
        grid, sizes, meta = _launch_args(t, b, left, right, k, exact, pass_, channels)
        try:
            cm.wrap(kernel)[grid](*tensors, *sizes, **meta)
        except OutOfResources:
            if meta["BLOCK_CHANNELS"] <= 16:
                _FITTED[key] = 0
                return False
            channels = meta["BLOCK_CHANNELS"] // 2
            continue
        _FITTED[key] = meta["BLOCK_CHANNELS"]
        return True


@torch.library.triton_op(OP, mutates_args=())
def _grid_op(t: Tensor, b: Tensor, left: Tensor, right: Tensor, k: int, exact: bool) -> Tensor:
    M, _, KC = left.shape
    out = left.new_empty(M, b.shape[0] // k, KC)
    if cm.has_no_items(M):
        return out
    tensors = (t, b, left, right, out)
    if not _launch_fitting(grid_product_fwd_kernel, "fwd", t, b, left, right, k, exact, tensors):
        out.copy_(grid_product_reference(t, b, left, right, k))
    return out


@_grid_op.register_fake
def _(t, b, left, right, k, exact):
    return left.new_empty(left.shape[0], b.shape[0] // k, left.shape[2])


@torch.library.triton_op(OP_BWD, mutates_args=())
def _grid_bwd_op(
    gout: Tensor, t: Tensor, b: Tensor, left: Tensor, right: Tensor, k: int, exact: bool
) -> tuple[Tensor, Tensor]:
    gl = left.new_empty(left.shape)
    gr = left.new_empty(left.shape)
    if cm.has_no_items(left.shape[0]):
        return gl, gr
    tensors = (t, b, left, right, gout, gl, gr)
    if not _launch_fitting(grid_product_bwd_kernel, "bwd", t, b, left, right, k, exact, tensors):
        ref_l, ref_r = grid_product_bwd_reference(gout, t, b, left, right, k)
        gl.copy_(ref_l)
        gr.copy_(ref_r)
    return gl, gr


@_grid_bwd_op.register_fake
def _(gout, t, b, left, right, k, exact):
    return left.new_empty(left.shape), left.new_empty(left.shape)


def _setup(ctx, inputs, output):
    t, b, left, right, k, exact = inputs
    ctx.save_for_backward(t, b, left, right)
    ctx.meta = (k, exact)


def _backward(ctx, gout):
    t, b, left, right = ctx.saved_tensors
    gl, gr = torch.ops.mdband.grid_product_bwd(gout.contiguous(), t, b, left, right, *ctx.meta)
    return None, None, gl, gr, None, None


_grid_op.register_autograd(_backward, setup_context=_setup)


def grid_product(
    t: Tensor, b: Tensor, left: Tensor, right: Tensor, k: int, exact: bool = False
) -> Tensor:
    """``B·((T·left) ⊙ (T·right))`` per node: left, right (M, D, K·C), out (M, J'/K, K·C).

    ``t`` (G, D·K) and ``b`` (J', G) are the projector's matrices in the inputs' dtype; ``k``
    the frame count K; ``exact``: fp32 FMAs also where tf32x3 dots would run. Differentiable
    once in left and right (T and B are constants).
    """
    M, D, KC = left.shape
    if right.shape != left.shape or KC % k or t.shape[1] != D * k or b.shape[1] != t.shape[0]:
        raise ValueError(
            f"grid_product: left/right {tuple(left.shape)}/{tuple(right.shape)} do not match "
            f"T {tuple(t.shape)}, B {tuple(b.shape)} with {k} frames"
        )
    if backend(left.device, left.dtype)[0] == "reference":
        return grid_product_reference(t, b, left, right, k)

    def unit_channels(x):
        # traced by torch.compile, the launch keeps x's strides as constants while inductor
        # may lay out a view's base (the [left | right] halves of one tensor) another way:
        # there the op gets its own contiguous copy
        if torch.compiler.is_compiling():
            return x.contiguous()
        return x if x.stride(2) == 1 else x.contiguous()

    lft, rgt = unit_channels(left), unit_channels(right)
    return _grid_op(t.contiguous(), b.contiguous(), lft, rgt, k, bool(exact))
