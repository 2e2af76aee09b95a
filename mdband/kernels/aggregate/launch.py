"""aggregate's launches: which kernels run, with their grids, warps, stages and tile sizes.

The choice is the tuning table's ``aggregate`` record. Called inside the op's ``triton_op``
bodies only.
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.kernels.aggregate.dot import DOT_MIN

if cm.TRITON_AVAILABLE:
    from mdband.kernels.aggregate.dot import aggregate_dot_bwd_kernel
    from mdband.kernels.aggregate.stats import aggregate_stats_kernel
    from mdband.kernels.aggregate.walk import aggregate_walk_bwd_kernel, aggregate_walk_fwd_kernel


def dot_precision(y) -> str:
    """Return the dot backward's tl.dot precision for features y.

    The tuning table's in float32, "ieee" in float64.
    """
    return tuning.current().aggregate.dot_precision if y.dtype == torch.float32 else "ieee"


def bwd_kernels(y) -> str:
    """Return the backward the tuning table picks for features y: "walk" or "dot".

    "auto" is "dot" where its tl.dot is tf32x3 on TF32 tensor cores (``cm.has_tf32_cores``), else
    the walk (float64: the exact walk).
    """
    choice = tuning.current().aggregate.bwd
    if choice == "auto":
        tensor_cores = dot_precision(y) == "tf32x3" and cm.has_tf32_cores(y.device)
        return "dot" if tensor_cores else "walk"
    return choice


def walk_warps(C: int, jp: int) -> int:
    """Return the warps of a (node, degree block) walk program.

    Few, so that many fit on an SM (the walks are latency-bound); one per 512 elements of its
    JP × BC tiles, or the tuning table's.
    """
    warps = tuning.current().aggregate.walk_warps
    if warps:
        return warps
    return max(1, min(8, cm.next_pow2(C) * jp // 512))


def dot_warps(C: int, precision: str) -> int:
    """Return the warps of a dot program.

    The tuning table's launch of ``precision``, else 8 (4 for C ≤ 16).
    """
    warps = tuning.current().aggregate.dot_launch(precision).warps
    if warps is not None:
        return warps
    return 8 if C > 16 else 4


def _optional(t, attn: bool, fallback, n: int):
    """(tensor, strides) of an input of one mode only (a placeholder and zeros otherwise)."""
    return (t, t.stride()) if attn else (fallback, (0,) * n)


def stats(perm, row_ptr, env, logits, z, stats_out):
    """Run the softmax statistics pass of attention mode into ``stats_out`` (N, 2, H)."""
    N, H = stats_out.shape[0], logits.shape[1]
    cm.wrap(aggregate_stats_kernel)[(N,)](
        perm,
        row_ptr,
        env,
        logits,
        z,
        stats_out,
        H,
        *logits.stride()[:2],
        *stats_out.stride(),
        BLOCK_EDGES=tuning.current().aggregate.stats_edges,
        BLOCK_HEADS=cm.next_pow2(H),
        num_warps=1,
    )


def walk_fwd(y, rot, rho, perm, row_ptr, env, logits, s, out, stats_out, t, layout, sr):
    """Run the walk forward into ``out``; ``t`` the storage's kernel tables, ``sr`` its strides."""
    N, C = out.shape[0], y.shape[2]
    attn = logits is not None
    H = logits.shape[1] if attn else 0
    lg, sl = _optional(logits, attn, y, 2)
    st_, stt = _optional(stats_out, attn, y, 3)
    walk = tuning.current().aggregate
    cm.wrap(aggregate_walk_fwd_kernel)[(N, t["nblk"])](
        y,
        rot,
        rho,
        perm,
        row_ptr,
        env,
        lg,
        s if not attn else y,
        out,
        st_,
        t["col"],
        t["row"],
        t["ent_a"],
        t["ent_b"],
        C,
        C // H if attn else 1,
        *y.stride(),
        *sr,
        *sl[:2],
        *out.stride(),
        *stt,
        COL_LANES=t["jp"],
        SLOT_LANES=t["sp"],
        BLOCK_CHANNELS=cm.next_pow2(C),
        LAYOUT=layout,
        ATTENTION=attn,
        PREFETCH=walk.fwd_prefetch,
        num_warps=walk_warps(C, t["jp"]),
        num_stages=walk.walk_stages,
    )


def bwd(
    gout, y, rot, rho, perm, row_ptr, env, logits, stats_in, s, gy, grot, qp, gsp, t, layout, sr, so
):
    """Run the backward kernels (walk or dot, :func:`bwd_kernels`).

    They fill gy, grot's entries, the per-(block, edge) partials qp of q and, in plain mode, the
    per-(block, node) partials gsp of gs; ``so`` the cotangent storage's strides.
    """
    N, C = gout.shape[0], y.shape[2]
    attn = logits is not None
    H = logits.shape[1] if attn else 0
    lg, sl = _optional(logits, attn, y, 2)
    st_, stt = _optional(stats_in, attn, y, 3)
    args = (
        gout,
        y,
        rot,
        rho,
        perm,
        row_ptr,
        env,
        lg,
        st_,
        s if not attn else y,
        gy,
        grot,
        qp,
        gsp,
        t["col"],
        t["row"],
        t["ent_a"],
        t["ent_b"],
        C,
        H,
        C // H if attn else 1,
        *gout.stride(),
        *y.stride(),
        *sr,
        *sl[:2],
        *stt,
        *gy.stride(),
        *so,
        *qp.stride(),
        gsp.stride(0) if not attn else 0,
    )
    meta = dict(COL_LANES=t["jp"], SLOT_LANES=t["sp"], LAYOUT=layout, ATTENTION=attn)
    if bwd_kernels(y) == "dot":
        precision = dot_precision(y)
        cm.wrap(aggregate_dot_bwd_kernel)[(N, t["nblk"])](
            *args,
            **meta,
            DOT_COLS=max(DOT_MIN, t["jp"]),
            BLOCK_EDGES=tuning.current().aggregate.dot_launch(precision).edges,
            BLOCK_CHANNELS=max(DOT_MIN, cm.next_pow2(C)),
            DOT_HEADS=max(DOT_MIN, cm.next_pow2(max(H, 1))),
            PER_LANE=H > 1,
            PRECISION=precision,
            num_warps=dot_warps(C, precision),
        )
        return
    walk = tuning.current().aggregate
    cm.wrap(aggregate_walk_bwd_kernel)[(N, t["nblk"])](
        *args,
        **meta,
        BLOCK_CHANNELS=cm.next_pow2(C),
        BLOCK_HEADS=cm.next_pow2(max(H, 1)),
        PREFETCH=walk.bwd_prefetch,
        num_warps=walk_warps(C, t["jp"]),
        num_stages=walk.walk_stages,
    )
