"""zonal_embed: the geometric initial embedding's read of the band's m = 0 rows.

Shapes (C channels, E edges, N nodes, L = ``lmax``, D = (L+1)²)::

    rot     RotationStorage, BAND or DENSE, built for lmax_s ≥ L; only its m = 0 rows are read
            (the band's first D entries, ``storage.zonal``): Y[e, l²+j] = Y_l(û_e)[j]
    radial  (E, L+1, C) radial features per degree
    dst     (E,) int64 destination node (unsorted allowed; a CSR is built by the wrapper)
    s       (N,) node scale (inv_sqrt_deg)
    out     (N, D, C):  out[n, l²+j, c] = s[n] · Σ_{e: dst=n} Y[e, l²+j] · radial[e, l, c]  (l ≥ 1),
                        out[n, 0, :] = 0

Accuracy: exact fp32/fp64 FMAs, except the float32 backward's two products per degree block
(tf32x3 dots, relative error ≈ 2⁻²¹ per product: ``KERNELS``); band and dense bitwise
identical; deterministic (one program per node over its CSR segment, no atomics). The dot
backward exists because the walk waits on one edge's loads at a time (DPA4-Mini, 647,154
edges, H200: 1.12 ms; the default config 3.7 ms); a multiply-and-sum written out for a step of
edges is rewritten by Triton into a TF32 dot (see ``_common.SUM``), so the dots are explicit.

Bytes per edge (fp32, S = 4): (D−1)·S rotation entries, L·C·S radial, 8 (perm); backward: the
same reads plus the radial cotangent (L+1)·C·S and D−1 storage entries.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mdband.kernels import _common as cm
from mdband.so3 import storage as st

OP = "mdband::zonal_embed"
OP_BWD = "mdband::zonal_embed_bwd"

MAX_CHANNELS = 1024
#: Triton kernels per pass, as aggregate's and rotate_mix's ``KERNELS``: the backward "auto"
#: (float32: a node's edges DOT_EDGES per step as tf32x3 dots; float64: the walk) or "walk" (one
#: edge at a time, exact FMAs, every dtype)
KERNELS = {"bwd": "auto"}
DOT_EDGES, DOT_WARPS = 16, 4  #: the dot backward's edges per step and warps


def _zonal_index(layout_code, rot_lmax, lmax, device):
    t = st.entry_table(cm.layout_of(layout_code), rot_lmax, lmax, device)
    keep = t["m"] == 0  # band order: m = 0 entries come first, in column order
    return t["pos"][keep], t["deg"][keep]


# ---------------------------------------------------------------------------- references
def zonal_embed_reference(rot, layout, rot_lmax, lmax, radial, dst, s, N):
    """Torch reference of the forward (both layouts, differentiable by autograd)."""
    pos, deg = _zonal_index(layout, rot_lmax, lmax, rot.device)
    E, C = radial.shape[0], radial.shape[2]
    Y = rot.reshape(E, -1)[:, pos]
    keep = (deg > 0).to(radial.dtype)
    contrib = (Y * keep)[:, :, None] * radial[:, deg, :]
    out = radial.new_zeros(N, deg.shape[0], C).index_add(0, dst, contrib)
    return out * s[:, None, None]


def zonal_embed_bwd_reference(gout, rot, layout, rot_lmax, lmax, radial, dst, s):
    """Closed-form backward: (grot, gradial, gs)."""
    pos, deg = _zonal_index(layout, rot_lmax, lmax, rot.device)
    E = radial.shape[0]
    N = gout.shape[0]
    Y = rot.reshape(E, -1)[:, pos]
    keep = (deg > 0).to(radial.dtype)
    rd = radial[:, deg, :]
    g = gout[dst]
    gsc = g * s[dst][:, None, None]
    gY = (gsc * rd).sum(2) * keep
    grad = torch.zeros_like(radial).index_add(1, deg, gsc * (Y * keep)[:, :, None])
    gs = gout.new_zeros(N).index_add(0, dst, (g * rd * (Y * keep)[:, :, None]).sum((1, 2)))
    layout_e = cm.layout_of(layout)
    grot = rot.new_zeros(E, st.per_edge_size(layout_e, rot_lmax))
    grot[:, pos] = gY
    return grot.view(rot.shape), grad, gs


# ---------------------------------------------------------------------------- Triton kernels
if cm.TRITON_AVAILABLE:
    triton, tl = cm.triton, cm.tl
    entry_index, node_segment = cm.entry_index, cm.node_segment
    SUM = cm.SUM

    @triton.jit
    def _zonal_block(col_t, ea_t, eb_t, b, JP: tl.constexpr, SP: tl.constexpr,
                     LAYOUT: tl.constexpr):  # fmt: skip
        """Degree block b's packed columns col (JP,), their mask jm and the storage indices
        (ia, ib) of its m = 0 row (slot 0) of the rotation storage."""
        jj = tl.arange(0, JP)
        col = tl.load(col_t + b * JP + jj)
        jm = col >= 0
        ia, ib = entry_index(ea_t, eb_t, (b * SP) * JP + jj, jm, LAYOUT)
        return col, jm, ia, ib

    @triton.jit
    def _zonal_fwd_kernel(
        rot_ptr, rad_ptr, perm_ptr, ptr_ptr, s_ptr, out_ptr,
        col_t, ea_t, eb_t,
        C,
        sr0, sra, srb, sd0, sd1, sd2, so0, so1, so2,
        NB: tl.constexpr, JP: tl.constexpr, SP: tl.constexpr, BC: tl.constexpr,
        LAYOUT: tl.constexpr,
    ):  # fmt: skip
        n, beg, end, cc, cmask = node_segment(ptr_ptr, C, BC)
        jj = tl.arange(0, JP)
        sn = tl.load(s_ptr + n)
        dt = out_ptr.dtype.element_ty
        col = tl.load(col_t + jj)  # block 0 (degree 0) is not embedded
        jm = col >= 0
        tl.store(
            out_ptr + n * so0 + col.to(tl.int64)[:, None] * so1 + cc[None, :] * so2,
            tl.full((JP, BC), 0.0, dt),
            mask=jm[:, None] & cmask[None, :],
        )
        for b in tl.static_range(1, NB):
            col, jm, ia, ib = _zonal_block(col_t, ea_t, eb_t, b, JP, SP, LAYOUT)
            off = ia * sra + ib * srb
            acc = tl.full((JP, BC), 0.0, dt)
            for i in range(beg, end):
                e = tl.load(perm_ptr + i).to(tl.int64)
                yv = tl.load(rot_ptr + e * sr0 + off, mask=jm, other=0.0)
                rv = tl.load(rad_ptr + e * sd0 + b * sd1 + cc * sd2, mask=cmask, other=0.0)
                acc += yv[:, None] * rv[None, :]
            tl.store(
                out_ptr + n * so0 + col.to(tl.int64)[:, None] * so1 + cc[None, :] * so2,
                acc * sn,
                mask=jm[:, None] & cmask[None, :],
            )

    @triton.jit
    def _zonal_bwd_kernel(
        gout_ptr, rot_ptr, rad_ptr, perm_ptr, ptr_ptr, s_ptr, grot_ptr, grad_ptr, gs_ptr,
        col_t, ea_t, eb_t,
        C,
        sg0, sg1, sg2, sr0, sra, srb, sd0, sd1, sd2, so0, soa, sob, sh0, sh1, sh2,
        NB: tl.constexpr, JP: tl.constexpr, SP: tl.constexpr, BC: tl.constexpr,
        LAYOUT: tl.constexpr,
    ):  # fmt: skip
        n, beg, end, cc, cmask = node_segment(ptr_ptr, C, BC)
        sn = tl.load(s_ptr + n)
        dt = grad_ptr.dtype.element_ty
        gsacc = sn * 0.0
        for i in range(beg, end):
            e = tl.load(perm_ptr + i).to(tl.int64)
            tl.store(grad_ptr + e * sh0 + cc * sh2, tl.full((BC,), 0.0, dt), mask=cmask)
            for b in tl.static_range(1, NB):
                col, jm, ia, ib = _zonal_block(col_t, ea_t, eb_t, b, JP, SP, LAYOUT)
                off = ia * sra + ib * srb
                goff = ia * soa + ib * sob
                g = tl.load(
                    gout_ptr + n * sg0 + col.to(tl.int64)[:, None] * sg1 + cc[None, :] * sg2,
                    mask=jm[:, None] & cmask[None, :],
                    other=0.0,
                )
                yv = tl.load(rot_ptr + e * sr0 + off, mask=jm, other=0.0)
                rv = tl.load(rad_ptr + e * sd0 + b * sd1 + cc * sd2, mask=cmask, other=0.0)
                u = tl.reduce(yv[:, None] * g, 0, SUM)
                tl.store(grad_ptr + e * sh0 + b * sh1 + cc * sh2, u * sn, mask=cmask)
                gy = tl.reduce(g * rv[None, :], 1, SUM)
                tl.store(grot_ptr + e * so0 + goff, gy * sn, mask=jm)
                gsacc += tl.reduce(u * rv, 0, SUM)
        tl.store(gs_ptr + n, gsacc)

    @triton.jit
    def _zonal_bwd_dot_kernel(
        gout_ptr, rot_ptr, rad_ptr, perm_ptr, ptr_ptr, s_ptr, grot_ptr, grad_ptr, gs_ptr,
        col_t, ea_t, eb_t,
        C,
        sg0, sg1, sg2, sr0, sra, srb, sd0, sd1, sd2, so0, soa, sob, sh0, sh1, sh2,
        NB: tl.constexpr, JP: tl.constexpr, SP: tl.constexpr, BC: tl.constexpr,
        JD: tl.constexpr, BE: tl.constexpr, LAYOUT: tl.constexpr,
    ):  # fmt: skip
        """The backward of one node, its segment's edges BE at a time: per degree block, the
        radial cotangent u = Y·g (BE, JD)·(JD, BC) and the storage's Y cotangent rad·gᵀ as
        tf32x3 dots (JD ≥ 16 padded columns, BC ≥ 16 channels)."""
        n, beg, end, cc, cmask = node_segment(ptr_ptr, C, BC)
        sn = tl.load(s_ptr + n)
        dt = grad_ptr.dtype.element_ty
        jj = tl.arange(0, JD)
        gsacc = sn * 0.0
        for i0 in range(beg, end, BE):
            ii = i0 + tl.arange(0, BE)
            em = ii < end
            e = tl.load(perm_ptr + ii, mask=em, other=0).to(tl.int64)
            rm = em[:, None] & cmask[None, :]
            tl.store(grad_ptr + e[:, None] * sh0 + cc[None, :] * sh2, tl.zeros((BE, BC), dt), rm)
            for b in tl.static_range(1, NB):
                col = tl.load(col_t + b * JP + jj, mask=jj < JP, other=-1)
                jm = col >= 0
                ia, ib = entry_index(ea_t, eb_t, (b * SP) * JP + jj, jm, LAYOUT)
                g = tl.load(
                    gout_ptr + n * sg0 + col.to(tl.int64)[:, None] * sg1 + cc[None, :] * sg2,
                    mask=jm[:, None] & cmask[None, :],
                    other=0.0,
                )
                ym = em[:, None] & jm[None, :]
                yv = tl.load(rot_ptr + e[:, None] * sr0 + (ia * sra + ib * srb)[None, :], ym, 0.0)
                rv = tl.load(rad_ptr + e[:, None] * sd0 + b * sd1 + cc[None, :] * sd2, rm, 0.0)
                u = tl.dot(yv, g, input_precision="tf32x3")
                tl.store(grad_ptr + e[:, None] * sh0 + b * sh1 + cc[None, :] * sh2, u * sn, rm)
                gyv = tl.dot(rv, tl.trans(g), input_precision="tf32x3")
                tl.store(grot_ptr + e[:, None] * so0 + (ia * soa + ib * sob)[None, :], gyv * sn, ym)
                gsacc += tl.sum(tl.sum(u * rv, axis=1), axis=0)
        tl.store(gs_ptr + n, gsacc)


# ---------------------------------------------------------------------------- dispatch
def backend(device, dtype, *, lmax: int, channels: int | None = None) -> tuple[str | None, str]:
    """(backend, reason) shared by the dispatch and ``capability.spec_for_zonal_embed``."""
    if lmax < 0:
        return None, f"lmax must be >= 0 (got {lmax})"
    ok = channels is None or channels <= MAX_CHANNELS
    name = cm.select_backend(device, dtype, triton_ok=ok)
    return name, f"{name} on {torch.device(device).type} ({dtype})"


def bwd_kernel(radial) -> str:
    """The backward kernel (``"dot"`` or ``"walk"``) :data:`KERNELS` picks for ``radial``."""
    name = cm.kernel_choice(KERNELS, "bwd", ("walk", "auto"), "zonal_embed")
    tensor_cores = radial.dtype == torch.float32 and cm.has_tf32_cores(radial.device)
    return "dot" if name == "auto" and tensor_cores else "walk"


def _dispatch(radial, lmax) -> str:
    return cm.chosen_backend(
        "zonal_embed", backend(radial.device, radial.dtype, lmax=lmax, channels=radial.shape[2])
    )


@torch.library.triton_op(OP, mutates_args=())
def _zonal_op(
    rot: Tensor, layout: int, rot_lmax: int, lmax: int, radial: Tensor, dst: Tensor,
    perm: Tensor, row_ptr: Tensor, s: Tensor,
) -> Tensor:  # fmt: skip
    N = row_ptr.shape[0] - 1
    C = radial.shape[2]
    cm.check_rot(rot, layout, rot_lmax, lmax, "zonal_embed")
    if _dispatch(radial, lmax) == "reference":
        return zonal_embed_reference(rot, layout, rot_lmax, lmax, radial, dst, s, N)
    out = radial.new_empty(N, st.dim_of(lmax), C)
    if cm.has_no_items(N):
        return out
    t = cm.kernel_tables(layout, rot_lmax, lmax, radial.device)
    cm.wrap(_zonal_fwd_kernel)[(N,)](
        rot, radial, perm, row_ptr, s, out,
        t["col"], t["ent_a"], t["ent_b"],
        C,
        *cm.rot_args(rot, layout), *radial.stride(), *out.stride(),
        NB=t["nblk"], JP=t["jp"], SP=t["sp"], BC=cm.next_pow2(C), LAYOUT=layout,
    )  # fmt: skip
    return out


@_zonal_op.register_fake
def _(rot, layout, rot_lmax, lmax, radial, dst, perm, row_ptr, s):
    return radial.new_empty(row_ptr.shape[0] - 1, st.dim_of(lmax), radial.shape[2])


@torch.library.triton_op(OP_BWD, mutates_args=())
def _zonal_bwd_op(
    gout: Tensor, rot: Tensor, layout: int, rot_lmax: int, lmax: int, radial: Tensor,
    dst: Tensor, perm: Tensor, row_ptr: Tensor, s: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    N = row_ptr.shape[0] - 1
    C = radial.shape[2]
    cm.check_rot(rot, layout, rot_lmax, lmax, "zonal_embed")
    if _dispatch(radial, lmax) == "reference":
        return zonal_embed_bwd_reference(gout, rot, layout, rot_lmax, lmax, radial, dst, s)
    grot = rot.new_zeros(rot.shape)
    grad = torch.empty_like(radial)
    gs = torch.empty_like(s)
    if cm.has_no_items(N):
        return grot, grad, gs
    t = cm.kernel_tables(layout, rot_lmax, lmax, radial.device)
    args = (
        gout, rot, radial, perm, row_ptr, s, grot, grad, gs,
        t["col"], t["ent_a"], t["ent_b"],
        C,
        *gout.stride(), *cm.rot_args(rot, layout), *radial.stride(), *cm.rot_args(grot, layout),
        *grad.stride(),
    )  # fmt: skip
    meta = dict(NB=t["nblk"], JP=t["jp"], SP=t["sp"], LAYOUT=layout)
    if bwd_kernel(radial) == "dot":
        cm.wrap(_zonal_bwd_dot_kernel)[(N,)](
            *args, **meta, BC=max(16, cm.next_pow2(C)), JD=max(16, t["jp"]),
            BE=DOT_EDGES, num_warps=DOT_WARPS,
        )  # fmt: skip
    else:
        cm.wrap(_zonal_bwd_kernel)[(N,)](*args, **meta, BC=cm.next_pow2(C))
    return grot, grad, gs


@_zonal_bwd_op.register_fake
def _(gout, rot, layout, rot_lmax, lmax, radial, dst, perm, row_ptr, s):
    return torch.empty_like(rot), torch.empty_like(radial), torch.empty_like(s)


def _setup(ctx, inputs, output):
    rot, layout, rot_lmax, lmax, radial, dst, perm, row_ptr, s = inputs
    ctx.save_for_backward(rot, radial, dst, perm, row_ptr, s)
    ctx.meta = (layout, rot_lmax, lmax)


def _backward(ctx, gout):
    rot, radial, dst, perm, row_ptr, s = ctx.saved_tensors
    layout, rot_lmax, lmax = ctx.meta
    grot, grad, gs = torch.ops.mdband.zonal_embed_bwd(
        gout, rot, layout, rot_lmax, lmax, radial, dst, perm, row_ptr, s
    )
    return grot, None, None, None, grad, None, None, None, gs


_zonal_op.register_autograd(_backward, setup_context=_setup)


# ---------------------------------------------------------------------------- public API
def zonal_embed(
    storage,
    radial: torch.Tensor,
    dst: torch.Tensor,
    s: torch.Tensor,
    csr: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """GIE zonal scatter: out (N, (L+1)², C), L = radial.shape[1] − 1, N = s.shape[0].

    Differentiable in the storage's data, ``radial`` and ``s``. ``csr`` = (perm, row_ptr) of
    ``dst`` if the caller already has it.
    """
    rot, layout, rot_lmax = cm.unpack_storage(storage, "zonal_embed")
    if radial.dim() != 3:
        raise ValueError(f"zonal_embed: radial must be (E, L+1, C), got {tuple(radial.shape)}")
    lmax = radial.shape[1] - 1
    cm.check_rot(rot, layout, rot_lmax, lmax, "zonal_embed")
    E = radial.shape[0]
    if rot.shape[0] != E or dst.shape[0] != E:
        raise ValueError("zonal_embed: storage, radial and dst must have the same number of edges")
    if s.dim() != 1:
        raise ValueError("zonal_embed: s must be (N,)")
    cm.check_dtypes("zonal_embed", radial=radial, storage=rot, s=s)
    dst = dst.to(torch.int64)
    perm, row_ptr = csr if csr is not None else cm.csr(dst, s.shape[0])
    return _zonal_op(rot, layout, rot_lmax, lmax, radial, dst, perm, row_ptr, s)
