"""The SO(2) linear kernel of so2_mix_layer, with the gated layer's epilogue.

Shapes as in :mod:`mdband.kernels.so2_stack` (F focus streams, E edges, L = ``lmax``, Dm = 3L+1
rows, C channels): x, res, h, y (F, E, Dm, C); the weights packed into (F·Dm·2L·C, C) tile
stacks by :func:`.weights.packed_weights`. Two uses (launched by :mod:`.launch`):

* ``h = x·W (+ res)`` (or x·Wᵀ, the backward's transposed product), one launch (GATE = 0).
* a gated layer's ``h = x·W`` and ``y = x + act(h)`` from the same accumulators, in two
  launches. Launch A (GATE = 1: programs of output row 0 only; with two rows per program also
  row 1) writes ``y₀ = x₀ + silu(h₀)``, computes the gate logits ``h₀·Wg_l`` for l = 1..L in its
  epilogue (tf32x3 tensor-core dots, relative error ≈ 2⁻²¹, 2·L·C² FLOP per edge) and writes
  the gates ``g = sigmoid(h₀·Wg)`` (F, E, L·C); launch B (GATE = 2, every other row) writes
  ``y_r = x_r + h_r·g_{l(r)}``. h is stored only when a backward needs it (SAVE). Against the
  unfused route (h written, the logits by a cuBLAS GEMM, an elementwise kernel reading x, h and
  the logits and writing y) this saves per edge one write of the logits and one read of h and
  of x (x comes from L2 here: the residual row is one the k-loop just read): (2·Dm·C + L·C)·4
  bytes, 5.9 kB at L = 3, C = 64, and one launch of each of the two other kernels; it adds the
  gates' write and their reads by launch B, (1 + 3)·L·C·4 bytes (3.1 kB).
"""

from __future__ import annotations

from mdband.kernels import _common as cm

if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    from mdband.kernels.so2_stack.gate import gate_tile
    from mdband.kernels.so2_stack.split_dots import row_dot, split_x

    @triton.jit
    def _gated_row(
        res_desc,
        gates_desc,
        focus,
        e0,
        row,
        acc,
        LMAX: tl.constexpr,
        CHANNELS: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
    ):
        """y_row = x_row + h_row · g_l (row > 0 of degree l), as a [1, BE, C] tile."""
        lj = tl.where(row <= LMAX, row, (row - LMAX - 1) % LMAX + 1)
        xj = res_desc.load([focus, e0, row * CHANNELS]).reshape(BLOCK_EDGES, CHANNELS)
        gj = gates_desc.load([focus, e0, (lj - 1) * CHANNELS]).reshape(BLOCK_EDGES, CHANNELS)
        return (xj + acc * gj).reshape(1, BLOCK_EDGES, CHANNELS)

    @triton.jit
    def so2_linear_kernel(
        # TMA descriptors and pointers
        x_desc,
        res_desc,
        w_hi_desc,
        w_lo_desc,
        y_desc,
        weight_inv_scale: tl.float64,  # a power of two (see cm.scalar_as)
        out_desc,
        gates_desc,
        gate_weight_ptr,
        stride_gate_weight_row,
        # meta-parameters
        LMAX: tl.constexpr,
        CHANNELS: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        RESIDUAL: tl.constexpr,
        MODE: tl.constexpr,
        ROWS: tl.constexpr,
        SLOTS: tl.constexpr,
        GATE: tl.constexpr,
        SAVE: tl.constexpr,
        N_SLOTS: tl.constexpr,
        FIRST_SLOT: tl.constexpr,
    ):
        """Compute rows j0, j1 of h = x·W (+ res) on BLOCK_EDGES edges of focus f.

        acc (BE, C) each, one k-loop.

        TMA descriptors: x, res, y, out, gates (F, E, ·), tiles [1, BE, C] (zero-filled /
        clipped past E); w_hi, w_lo (F·Dm·2L·C, C), tiles [C, C]: tile (f, j, k) is the block of
        W feeding row j from input row k of the row's k-list, stored [c_out][c_in] (K-major),
        split by :func:`.weights.pack_weights` in the mode MODE:
        0 tf32x3: W = w_hi + w_lo (TF32), x = xh + xl in registers, acc += xl·wh + xh·wl + xh·wh;
        1 fp16x3: the same products in fp16, lo parts scaled by 2¹¹ into their own accumulator;
        each edge's row segment of an x tile scaled by the power of two that puts its largest
        element in [2¹³, 2¹⁴) (:func:`.split_dots.row_scales`, undone on the tile's products),
        W by the power of two 1 / weight_inv_scale (undone at the end);
        2 fp16: acc += xh·wh, one fp16 product (scaled as in fp16x3).
        ROWS = 1: one output row per program (j1 = j0). ROWS = 2: two rows of one m-group
        (which read the same x rows) per program, so each x tile is loaded and split once for
        both: the m = 0 rows in pairs (0, 1), (2, 3), … (an odd last row computed twice and
        stored twice, the same values), the 2L |m| = 1 rows in L pairs. Each row's products and
        their order are those of ROWS = 1. SLOTS: row slots per edge block
        (:func:`.launch.linear_slots`); this launch runs N_SLOTS of them from FIRST_SLOT on.
        GATE = 0: y = h (+ res). GATE = 1 (slot 0, launch A) and 2 (the other slots, launch
        B): the gated layer's epilogue of the module docstring (res = x; y = h, stored iff
        SAVE; out = x + act(h); gates written by A and read by B; the gate weights (C, F·L·C)
        at gate_weight_ptr, row stride stride_gate_weight_row).
        """
        L: tl.constexpr = LMAX
        C: tl.constexpr = CHANNELS
        BE: tl.constexpr = BLOCK_EDGES
        DM: tl.constexpr = 3 * L + 1
        NK: tl.constexpr = 2 * L
        G0: tl.constexpr = SLOTS - L  # programs of m = 0 row pairs (ROWS = 2)
        # one flat axis (row slot fastest, as the x tile of BE edges stays in L2 for its
        # slots): grid axis 1 holds at most 65,535 blocks, E / BE exceeds it from 4.2 M edges
        pid = tl.program_id(0)
        slot = pid % N_SLOTS + FIRST_SLOT
        f = tl.program_id(1)
        e0 = (pid // N_SLOTS) * BE
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
            xa = x_desc.load([f, e0, (xr0 + k) * C]).reshape(BE, C)
            xh, xl, inv = split_x(xa, MODE)
            wr0 = wrow0 + k * C
            acc0 = row_dot(xh, xl, inv, w_hi_desc.load([wr0, 0]), w_lo_desc, wr0, acc0, MODE)
            if ROWS == 2:
                wr1 = wrow1 + k * C
                acc1 = row_dot(xh, xl, inv, w_hi_desc.load([wr1, 0]), w_lo_desc, wr1, acc1, MODE)
        if MODE != 0:
            scale = cm.scalar_as(weight_inv_scale, tl.float32)
            acc0 = acc0 * scale
            acc1 = acc1 * scale
        if GATE == 0:
            if RESIDUAL:
                acc0 += res_desc.load([f, e0, j0 * C]).reshape(BE, C)
            y_desc.store([f, e0, j0 * C], acc0.reshape(1, BE, C))
            if ROWS == 2:
                if RESIDUAL:
                    acc1 += res_desc.load([f, e0, j1 * C]).reshape(BE, C)
                y_desc.store([f, e0, j1 * C], acc1.reshape(1, BE, C))
        else:
            if SAVE:
                y_desc.store([f, e0, j0 * C], acc0.reshape(1, BE, C))
                if ROWS == 2:
                    y_desc.store([f, e0, j1 * C], acc1.reshape(1, BE, C))
            if GATE == 1:  # j0 = 0 (and j1 = 1 with two rows)
                x0 = res_desc.load([f, e0, 0]).reshape(BE, C)
                out_desc.store([f, e0, 0], (x0 + acc0 * tl.sigmoid(acc0)).reshape(1, BE, C))
                c = tl.arange(0, C)
                for lo in tl.static_range(1, L + 1):
                    wgl = gate_tile(gate_weight_ptr, f, lo, c, stride_gate_weight_row, L, C)
                    gate = tl.sigmoid(tl.dot(acc0, wgl, input_precision="tf32x3"))
                    gates_desc.store([f, e0, (lo - 1) * C], gate.reshape(1, BE, C))
                    if ROWS == 2 and lo == 1:
                        x1 = res_desc.load([f, e0, C]).reshape(BE, C)
                        out_desc.store([f, e0, C], (x1 + acc1 * gate).reshape(1, BE, C))
            else:
                out_desc.store(
                    [f, e0, j0 * C], _gated_row(res_desc, gates_desc, f, e0, j0, acc0, L, C, BE)
                )
                if ROWS == 2:
                    out_desc.store(
                        [f, e0, j1 * C], _gated_row(res_desc, gates_desc, f, e0, j1, acc1, L, C, BE)
                    )
