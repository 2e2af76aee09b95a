"""force_assembly: forces and virial from the per-edge energy gradient, in float64.

Shapes (E edges, N nodes)::

    g        (E, 3)  dE/d edge_vec (any float dtype)
    edge_vec (E, 3)  r[src] + shift − r[dst]
    src, dst (E,) int64
    forces   (N, 3) float64:  F_k = Σ_{e: dst=k} g_e − Σ_{e: src=k} g_e
    virial   (3, 3) float64:  W = −Σ_e g_e ⊗ edge_vec_e   (row = component of g)

Deterministic: one program per node walks its destination segment (forces and a per-node virial
partial, −g ⊗ v of the edges whose destination it is) and its source segment (forces), all in
float64 registers; the (N, 9) partials are summed by torch. No atomics. Not differentiable (the
force graph is built by autograd upstream; this op only assembles the result).

Bytes per edge: g and edge_vec 24 + 24 (fp32) read once per endpoint pass, perm 2 × 8.
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm

OP = "mdband::force_assembly"


def force_assembly_reference(g, edge_vec, src, dst, N):
    """Assemble forces (N, 3) and virial (3, 3) in float64 with torch index_add and einsum."""
    g64 = g.to(torch.float64)
    v64 = edge_vec.to(torch.float64)
    f = g64.new_zeros(N, 3).index_add(0, dst, g64).index_add(0, src, -g64)
    w = -torch.einsum("ek,ej->kj", g64, v64)
    return f, w


if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    @triton.jit
    def force_assembly_kernel(
        g_ptr,
        edge_vec_ptr,
        dst_perm_ptr,
        dst_offsets_ptr,
        src_perm_ptr,
        src_offsets_ptr,
        forces_ptr,
        virial_ptr,
        stride_g_edge,
        stride_g_comp,
        stride_vec_edge,
        stride_vec_comp,
    ):
        """Assemble the force and virial partial of node n = program_id(0) in float64.

        Walks n's destination segment (forces, and the per-node virial partial −g ⊗ v of those
        edges) and its source segment (forces); writes forces[n] and the (N, 9) partials' row n.
        """
        n = tl.program_id(0).to(tl.int64)
        kk = tl.arange(0, 4)
        km = kk < 3
        wm = km[:, None] & km[None, :]
        f = tl.full((4,), 0.0, tl.float64)
        w = tl.full((4, 4), 0.0, tl.float64)
        beg = tl.load(dst_offsets_ptr + n).to(tl.int64)
        end = tl.load(dst_offsets_ptr + n + 1).to(tl.int64)
        for i in range(beg, end):
            e = tl.load(dst_perm_ptr + i).to(tl.int64)
            g_at = g_ptr + e * stride_g_edge + kk * stride_g_comp
            v_at = edge_vec_ptr + e * stride_vec_edge + kk * stride_vec_comp
            gv = tl.load(g_at, mask=km, other=0.0).to(tl.float64)
            vv = tl.load(v_at, mask=km, other=0.0).to(tl.float64)
            f += gv
            w -= gv[:, None] * vv[None, :]
        beg = tl.load(src_offsets_ptr + n).to(tl.int64)
        end = tl.load(src_offsets_ptr + n + 1).to(tl.int64)
        for i in range(beg, end):
            e = tl.load(src_perm_ptr + i).to(tl.int64)
            g_at = g_ptr + e * stride_g_edge + kk * stride_g_comp
            f -= tl.load(g_at, mask=km, other=0.0).to(tl.float64)
        tl.store(forces_ptr + n * 3 + kk, f, mask=km)
        tl.store(virial_ptr + n * 9 + kk[:, None] * 3 + kk[None, :], w, mask=wm)


def backend(device, dtype) -> tuple[str, str]:
    """(backend, reason) shared by the dispatch and ``capability.spec_for_force_assembly``."""
    name = cm.select_backend(device, dtype)
    return name, f"{name} on {torch.device(device).type} ({dtype}); reads no rotations"


@torch.library.triton_op(OP, mutates_args=())
def _force_op(
    g: torch.Tensor,
    edge_vec: torch.Tensor,
    src: torch.Tensor,
    dst: torch.Tensor,
    dst_perm: torch.Tensor,
    dst_ptr: torch.Tensor,
    src_perm: torch.Tensor,
    src_ptr: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    N = dst_ptr.shape[0] - 1
    if backend(g.device, g.dtype)[0] == "reference":
        return force_assembly_reference(g, edge_vec, src, dst, N)
    f = torch.empty(N, 3, dtype=torch.float64, device=g.device)
    wp = torch.empty(N, 9, dtype=torch.float64, device=g.device)
    if not cm.has_no_items(N):
        cm.wrap(force_assembly_kernel)[(N,)](
            g,
            edge_vec,
            dst_perm,
            dst_ptr,
            src_perm,
            src_ptr,
            f,
            wp,
            *g.stride(),
            *edge_vec.stride(),
        )
    return f, wp.sum(0).view(3, 3)


@_force_op.register_fake
def _(g, edge_vec, src, dst, dst_perm, dst_ptr, src_perm, src_ptr):
    N = dst_ptr.shape[0] - 1
    return (
        torch.empty(N, 3, dtype=torch.float64, device=g.device),
        torch.empty(3, 3, dtype=torch.float64, device=g.device),
    )


def force_assembly(
    g: torch.Tensor,
    edge_vec: torch.Tensor,
    src: torch.Tensor,
    dst: torch.Tensor,
    n_nodes: int,
    dst_csr: tuple[torch.Tensor, torch.Tensor] | None = None,
    src_csr: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (forces (n_nodes, 3) float64, virial (3, 3) float64) from g = dE/d edge_vec.

    Not differentiable (inputs are detached). ``dst_csr`` / ``src_csr`` = (perm, row_ptr) if the
    caller already has them.
    """
    if g.shape != edge_vec.shape or g.dim() != 2 or g.shape[1] != 3:
        raise ValueError("force_assembly: g and edge_vec must both be (E, 3)")
    src = src.to(torch.int64)
    dst = dst.to(torch.int64)
    dperm, dptr = dst_csr if dst_csr is not None else cm.csr(dst, n_nodes)
    sperm, sptr = src_csr if src_csr is not None else cm.csr(src, n_nodes)
    return _force_op(g.detach(), edge_vec.detach(), src, dst, dperm, dptr, sperm, sptr)
