"""rotate-mix: rotate node features into each edge's frame and apply the radial degree mixer.

Shapes (C channels, E edges, N nodes, L = ``lmax``, D = (L+1)², Dm = 3L+1, K = (L+1)² + L²)::

    x      (N, D, C)   node features, packed l² + l + m
    src    (E,) int64  source node of each edge
    rot    RotationStorage, BAND (E, 3Ds−2) or DENSE (E, Ds, Ds), built for lmax_s ≥ L
    k      (E, K, R)   per-edge mixer kernel: block |m|=0 ((L+1)×(L+1)) then |m|=1 (L×L); entry
                       (l_in − |m|)(L − |m| + 1) + (l_out − |m|) inside block |m|
    basis  (R, C)      channel basis of the rank-R mixer
    rad    (E, Dm, C)  elementwise radial weights (mode without mixer, ``k=None``)
    y      (E, Dm, C)  edge messages in the local frame, m-major reduced order

    xl[e, (l,m), c]    = Σ_j D[e, l²+l+m, l²+j] · x[src_e, l²+j, c]
    y[e, (l_out,m), c] = Σ_r basis[r,c] Σ_{l_in} k[e, blk(|m|), l_in, l_out, r] · xl[e, (l_in,m), c]
    (or y = xl · rad without the mixer). No cross-m mixing; m = ±1 share the |m| = 1 block.

Layout: the storage's entries are read through ``storage.kernel_tables`` (an index pair per
entry, one index for the band); band and dense storages run the same arithmetic in the same
order, so they agree bitwise.

Accuracy: exact fp32/fp64 FMAs, except float32's default backward of radial rows (tf32x3
tensor-core products, :mod:`.dot`: fp32's rounding); Triton vs the torch reference: rounding
only (≲1e-6 relative in fp32).

Bytes moved per edge (forward, fp32, S = 4 bytes): rotation reads (3D−2)·S (band) or the same
number of scattered dense entries, x[src] D·C·S (L2-resident gather), k K·R·S, y write Dm·C·S.
Backward: the edge kernel reads x[src], rot, k, gy (Dm·C·S) and writes the storage cotangent,
gk, per-program basis partials and the mixer's input cotangent (Dm·C·S, scratch); a CSR-by-
source node kernel (one program per node and degree block) reads that cotangent and rot and
writes gx (N·D·C·S in total). No atomics: gx is a deterministic segment sum over the source
CSR. Which kernels run and how they are launched: the tuning table's ``rotate_mix`` record
(:mod:`mdband.kernels.tuning`).

Modules: :mod:`.mixer` (the mixer's index tables), :mod:`.reference` (torch), :mod:`.forward`,
:mod:`.backward` (edge and node kernels), :mod:`.dot` (the dot backward of radial rows),
:mod:`.launch` (kernel choice and launches), :mod:`.op` (dispatch, ``triton_op`` registration
with fake and closed-form backward, the public function).
"""

from mdband.kernels.rotate_mix.mixer import mixer_matrix, mixer_size
from mdband.kernels.rotate_mix.op import MAX_CHANNELS, MIXERS, OP, OP_BWD, backend, rotate_mix
from mdband.kernels.rotate_mix.reference import rotate_mix_bwd_reference, rotate_mix_reference

__all__ = [
    "MAX_CHANNELS",
    "MIXERS",
    "OP",
    "OP_BWD",
    "backend",
    "mixer_matrix",
    "mixer_size",
    "rotate_mix",
    "rotate_mix_bwd_reference",
    "rotate_mix_reference",
]
