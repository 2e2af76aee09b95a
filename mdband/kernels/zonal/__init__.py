"""zonal_embed: the geometric initial embedding's read of the band's m = 0 rows.

Shapes (C channels, E edges, N nodes, L = ``lmax``, D = (L+1)²)::

    rot     RotationStorage, BAND or DENSE, built for lmax_s ≥ L; only its m = 0 rows are read
            (the band's first D entries, ``storage.zonal``): Y[e, l²+j] = Y_l(û_e)[j]
    radial  (E, L+1, C) radial features per degree
    dst     (E,) int64 destination node (unsorted allowed; a CSR is built by the wrapper)
    s       (N,) node scale (inv_sqrt_deg)
    out     (N, D, C):  out[n, l²+j, c] = s[n] · Σ_{e: dst=n} Y[e, l²+j] · radial[e, l, c]  (l ≥ 1),
                        out[n, 0, :] = 0

Layout: the storage's m = 0 entries are read through ``storage.kernel_tables`` (slot 0 of each
degree block); band and dense storages run the same code on the same entries.

Accuracy: exact fp32/fp64 FMAs, except the float32 backward's two products per degree block
(tf32x3 dots, relative error ≈ 2⁻²¹ per product: the tuning table's ``zonal`` record); band and
dense bitwise identical; deterministic (one program per node over its CSR segment, no atomics).
The dot backward exists because the walk waits on one edge's loads at a time (BENCHMARKS.md
"2026-12-03 (third session)"); a multiply-and-sum written out for a step of edges is rewritten
by Triton into a TF32 dot (see ``_common.SUM``), so the dots are explicit.

Bytes per edge (fp32, S = 4): (D−1)·S rotation entries, L·C·S radial, 8 (perm); backward: the
same reads plus the radial cotangent (L+1)·C·S and D−1 storage entries.

Modules: :mod:`.reference` (torch), :mod:`.kernels` (the forward, walk and dot backward
kernels), :mod:`.op` (dispatch, launches, ``triton_op`` registration with fake and
closed-form backward, the public function).
"""

from mdband.kernels.zonal.op import MAX_CHANNELS, OP, OP_BWD, backend, bwd_kernel, zonal_embed
from mdband.kernels.zonal.reference import zonal_embed_bwd_reference, zonal_embed_reference

__all__ = [
    "MAX_CHANNELS",
    "OP",
    "OP_BWD",
    "backend",
    "bwd_kernel",
    "zonal_embed",
    "zonal_embed_bwd_reference",
    "zonal_embed_reference",
]
