"""seed_mlp: the environment seed's edge MLPs in one pass per edge block, forward and backward.

Shapes (E edges; R radial functions, P = ``rbf_out``, T type-embedding width, H hidden, Q
embedding width; sezm-architecture.md §2.3)::

    rbf           (E, R)      the radial basis of each edge
    t_src, t_dst  (E,) int64  the types of each edge's source and destination atom
    table         (n, T)      the seed's type embedding (``env_type_embed``)
    w1 (R, P), w2 (P, P), w3 (P + 2T, H), w4 (H, Q)   the MLPLayer matrices (no biases)
    g             (E, Q)

    rp = silu(rbf @ w1) @ w2                         (rbf_proj_layer1, rbf_proj_layer2)
    g  = silu([rp, table[t_src], table[t_dst]] @ w3) @ w4        (g_layer1, g_layer2)

Backward (closed form, forward recomputed in registers): for the cotangent gg (E, Q) only
``grbf = ((((gg w4ᵀ) ⊙ silu'(h3)) w3[:P]ᵀ w2ᵀ) ⊙ silu'(h1)) w1ᵀ`` (h1, h3 the two
pre-activations); no gradients for the weights or the table: the op serves force evaluation
(frozen weights), training takes the torch path (:func:`seed_mlp_reference`, any order).

The torch path runs each layer as a GEMM plus elementwise kernels and concatenates the type
rows, about fifteen passes over (E, 32–64) edge tensors forward and backward. Here a program
keeps BLOCK_EDGES edges' whole chain in registers: forward reads rbf and two type indices
(4·R + 16 B per edge in float32) and writes g (4·Q B); backward reads rbf, the indices and gg
and writes grbf (4·(2R + Q) + 16 B). Products are tl.dot tiles (every width padded to a power
of two ≥ 16) at ``tf32x3`` (three TF32 tensor-core products, relative error ≈ 2⁻²¹ each);
float32 only (float64 takes the torch path). Launch and on/off switch: the tuning table's
``seed_mlp`` record (BENCHMARKS.md "2026-12-04 (second session)": faster than the torch path
at DPA4-Mini's and the default config's widths; fewer edges per program spill registers).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn.functional import silu

from mdband.kernels import _common as cm
from mdband.kernels import tuning

OP = "mdband::seed_mlp"
OP_BWD = "mdband::seed_mlp_bwd"


def seed_mlp_reference(
    rbf: Tensor,
    t_src: Tensor,
    t_dst: Tensor,
    table: Tensor,
    w1: Tensor,
    w2: Tensor,
    w3: Tensor,
    w4: Tensor,
) -> Tensor:
    """Compute g (E, Q) by torch (differentiable to any order, also in the weights)."""
    rp = silu(rbf @ w1) @ w2
    z = torch.cat([rp, table[t_src], table[t_dst]], dim=-1)
    return silu(z @ w3) @ w4


def enabled() -> bool:
    """Whether the tuning table asks for the op ("op") or the torch path ("torch")."""
    return tuning.current().seed_mlp.kernels == "op"


def applies(dtype: torch.dtype) -> bool:
    """Whether a model calls the op: :func:`enabled` and float32 (the kernels' one dtype)."""
    return enabled() and dtype == torch.float32


if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    @triton.jit
    def _chain(
        pointers,
        sizes,
        BLOCK_EDGES: tl.constexpr,
        BLOCK_RADIAL: tl.constexpr,
        BLOCK_PROJ: tl.constexpr,
        BLOCK_TYPE: tl.constexpr,
        BLOCK_HIDDEN: tl.constexpr,
        BLOCK_OUT: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        """Run the forward chain of the program's edges.

        Returns the program's edges (e, mask) and the forward chain: (h1, h3, a3) and the weight
        tiles the backward reads (w1, w2, w3's first P rows, w4). ``pointers``: rbf, the two type
        indices, the table and w1..w4; ``sizes``: (E, R, P, T, H, Q); the edges per program and the
        padded widths of R, P, T, H, Q.
        """
        rbf_ptr, ts_ptr, td_ptr, tab_ptr, w1_ptr, w2_ptr, w3_ptr, w4_ptr = pointers
        E, R, P, T, H, Q = sizes
        BE: tl.constexpr = BLOCK_EDGES
        RP: tl.constexpr = BLOCK_RADIAL
        PP: tl.constexpr = BLOCK_PROJ
        TP: tl.constexpr = BLOCK_TYPE
        HP: tl.constexpr = BLOCK_HIDDEN
        QP: tl.constexpr = BLOCK_OUT
        e = tl.program_id(0).to(tl.int64) * BE + tl.arange(0, BE)
        em = e < E
        rc = tl.arange(0, RP)
        x = tl.load(
            rbf_ptr + e[:, None] * R + rc[None, :], mask=em[:, None] & (rc < R)[None, :], other=0.0
        )
        w1 = cm.load_tile(w1_ptr, 0, R, P, P, RP, PP)
        w2 = cm.load_tile(w2_ptr, 0, P, P, P, PP, PP)
        w3a = cm.load_tile(w3_ptr, 0, P, H, H, PP, HP)
        w3s = cm.load_tile(w3_ptr, P, T, H, H, TP, HP)
        w3d = cm.load_tile(w3_ptr, P + T, T, H, H, TP, HP)
        w4 = cm.load_tile(w4_ptr, 0, H, Q, Q, HP, QP)
        h1 = tl.dot(x, w1, input_precision=PRECISION)
        rp = tl.dot(h1 / (1.0 + tl.exp(-h1)), w2, input_precision=PRECISION)
        tc = tl.arange(0, TP)
        tm = em[:, None] & (tc < T)[None, :]
        ts = tl.load(ts_ptr + e, mask=em, other=0)
        td = tl.load(td_ptr + e, mask=em, other=0)
        xs = tl.load(tab_ptr + ts[:, None] * T + tc[None, :], mask=tm, other=0.0)
        xd = tl.load(tab_ptr + td[:, None] * T + tc[None, :], mask=tm, other=0.0)
        h3 = tl.dot(rp, w3a, input_precision=PRECISION)
        h3 += tl.dot(xs, w3s, input_precision=PRECISION)
        h3 += tl.dot(xd, w3d, input_precision=PRECISION)
        a3 = h3 / (1.0 + tl.exp(-h3))
        return e, em, h1, h3, a3, w1, w2, w3a, w4

    @triton.jit
    def seed_mlp_fwd_kernel(
        rbf_ptr,
        type_src_ptr,
        type_dst_ptr,
        table_ptr,
        w1_ptr,
        w2_ptr,
        w3_ptr,
        w4_ptr,
        g_ptr,
        n_edges,
        n_radial,
        n_proj,
        n_type,
        n_hidden,
        n_out,
        BLOCK_EDGES: tl.constexpr,
        BLOCK_RADIAL: tl.constexpr,
        BLOCK_PROJ: tl.constexpr,
        BLOCK_TYPE: tl.constexpr,
        BLOCK_HIDDEN: tl.constexpr,
        BLOCK_OUT: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        """Write g (E, Q) of BLOCK_EDGES edges per program, the whole chain in registers."""
        pointers = (
            rbf_ptr,
            type_src_ptr,
            type_dst_ptr,
            table_ptr,
            w1_ptr,
            w2_ptr,
            w3_ptr,
            w4_ptr,
        )
        sizes = (n_edges, n_radial, n_proj, n_type, n_hidden, n_out)
        e, em, _, _, a3, _, _, _, w4 = _chain(
            pointers,
            sizes,
            BLOCK_EDGES,
            BLOCK_RADIAL,
            BLOCK_PROJ,
            BLOCK_TYPE,
            BLOCK_HIDDEN,
            BLOCK_OUT,
            PRECISION,
        )
        g = tl.dot(a3, w4, input_precision=PRECISION)
        q = tl.arange(0, BLOCK_OUT)
        tl.store(
            g_ptr + e[:, None] * n_out + q[None, :], g, mask=em[:, None] & (q < n_out)[None, :]
        )

    @triton.jit
    def seed_mlp_bwd_kernel(
        gg_ptr,
        rbf_ptr,
        type_src_ptr,
        type_dst_ptr,
        table_ptr,
        w1_ptr,
        w2_ptr,
        w3_ptr,
        w4_ptr,
        grbf_ptr,
        n_edges,
        n_radial,
        n_proj,
        n_type,
        n_hidden,
        n_out,
        BLOCK_EDGES: tl.constexpr,
        BLOCK_RADIAL: tl.constexpr,
        BLOCK_PROJ: tl.constexpr,
        BLOCK_TYPE: tl.constexpr,
        BLOCK_HIDDEN: tl.constexpr,
        BLOCK_OUT: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        """Write grbf (E, R) for the cotangent gg of BLOCK_EDGES edges per program, closed form.

        The forward is recomputed in registers.
        """
        pointers = (
            rbf_ptr,
            type_src_ptr,
            type_dst_ptr,
            table_ptr,
            w1_ptr,
            w2_ptr,
            w3_ptr,
            w4_ptr,
        )
        sizes = (n_edges, n_radial, n_proj, n_type, n_hidden, n_out)
        e, em, h1, h3, _, w1, w2, w3a, w4 = _chain(
            pointers,
            sizes,
            BLOCK_EDGES,
            BLOCK_RADIAL,
            BLOCK_PROJ,
            BLOCK_TYPE,
            BLOCK_HIDDEN,
            BLOCK_OUT,
            PRECISION,
        )
        q = tl.arange(0, BLOCK_OUT)
        gg = tl.load(
            gg_ptr + e[:, None] * n_out + q[None, :],
            mask=em[:, None] & (q < n_out)[None, :],
            other=0.0,
        )
        gh3 = tl.dot(gg, tl.trans(w4), input_precision=PRECISION) * cm.silu_grad(h3)
        grp = tl.dot(gh3, tl.trans(w3a), input_precision=PRECISION)
        gh1 = tl.dot(grp, tl.trans(w2), input_precision=PRECISION) * cm.silu_grad(h1)
        grbf = tl.dot(gh1, tl.trans(w1), input_precision=PRECISION)
        rc = tl.arange(0, BLOCK_RADIAL)
        tl.store(
            grbf_ptr + e[:, None] * n_radial + rc[None, :],
            grbf,
            mask=em[:, None] & (rc < n_radial)[None, :],
        )


def seed_mlp_bwd_reference(gg, rbf, t_src, t_dst, table, w1, w2, w3, w4) -> Tensor:
    """Compute grbf (E, R) for the cotangent gg (E, Q), closed form (the kernel's formulas)."""
    h1 = rbf @ w1
    rp = silu(h1) @ w2
    h3 = torch.cat([rp, table[t_src], table[t_dst]], dim=-1) @ w3

    def dsilu(h):
        s = torch.sigmoid(h)
        return s + h * s * (1.0 - s)

    gh3 = (gg @ w4.t()) * dsilu(h3)
    gh1 = ((gh3 @ w3[: w2.shape[1]].t()) @ w2.t()) * dsilu(h1)
    return gh1 @ w1.t()


def backend(device, dtype) -> tuple[str, str]:
    """Return (backend, reason): Triton on CUDA for float32 (or the interpreter when forced).

    float64 takes the torch path (the accuracy reference, where speed matters less).
    """
    name = cm.select_backend(device, dtype, triton_ok=dtype == torch.float32)
    return name, f"{name} on {torch.device(device).type} ({dtype})"


def _launch(rbf, table, w1, w3, w4):
    """(grid, sizes, meta) of both kernels at the tuning table's seed_mlp launch."""
    E, R, P, T = rbf.shape[0], rbf.shape[1], w1.shape[1], table.shape[1]
    H, Q = w3.shape[1], w4.shape[1]
    launch = tuning.current().seed_mlp
    p2 = cm.dot_width
    meta = dict(
        BLOCK_EDGES=launch.edges,
        BLOCK_RADIAL=p2(R),
        BLOCK_PROJ=p2(P),
        BLOCK_TYPE=p2(T),
        BLOCK_HIDDEN=p2(H),
        BLOCK_OUT=p2(Q),
        PRECISION=cm.dot_precision(launch.precision, rbf.device),
        num_warps=launch.warps,
    )
    return (triton.cdiv(E, launch.edges),), (E, R, P, T, H, Q), meta


@torch.library.triton_op(OP, mutates_args=())
def _seed_op(
    rbf: Tensor,
    t_src: Tensor,
    t_dst: Tensor,
    table: Tensor,
    w1: Tensor,
    w2: Tensor,
    w3: Tensor,
    w4: Tensor,
) -> Tensor:
    if cm.chosen_backend("seed_mlp", backend(rbf.device, rbf.dtype)) == "reference":
        return seed_mlp_reference(rbf, t_src, t_dst, table, w1, w2, w3, w4)
    g = rbf.new_empty(rbf.shape[0], w4.shape[1])
    if not cm.has_no_items(rbf.shape[0]):
        grid, sizes, meta = _launch(rbf, table, w1, w3, w4)
        cm.wrap(seed_mlp_fwd_kernel)[grid](
            rbf, t_src, t_dst, table, w1, w2, w3, w4, g, *sizes, **meta
        )
    return g


@_seed_op.register_fake
def _(rbf, t_src, t_dst, table, w1, w2, w3, w4):
    return rbf.new_empty(rbf.shape[0], w4.shape[1])


@torch.library.triton_op(OP_BWD, mutates_args=())
def _seed_bwd_op(
    gg: Tensor,
    rbf: Tensor,
    t_src: Tensor,
    t_dst: Tensor,
    table: Tensor,
    w1: Tensor,
    w2: Tensor,
    w3: Tensor,
    w4: Tensor,
) -> Tensor:
    if cm.chosen_backend("seed_mlp", backend(rbf.device, rbf.dtype)) == "reference":
        return seed_mlp_bwd_reference(gg, rbf, t_src, t_dst, table, w1, w2, w3, w4)
    grbf = torch.empty_like(rbf)
    if not cm.has_no_items(rbf.shape[0]):
        grid, sizes, meta = _launch(rbf, table, w1, w3, w4)
        cm.wrap(seed_mlp_bwd_kernel)[grid](
            gg, rbf, t_src, t_dst, table, w1, w2, w3, w4, grbf, *sizes, **meta
        )
    return grbf


@_seed_bwd_op.register_fake
def _(gg, rbf, t_src, t_dst, table, w1, w2, w3, w4):
    return torch.empty_like(rbf)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, gg):
    grbf = torch.ops.mdband.seed_mlp_bwd(gg.contiguous(), *ctx.saved_tensors)
    return grbf, None, None, None, None, None, None, None


_seed_op.register_autograd(_backward, setup_context=_setup)


def seed_mlp(
    rbf: Tensor,
    t_src: Tensor,
    t_dst: Tensor,
    table: Tensor,
    w1: Tensor,
    w2: Tensor,
    w3: Tensor,
    w4: Tensor,
    fused: bool = True,
) -> Tensor:
    """Compute g (E, Q) of the environment seed's MLPs (module docstring).

    ``fused``: the op (differentiable once in rbf only: force evaluation); else the torch
    reference (differentiable to any order in every input: training).
    """
    E, T = rbf.shape[0], table.shape[-1]
    ok = (
        rbf.dim() == 2
        and t_src.shape == (E,)
        and t_dst.shape == (E,)
        and table.dim() == 2
        and w1.shape[0] == rbf.shape[1]
        and w2.shape == (w1.shape[1], w1.shape[1])
        and w3.shape[0] == w1.shape[1] + 2 * T
        and w4.shape[0] == w3.shape[1]
    )
    if not ok:
        raise ValueError(
            "seed_mlp: rbf (E, R), t_src, t_dst (E,), table (n, T), w1 (R, P), w2 (P, P), "
            f"w3 (P + 2T, H), w4 (H, Q) expected, got {tuple(rbf.shape)}, {tuple(t_src.shape)}, "
            f"{tuple(t_dst.shape)}, {tuple(table.shape)}, {tuple(w1.shape)}, {tuple(w2.shape)}, "
            f"{tuple(w3.shape)}, {tuple(w4.shape)}"
        )
    cm.check_dtypes("seed_mlp", rbf=rbf, table=table, w1=w1, w2=w2, w3=w3, w4=w4)
    if not fused:
        return seed_mlp_reference(rbf, t_src, t_dst, table, w1, w2, w3, w4)
    c = [t.contiguous() for t in (rbf, table, w1, w2, w3, w4)]
    return _seed_op(
        c[0], t_src.to(torch.int64).contiguous(), t_dst.to(torch.int64).contiguous(), *c[1:]
    )
