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
uses the torch path. Layout: the layer works in the edge frame (no rotation storage is read).

The linear map, 2·C²·((L+1)² + 4L²) FLOP per edge (426 kFLOP at L = 3, C = 64):
``precision = "ieee"``: exact fp32 cuBLAS GEMMs (complex product with three GEMMs);
``"tf32x3"`` (GPUs with TMA, sm90+, and the interpreter): a Triton kernel (:mod:`.linear`), one
(BE × C) output row block per program; tiles come by TMA, x is split in registers and the
weights once per call into TF32 pairs (round to nearest, :mod:`.weights`, :mod:`.split_dots`),
and three TF32 tensor-core products replace each fp32 product (relative error per product ≈
2⁻²¹; end to end about 2e-7 relative); ``fp16x3`` the same 22 bits in fp16 parts with per-row
scales, ``fp16`` one fp16 product (≈ 2⁻¹¹). Bytes moved per edge and layer: x read once per
output row that uses it (Dm·(2L)·C·4 B from L2), y written once (Dm·C·4 B); the weights,
2 × 4·Dm·2L·C² B, stay in L2.

Gate, forward: with the Triton linear kernel the gate is its epilogue (the logits from row 0's
accumulator by tf32x3 dots, y written beside h, h only when a backward will need it); on the
ieee path the logits h[:, 0]·Wg come from a cuBLAS GEMM and an elementwise kernel
(:mod:`.gate`) reads x, h, the logits and writes y (3·Dm·C·4 + 4·L·C bytes per edge, 8.4 kB at
L = 3, C = 64). Backward: the gate kernel recomputes the logits and folds their cotangent back
into row 0 itself (tf32x3 tensor-core dots, relative error ≈ 2⁻²¹, 4·L·C² FLOP per edge),
reading gy and h and writing gh (no logit buffer, no GEMMs). In ``fp16x3`` it writes gh
already split into fp16 parts with a scale per edge and row, which the product reads as they
are (:mod:`.presplit`). Launches: the tuning table's ``so2_stack`` record
(:mod:`mdband.kernels.tuning`; :mod:`.launch`).

Modules: :mod:`.reference` (torch), :mod:`.weights` (weight tiles and their splits),
:mod:`.split_dots`, :mod:`.linear`, :mod:`.gate`, :mod:`.presplit` (Triton kernels),
:mod:`.launch`, :mod:`.op` (dispatch, ``triton_op`` registration with fake and closed-form
backward, the public function).
"""

from mdband.kernels.so2_stack.op import (
    CHANNELS,
    OP,
    OP_BWD,
    PRECISIONS,
    backend,
    kernel_supports,
    so2_mix_layer,
)
from mdband.kernels.so2_stack.reference import (
    so2_linear,
    so2_mix_layer_bwd_reference,
    so2_mix_layer_reference,
)

__all__ = [
    "CHANNELS",
    "OP",
    "OP_BWD",
    "PRECISIONS",
    "backend",
    "kernel_supports",
    "so2_linear",
    "so2_mix_layer",
    "so2_mix_layer_bwd_reference",
    "so2_mix_layer_reference",
]
