"""split_matmul: ``y = x @ w`` in float32 by three TF32 tensor-core products per product.

Shapes (M rows, K inputs, N outputs)::

    x  (M, K)  float32, any strides (a transposed or sliced view is read in place)
    w  (K, N)  float32, any strides (read in place)
    y  (M, N)  float32, contiguous

The channel maps of a SeZM model between its edge and node kernels (radial MLPs, the radial
SO(2) mixer, the grid nets' per-frame projections) are GEMMs with K, N of 13–192 and M up to
the edge count. In float32 torch runs them as FFMA cuBLAS GEMMs (TF32 stays off: 10-bit
mantissas): DPA4-Mini at 4,096 atoms spent 3.98 ms of a 38.2 ms call in 56 such GEMMs on an
H200, at 28–38 TFLOP/s. Here each program computes a (BM × BN) block of y over K in steps of
BK with ``tl.dot(..., input_precision="tf32x3")``: x and w split into TF32 hi + lo parts and
hi·hi + hi·lo + lo·hi accumulated in fp32 (relative error ≈ 2⁻²¹ per product, like the SO(2)
stack's default; the lo·lo term, ≈ 2⁻²², is dropped). Bytes moved: x and y once (4·(K + N)
per row) plus w per program from L2; 6·M·K·N tensor-core FLOP.

Every output row is computed by the same sequence of operations whatever M is and wherever
the row sits in its tile, so a row's result does not depend on the other rows (chunked ==
unchunked evaluation bit for bit). Backward (closed form): ``gx = g @ wᵀ`` by this op (wᵀ a
copy), ``gw = xᵀ @ g`` by torch (exact fp32), each only when needed; both are differentiable,
so the op can be differentiated again. float64 (and CPU tensors unless Triton is forced)
take the reference, ``x @ w``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mdband.kernels import _common as cm

OP = "mdband::split_matmul"
#: one launch for every shape: rows, widest column block, widest k step, warps, stages (H200,
#: 2026-12-04, ``benchmarks/gpu_warps.py --matmul``: 64 columns per program beat 128 for N = 96
#: and 192, e.g. 0.077 against 0.140 ms at 110,592 × 96 × 96)
LAUNCH = {"BM": 128, "BN": 64, "BK": 32, "warps": 4, "stages": 3}
#: per pass: "auto" (the tf32x3 kernel for float32 on a GPU with TF32 tensor cores, or the
#: interpreter when forced) or "torch" (``x @ w`` by cuBLAS: exact fp32 FMAs)
KERNELS = {"fwd": "auto", "bwd": "auto"}


def split_matmul_reference(x: Tensor, w: Tensor) -> Tensor:
    """``x @ w`` by torch (the float64 path and the reference of the tests)."""
    return x @ w


if cm.TRITON_AVAILABLE:
    triton, tl = cm.triton, cm.tl

    @triton.jit
    def _split_matmul_kernel(
        x_ptr, w_ptr, y_ptr, M, N, K, sxm, sxk, swk, swn,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
    ):  # fmt: skip
        """y[rows, cols] of one (BM × BN) block, K in steps of BK."""
        row0 = tl.program_id(0).to(tl.int64) * BM  # 64-bit block bases, 32-bit offsets in it
        x_blk, y_blk = x_ptr + row0 * sxm, y_ptr + row0 * N
        r = tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        mm, nm = r < M - row0, rn < N
        acc = tl.zeros((BM, BN), tl.float32)
        for k0 in range(0, K, BK):
            rk = k0 + tl.arange(0, BK)
            km = rk < K
            xv = tl.load(x_blk + r[:, None] * sxm + rk[None, :] * sxk,
                         mask=mm[:, None] & km[None, :], other=0.0)  # fmt: skip
            wv = tl.load(w_ptr + rk[:, None] * swk + rn[None, :] * swn,
                         mask=km[:, None] & nm[None, :], other=0.0)  # fmt: skip
            acc += tl.dot(xv, wv, input_precision=PREC)
        tl.store(y_blk + r[:, None] * N + rn[None, :], acc, mask=mm[:, None] & nm[None, :])


def _applies(x: Tensor, w: Tensor, pas: str) -> bool:
    """Whether the kernel runs for ``x @ w`` in pass ``pas`` (:data:`KERNELS`)."""
    name = cm.kernel_choice(KERNELS, pas, ("auto", "torch"), "split_matmul")
    if name == "torch" or x.dtype != torch.float32 or w.dtype != torch.float32:
        return False
    if cm.select_backend(x.device, x.dtype) != "triton":
        return False
    return cm.interpret_mode() or cm.has_tf32_cores(x.device)


def _tile(n: int, cap: int) -> int:
    """A tl.dot tile width for n: a power of two, at least 16, at most ``cap``."""
    return max(16, min(cm.next_pow2(n), cap))


@torch.library.triton_op(OP, mutates_args=())
def _split_matmul_op(x: Tensor, w: Tensor) -> Tensor:
    M, K, N = x.shape[0], x.shape[1], w.shape[1]
    y = x.new_empty(M, N)
    if cm.has_no_items(M) or cm.has_no_items(N):
        return y
    if cm.has_no_items(K):
        return y.zero_()
    bm, bn, bk = LAUNCH["BM"], _tile(N, LAUNCH["BN"]), _tile(K, LAUNCH["BK"])
    grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
    cm.wrap(_split_matmul_kernel)[grid](
        x, w, y, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
        BM=bm, BN=bn, BK=bk, PREC="tf32x3", num_warps=LAUNCH["warps"],
        num_stages=LAUNCH["stages"],
    )  # fmt: skip
    return y


@_split_matmul_op.register_fake
def _(x, w):
    return x.new_empty(x.shape[0], w.shape[1])


def _setup(ctx, inputs, output):
    x, w = inputs
    ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, w)


def _backward(ctx, g):
    x, w = ctx.saved_tensors
    gx = gw = None
    if ctx.needs_input_grad[0]:
        # wᵀ copied (K·N floats): a program reads its (BK × BN) weight tile with unit stride,
        # where the strided view cost 3-8x the forward's time on an H200
        wt = w.t().contiguous()
        gx = _split_matmul_op(g, wt) if _applies(g, wt, "bwd") else g @ wt
    if ctx.needs_input_grad[1]:
        gw = x.t() @ g
    return gx, gw


_split_matmul_op.register_autograd(_backward, setup_context=_setup)


def split_matmul(x: Tensor, w: Tensor, fused: bool = True) -> Tensor:
    """``x @ w`` for x (..., K) and w (K, N): (..., N) (module docstring).

    ``fused``: the tf32x3 kernel where it applies (float32 on a GPU with TF32 tensor cores;
    :data:`KERNELS`), else, and always for float64 or ``fused=False``, torch's ``x @ w``.
    """
    if w.dim() != 2 or x.dim() < 1 or x.shape[-1] != w.shape[0]:
        raise ValueError(f"split_matmul: x (..., K) and w (K, N) expected, got "
                         f"{tuple(x.shape)} and {tuple(w.shape)}")  # fmt: skip
    if not fused or not _applies(x, w, "fwd"):
        return x @ w
    lead = x.shape[:-1]
    y = _split_matmul_op(x.reshape(-1, x.shape[-1]), w)
    return y.view(*lead, w.shape[1])
