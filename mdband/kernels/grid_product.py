"""grid_product: the grid nets' quadratic product ``B·((T·left) ⊙ (T·right))`` in one kernel.

Shapes (M nodes (and foci), D = (L+1)² coefficient rows, K frames, C channels per frame,
J = D·K, G grid points, J' = D'·K output rows, D' ≤ D)::

    t       (G, J)       to_grid T of :class:`mdband.model.grids.GridProjector`
    b       (J', G)      from_grid B, its first J' rows
    left    (M, D, K·C)  coefficients, row j = d·K + k at [d, k·C : (k+1)·C]; any strides
    right   (M, D, K·C)  with unit channel stride
    out     (M, D', K·C) out[m] = B·((T·left[m]) ⊙ (T·right[m])), contiguous

The torch path materialises both (M, G, C) grids and their product (≈ 0.18 GB each at 4,096
nodes of DPA4-Mini, G = 112, C = 96) and runs three FFMA GEMMs; here one program holds one node's
(G, BC) grid tiles in registers, so per node and channel block it reads left, right and the
constant T, B (from L2) and writes out: (2J + J')·C·s bytes per node (s = 4 or 8).

Backward (closed form, the grids recomputed)::

    gp = Bᵀ·gout,   gleft = Tᵀ·(gp ⊙ T·right),   gright = Tᵀ·(gp ⊙ T·left)

Accuracy: float32 dots with three TF32 products each (``tf32x3``, relative error per product ≈
2⁻²¹, like the SO(2) stack's default) on GPUs with TF32 tensor cores (sm80+), exact fp32 FMAs
elsewhere and when asked (``exact``: the model's ``stack_precision = "ieee"``); float64 exact
FMAs. The sums run over J (≤ 48) and G (≤ 200) terms in another order
than cuBLAS: fp32 rounding-level differences. Differentiable once (force evaluation); training
keeps the torch path (the ``kernels = "torch"`` setting).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mdband.kernels import _common as cm

OP = "mdband::grid_product"
OP_BWD = "mdband::grid_product_bwd"
#: launch of each pass: channels per program (one node, one channel block of BC) and warps
LAUNCH = {"fwd": {"BC": 32, "warps": 4}, "bwd": {"BC": 32, "warps": 4}}
#: per channel count C (per frame), launches that beat LAUNCH in ``benchmarks/grid_sweep.py``
#: on an H200 (4,096 nodes, forward + backward ms; 2026-12-02); C = 192 (Mini's readout, the
#: default's S2 FFN) keeps LAUNCH
SHAPE_LAUNCH = {
    96: {"fwd": {"BC": 32, "warps": 2}, "bwd": {"BC": 16, "warps": 2}},  # Mini FFN 0.85 → 0.76
    32: {"fwd": {"BC": 32, "warps": 2}, "bwd": {"BC": 32, "warps": 8}},  # message 0.78 → ≈0.38
}


def launch_of(pass_: str, channels: int) -> dict:
    """The launch ({BC, warps}) of pass ``"fwd"`` or ``"bwd"`` for C = ``channels``."""
    return SHAPE_LAUNCH.get(channels, LAUNCH)[pass_]


def grid_product_reference(t: Tensor, b: Tensor, left: Tensor, right: Tensor, k: int) -> Tensor:
    """out (M, J'/K, K·C) with torch GEMMs (differentiable to any order)."""
    M, D, KC = left.shape
    c = KC // k
    gl = t @ left.reshape(M, D * k, c)
    gr = t @ right.reshape(M, D * k, c)
    return (b @ (gl * gr)).reshape(M, b.shape[0] // k, KC)


def grid_product_bwd_reference(gout, t, b, left, right, k):
    M, D, KC = left.shape
    c = KC // k
    L, R = left.reshape(M, D * k, c), right.reshape(M, D * k, c)
    gp = b.T @ gout.reshape(M, -1, c)
    gl = t.T @ (gp * (t @ R))
    gr = t.T @ (gp * (t @ L))
    return gl.reshape(M, D, KC), gr.reshape(M, D, KC)


if cm.TRITON_AVAILABLE:
    triton, tl = cm.triton, cm.tl

    @triton.jit
    def _dot(a, b, PREC: tl.constexpr):
        if PREC == 1:
            out = tl.dot(a, b, input_precision="tf32x3")
        else:
            out = tl.dot(a, b, input_precision="ieee")
        return out

    @triton.jit
    def _coeff_tile(ptr, m, s0, s1, j, jm, c, cm_, K: tl.constexpr, C: tl.constexpr):
        """(JP, BC) tile of coefficient rows j (row j = d·K + k) of node m, channels c."""
        off = m * s0 + (j // K) * s1 + (j % K) * C
        return tl.load(ptr + off[:, None] + c[None, :], mask=jm[:, None] & cm_[None, :], other=0.0)

    @triton.jit
    def _grids(t_ptr, l_ptr, r_ptr, m, sl0, sl1, sr0, sr1, c, cmask, G, J,
               K: tl.constexpr, C: tl.constexpr, GP: tl.constexpr, JP: tl.constexpr,
               PREC: tl.constexpr):  # fmt: skip
        """T, and the grid values T·left, T·right of node m (GP, BC) (zero past G)."""
        g = tl.arange(0, GP)
        j = tl.arange(0, JP)
        jm = j < J
        T = tl.load(t_ptr + g[:, None] * J + j[None, :], mask=(g < G)[:, None] & jm[None, :],
                    other=0.0)  # fmt: skip
        gl = _dot(T, _coeff_tile(l_ptr, m, sl0, sl1, j, jm, c, cmask, K, C), PREC)
        gr = _dot(T, _coeff_tile(r_ptr, m, sr0, sr1, j, jm, c, cmask, K, C), PREC)
        return T, gl, gr

    @triton.jit
    def _program(t_ptr, l_ptr, r_ptr, sl0, sl1, sr0, sr1, G, J, JO,
                 K: tl.constexpr, C: tl.constexpr, GP: tl.constexpr, JP: tl.constexpr,
                 JOP: tl.constexpr, BC: tl.constexpr, PREC: tl.constexpr):  # fmt: skip
        """What both passes' programs start from: node m, channel block c (mask), grid points
        g, output rows jo (mask om), and T with the node's grids T·left, T·right."""
        m = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1) * BC + tl.arange(0, BC)
        cmask = c < C
        T, gl, gr = _grids(t_ptr, l_ptr, r_ptr, m, sl0, sl1, sr0, sr1, c, cmask, G, J,
                           K, C, GP, JP, PREC)  # fmt: skip
        jo = tl.arange(0, JOP)
        return m, c, cmask, tl.arange(0, GP), jo, jo < JO, T, gl, gr

    @triton.jit
    def _grid_fwd_kernel(
        t_ptr, b_ptr, l_ptr, r_ptr, out_ptr, G, J, JO,
        sl0, sl1, sr0, sr1,
        K: tl.constexpr, C: tl.constexpr, GP: tl.constexpr, JP: tl.constexpr,
        JOP: tl.constexpr, BC: tl.constexpr, PREC: tl.constexpr,
    ):  # fmt: skip
        m, c, cmask, g, jo, om, _, gl, gr = _program(
            t_ptr, l_ptr, r_ptr, sl0, sl1, sr0, sr1, G, J, JO, K, C, GP, JP, JOP, BC, PREC
        )
        B = tl.load(b_ptr + jo[:, None] * G + g[None, :], mask=om[:, None] & (g < G)[None, :],
                    other=0.0)  # fmt: skip
        out = _dot(B, gl * gr, PREC)  # (JOP, BC)
        tl.store(out_ptr + m * (JO * C) + jo[:, None] * C + c[None, :], out,
                 mask=om[:, None] & cmask[None, :])  # fmt: skip

    @triton.jit
    def _grid_bwd_kernel(
        t_ptr, b_ptr, l_ptr, r_ptr, go_ptr, gl_ptr, gr_ptr, G, J, JO,
        sl0, sl1, sr0, sr1,
        K: tl.constexpr, C: tl.constexpr, GP: tl.constexpr, JP: tl.constexpr,
        JOP: tl.constexpr, BC: tl.constexpr, PREC: tl.constexpr,
    ):  # fmt: skip
        m, c, cmask, g, jo, om, T, gl, gr = _program(
            t_ptr, l_ptr, r_ptr, sl0, sl1, sr0, sr1, G, J, JO, K, C, GP, JP, JOP, BC, PREC
        )
        Bt = tl.load(b_ptr + jo[None, :] * G + g[:, None], mask=om[None, :] & (g < G)[:, None],
                     other=0.0)  # fmt: skip
        go = tl.load(go_ptr + m * (JO * C) + jo[:, None] * C + c[None, :],
                     mask=om[:, None] & cmask[None, :], other=0.0)  # fmt: skip
        gp = _dot(Bt, go, PREC)  # (GP, BC)
        Tt = tl.trans(T)  # (JP, GP)
        j = tl.arange(0, JP)
        mask = (j < J)[:, None] & cmask[None, :]
        out = m * (J * C) + j[:, None] * C + c[None, :]
        tl.store(gl_ptr + out, _dot(Tt, gp * gr, PREC), mask=mask)
        tl.store(gr_ptr + out, _dot(Tt, gp * gl, PREC), mask=mask)


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


def _launch_args(t, b, left, right, k, exact, pass_):
    M, D, KC = left.shape
    C = KC // k
    launch = launch_of(pass_, C)
    G, J, JO = t.shape[0], t.shape[1], b.shape[0]
    p2 = cm.dot_width  # tl.dot tiles: every dimension a power of two, at least 16
    bc = min(p2(C), max(16, launch["BC"]))
    meta = dict(K=k, C=C, GP=p2(G), JP=p2(J), JOP=p2(JO), BC=bc, PREC=_precision(left, exact))
    grid = (M, triton.cdiv(C, bc))
    strides = (left.stride(0), left.stride(1), right.stride(0), right.stride(1))
    return grid, (G, J, JO, *strides), dict(meta, num_warps=launch["warps"])


@torch.library.triton_op(OP, mutates_args=())
def _grid_op(t: Tensor, b: Tensor, left: Tensor, right: Tensor, k: int, exact: bool) -> Tensor:
    M, _, KC = left.shape
    out = left.new_empty(M, b.shape[0] // k, KC)
    if cm.has_no_items(M):
        return out
    grid, sizes, meta = _launch_args(t, b, left, right, k, exact, "fwd")
    cm.wrap(_grid_fwd_kernel)[grid](t, b, left, right, out, *sizes, **meta)
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
    grid, sizes, meta = _launch_args(t, b, left, right, k, exact, "bwd")
    cm.wrap(_grid_bwd_kernel)[grid](t, b, left, right, gout, gl, gr, *sizes, **meta)
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
