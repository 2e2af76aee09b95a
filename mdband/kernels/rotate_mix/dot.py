"""rotate_mix's "dot" backward of radial rows (no mixer): source-node programs of tl.dot products.

The programs take BLOCK_EDGES edges per step as tl.dot products.

Same op, inputs and outputs as the edge backward (:mod:`.backward`; the math is the package
docstring's), for the mode without the mixer (y = xl · rad). One program per (source node n,
degree block b = l_in), grid N·NB, program pid = n·NB + b (the NB programs of a node run next to
each other, so the gy rows they share hit L2): the edge and node passes fused, no (E, Dm, C)
scratch. The programs walk the CSR by SOURCE, so the node features of a program's degree block,
xb = x[n, l²..l²+2l, :] (DOT_COLS, BC), are the same for every edge of its segment. The segment
is processed BLOCK_EDGES edges per step, as R = BLOCK_EDGES·SLOT_LANES rows r = i·SP + s (edge i
of the step, band slot s = m ∈ {0, −1, +1}, padded to SP = 4); ``coef`` (R, DOT_COLS) holds the
step's rotation entries D[e, l²+l+m, l²+j] of block b (zero off the block's entries, on padded
lanes and past the segment's end). Then::

    xl   = coef @ xb                 (R, BC)         the step's rotated rows of block b
    gxl  = gy · rad,  grad = gy · xl (block b's rows)
    grt  = gxl @ xbᵀ                 (R, DOT_COLS)   their rotation cotangent (entries stored)
    gx  += coefᵀ @ gxl               (DOT_COLS, BC)  over the segment: gx[n, block b]

tl.dot needs every dimension ≥ 16: DOT_COLS = max(16, JP) packed-column lanes (JP = the tables'
lane count, a power of two ≥ 2L+1; lanes ≥ JP masked), BLOCK_EDGES ≥ 4 (R ≥ 16), BC =
max(16, next_pow2(C)).

Accuracy: tl.dot at the tuning table's precision in float32 (default "tf32x3": three TF32
tensor-core products, to fp32's rounding) or "ieee" (exact fp32 / fp64 FMAs; float64 always);
the order of the sums differs from the edge kernels', so "dot" equals "edge" and the torch
reference to rounding (fp32 ~1e-6 relative, fp64 ~1e-15). Band and dense storages run the same
code on the same entries: bitwise identical. Deterministic: no atomics.

Bytes moved per edge (fp32, S = 4): the rotation entries (3D−2)·S (band; as many scattered
dense entries), each read by one program; gy and rad Dm·C·S; x[n] once per program (N·D·C·S in
all); writes grot entries (3D−2)·S, grad Dm·C·S and gx N·D·C·S. The edge kernels' (E, Dm, C)
cotangent round trip and the node kernel's second rotation read are gone.
"""

from __future__ import annotations

from mdband.kernels import _common as cm

#: smallest tl.dot dimension the kernels pad to
DOT_MIN = 16

if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    dot_block_rows = cm.dot_block_rows

    @triton.jit
    def _rows(er, rs, cc, stride_edge, stride_row, stride_chan):
        """Offsets (R, BC) of rows rs of edges er, channels cc, in an (E, Dm, C) tensor."""
        return er[:, None] * stride_edge + rs[:, None] * stride_row + cc[None, :] * stride_chan

    @triton.jit
    def _step_edges(perm_ptr, i0, end, SLOT_LANES: tl.constexpr, BLOCK_EDGES: tl.constexpr):
        """Return the edges of a step of BLOCK_EDGES edges at CSR positions i0 + i.

        Those ≥ end are masked. Per row r = i·SP + s its edge er and validity okr (R,).
        """
        R: tl.constexpr = BLOCK_EDGES * SLOT_LANES
        pos = i0 + tl.arange(0, BLOCK_EDGES)
        oke = pos < end
        ee = tl.load(perm_ptr + pos, mask=oke, other=0).to(tl.int64)
        er = tl.reshape(tl.broadcast_to(ee[:, None], (BLOCK_EDGES, SLOT_LANES)), (R,))
        okr = tl.reshape(tl.broadcast_to(oke[:, None], (BLOCK_EDGES, SLOT_LANES)), (R,))
        return er, okr

    @triton.jit
    def rotate_mix_dot_bwd_kernel(
        # pointers: inputs, the CSR by source, outputs; the storage's kernel tables
        x_ptr,
        rot_ptr,
        radial_ptr,
        gy_ptr,
        perm_ptr,
        offsets_ptr,
        gx_ptr,
        grot_ptr,
        grad_ptr,
        col_table_ptr,
        row_table_ptr,
        entry_a_ptr,
        entry_b_ptr,
        # sizes
        n_channels,
        # strides
        stride_x_node,
        stride_x_row,
        stride_x_chan,
        stride_rot_edge,
        stride_rot_a,
        stride_rot_b,
        stride_radial_edge,
        stride_radial_row,
        stride_radial_chan,
        stride_gy_edge,
        stride_gy_row,
        stride_gy_chan,
        stride_gx_node,
        stride_gx_row,
        stride_gx_chan,
        stride_grot_edge,
        stride_grot_a,
        stride_grot_b,
        stride_grad_edge,
        stride_grad_row,
        stride_grad_chan,
        # meta-parameters
        N_BLOCKS: tl.constexpr,
        COL_LANES: tl.constexpr,
        DOT_COLS: tl.constexpr,
        SLOT_LANES: tl.constexpr,
        BLOCK_EDGES: tl.constexpr,
        BLOCK_CHANNELS: tl.constexpr,
        LAYOUT: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        """Run the dot backward of one (source node n, degree block b = l_in) program.

        pid = n·NB + b. Writes block b's storage cotangent entries, grad rows and gx[n, block b].
        """
        pid = tl.program_id(0).to(tl.int64)
        n = pid // N_BLOCKS
        b = pid % N_BLOCKS
        beg = tl.load(offsets_ptr + n).to(tl.int64)
        end = tl.load(offsets_ptr + n + 1).to(tl.int64)
        cc, cmask, col, jm, sl, rs, rowm, m2, ia, ib, off = dot_block_rows(
            col_table_ptr,
            row_table_ptr,
            entry_a_ptr,
            entry_b_ptr,
            b,
            n_channels,
            stride_rot_a,
            stride_rot_b,
            COL_LANES,
            DOT_COLS,
            SLOT_LANES,
            BLOCK_EDGES,
            BLOCK_CHANNELS,
            LAYOUT,
        )
        dt = gx_ptr.dtype.element_ty
        goff = ia * stride_grot_a + ib * stride_grot_b
        jc = col.to(tl.int64)
        xb = tl.load(
            x_ptr + n * stride_x_node + jc[:, None] * stride_x_row + cc[None, :] * stride_x_chan,
            mask=jm[:, None] & cmask[None, :],
            other=0.0,
        )  # (DOT_COLS, BC), the same for every edge of the segment
        xbt = tl.trans(xb)
        acc = tl.zeros((DOT_COLS, BLOCK_CHANNELS), dtype=dt)
        for i0 in range(beg, end, BLOCK_EDGES):
            er, okr = _step_edges(perm_ptr, i0, end, SLOT_LANES, BLOCK_EDGES)
            coef = tl.load(
                rot_ptr + er[:, None] * stride_rot_edge + off, mask=okr[:, None] & m2, other=0.0
            )
            xl = tl.dot(coef, xb, input_precision=PRECISION, out_dtype=dt)  # (R, BC)
            rm = okr[:, None] & rowm
            rd = tl.load(
                radial_ptr
                + _rows(er, rs, cc, stride_radial_edge, stride_radial_row, stride_radial_chan),
                mask=rm,
                other=0.0,
            )
            gr = tl.load(
                gy_ptr + _rows(er, rs, cc, stride_gy_edge, stride_gy_row, stride_gy_chan),
                mask=rm,
                other=0.0,
            )
            gxl = gr * rd
            tl.store(
                grad_ptr + _rows(er, rs, cc, stride_grad_edge, stride_grad_row, stride_grad_chan),
                gr * xl,
                mask=rm,
            )
            grt = tl.dot(gxl, xbt, input_precision=PRECISION, out_dtype=dt)  # (R, DOT_COLS)
            tl.store(grot_ptr + er[:, None] * stride_grot_edge + goff, grt, mask=okr[:, None] & m2)
            acc = tl.dot(tl.trans(coef), gxl, acc, input_precision=PRECISION, out_dtype=dt)
        tl.store(
            gx_ptr
            + n * stride_gx_node
            + jc[:, None] * stride_gx_row
            + cc[None, :] * stride_gx_chan,
            acc,
            mask=jm[:, None] & cmask[None, :],
        )
