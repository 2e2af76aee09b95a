"""rotate_mix's launches: which kernels run, with their grids, warps, stages and tile sizes.

The choice is the tuning table's ``rotate_mix`` record. Called inside the op's ``triton_op``
bodies only.
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.kernels.rotate_mix.dot import DOT_MIN

if cm.TRITON_AVAILABLE:
    from mdband.kernels.rotate_mix.backward import (
        rotate_mix_edge_bwd_kernel,
        rotate_mix_node_bwd_kernel,
    )
    from mdband.kernels.rotate_mix.dot import rotate_mix_dot_bwd_kernel
    from mdband.kernels.rotate_mix.forward import rotate_mix_fwd_kernel


def strides3(t):
    """Strides of a 3-d input, (0, 0, 0) for the placeholder of an absent one."""
    return t.stride() if t.dim() == 3 else (0, 0, 0)


def strides2(t):
    """Strides of a 2-d input, (0, 0) for the placeholder of an absent one."""
    return t.stride() if t.dim() == 2 else (0, 0)


def dot_precision(x) -> str:
    """Return the dot backward's tl.dot precision for node features x.

    The tuning table's in float32, "ieee" in float64.
    """
    return tuning.current().rotate_mix.dot_precision if x.dtype == torch.float32 else "ieee"


def bwd_kernels(x, mix: bool) -> str:
    """Return the backward the tuning table picks: "edge" or "dot".

    "dot" for radial rows only: a mixer keeps the edge kernels; "auto" is "dot" where its tl.dot is
    tf32x3 on TF32 tensor cores.
    """
    choice = tuning.current().rotate_mix.bwd
    if mix:
        return "edge"
    if choice == "auto":
        tensor_cores = dot_precision(x) == "tf32x3" and cm.has_tf32_cores(x.device)
        return "dot" if tensor_cores else "edge"
    return choice


def edge_block() -> int:
    """Edges per program of the backward edge kernel (fewer in the CPU interpreter)."""
    rm = tuning.current().rotate_mix
    return rm.edge_block_interpreter if cm.interpret_mode() else rm.edge_block


def fwd(x, src, rot, k, basis, rad, y, t, mt, layout, sr):
    """Run the forward edge kernel into ``y``.

    ``t`` / ``mt`` are the storage's and the mixer's kernel tables, ``sr`` the storage's strides.
    """
    E, C = src.shape[0], x.shape[2]
    mix = k is not None
    kk, bb, rd = (k, basis, y) if mix else (y, y, rad)
    cm.wrap(rotate_mix_fwd_kernel)[(E,)](
        x,
        src,
        rot,
        kk,
        bb,
        rd,
        y,
        t["col"],
        t["row"],
        t["ent_a"],
        t["ent_b"],
        mt["kidx"],
        mt["orow"],
        C,
        *x.stride(),
        *sr,
        *strides3(kk),
        *strides2(bb),
        *strides3(rd),
        *y.stride(),
        N_BLOCKS=t["nblk"],
        COL_LANES=t["jp"],
        SLOT_LANES=t["sp"],
        OUT_LANES=mt["lp"],
        RANK=k.shape[2] if mix else 1,
        BLOCK_CHANNELS=cm.next_pow2(C),
        LAYOUT=layout,
        MIXER=mix,
        num_warps=tuning.current().rotate_mix.fwd_warps,
    )


def edge_bwd(
    gy, x, src, rot, k, basis, rad, perm, row_ptr, gx, grot, gk, gbp, grad, t, mt, layout, sr, so
):
    """Run the edge and node kernels.

    They write gx, grot, gk (mixer) or grad (no mixer) and the basis partials gbp (one row per edge
    program: :func:`edge_block` edges); ``so`` the cotangent storage's strides.
    """
    N, C = x.shape[0], x.shape[2]
    E = src.shape[0]
    mix = k is not None
    R = k.shape[2] if mix else 1
    BC = cm.next_pow2(C)
    eb = edge_block()
    rm = tuning.current().rotate_mix
    kk, bb, rd = (k, basis, gy) if mix else (gy, gy, rad)
    gxl = torch.empty_like(gy) if mix else None  # mixer input cotangent, edge → node kernel
    gkk, gbb, grr = (gk, gbp, gxl) if mix else (gy, gy, grad)
    cm.wrap(rotate_mix_edge_bwd_kernel)[((E + eb - 1) // eb,)](
        x,
        src,
        rot,
        kk,
        bb,
        rd,
        gy,
        grot,
        gkk,
        gbb,
        grr,
        t["col"],
        t["row"],
        t["ent_a"],
        t["ent_b"],
        mt["kidx"],
        mt["orow"],
        E,
        C,
        *x.stride(),
        *sr,
        *strides3(kk),
        *strides2(bb),
        *strides3(rd),
        *gy.stride(),
        *so,
        *strides3(gkk),
        *strides3(gbb),
        *strides3(grr),
        N_BLOCKS=t["nblk"],
        COL_LANES=t["jp"],
        SLOT_LANES=t["sp"],
        OUT_LANES=mt["lp"],
        RANK=R,
        BLOCK_RANK=cm.next_pow2(R),
        BLOCK_CHANNELS=BC,
        BLOCK_EDGES=eb,
        LAYOUT=layout,
        MIXER=mix,
        num_warps=rm.edge_warps,
        num_stages=rm.edge_stages,
    )
    if cm.has_no_items(N):
        return
    rn = gxl if mix else rd
    cm.wrap(rotate_mix_node_bwd_kernel)[(N, t["nblk"])](
        perm,
        row_ptr,
        rot,
        rn,
        gy,
        gx,
        t["col"],
        t["row"],
        t["ent_a"],
        t["ent_b"],
        C,
        *sr,
        *strides3(rn),
        *gy.stride(),
        *gx.stride(),
        N_BLOCKS=t["nblk"],
        COL_LANES=t["jp"],
        SLOT_LANES=t["sp"],
        BLOCK_CHANNELS=BC,
        LAYOUT=layout,
        MIXER=mix,
        num_warps=rm.node_warps,
    )


def dot_bwd(gy, x, rot, rad, perm, row_ptr, gx, grot, grad, t, layout, sr, so):
    """Run the fused dot backward of radial rows: fills gx, grot's entries and grad."""
    N, C = x.shape[0], x.shape[2]
    rm = tuning.current().rotate_mix
    cm.wrap(rotate_mix_dot_bwd_kernel)[(N * t["nblk"],)](
        x,
        rot,
        rad,
        gy,
        perm,
        row_ptr,
        gx,
        grot,
        grad,
        t["col"],
        t["row"],
        t["ent_a"],
        t["ent_b"],
        C,
        *x.stride(),
        *sr,
        *rad.stride(),
        *gy.stride(),
        *gx.stride(),
        *so,
        *grad.stride(),
        N_BLOCKS=t["nblk"],
        COL_LANES=t["jp"],
        DOT_COLS=max(DOT_MIN, t["jp"]),
        SLOT_LANES=t["sp"],
        BLOCK_EDGES=rm.dot_edges,
        BLOCK_CHANNELS=max(DOT_MIN, cm.next_pow2(C)),
        LAYOUT=layout,
        PRECISION=dot_precision(x),
        num_warps=rm.dot_warps,
    )
