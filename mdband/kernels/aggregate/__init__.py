"""aggregate ("flash" aggregation): rotate edge messages back, weight them and sum per destination.

Shapes (C channels, E edges, N nodes, H heads, L = ``lmax``, D = (L+1)², Dm = 3L+1)::

    y      (E, Dm, C)  edge messages in the local frame (m-major reduced order)
    rot    RotationStorage, BAND or DENSE, built for lmax_s ≥ L
    rho    (D,)        rescale per packed column (``storage.rotate_inv_rescale``)
    dst    (E,) int64  destination node (unsorted allowed; the wrapper builds a CSR)
    env    (E,)        envelope
    logits (E, H), z (H,)   attention logits and null weight (softplus'ed + 1e-7), or
    s      (N,)        node scale (inv_sqrt_deg) of the plain envelope scatter (no attention)
    out    (N, D, C)

    msg[e, l²+j, c] = rho[l²+j] · Σ_m D[e, l²+l+m, l²+j] · y[e, (l,m), c]
    attention:  w = env² · exp(logit);  α[e,h] = w[e,h] / (z_h + Σ_{e': dst=n} w[e',h])
                out[n, :, c] = Σ_{e: dst=n} α[e, c // (C/H)] · msg[e, :, c]
    plain:      out[n] = s[n] · Σ_{e: dst=n} env_e · msg_e

The softmax is max-shifted per (node, head): the running max starts at log z, so the null weight
enters as exp(log z − max); nodes without edges give 0 and large logits do not overflow.

Layout: the storage's entries are read through ``storage.kernel_tables`` (an index pair per
entry, one index for the band); band and dense storages run the same code on the same entries.

Accuracy: exact fp32/fp64 FMAs and IEEE reciprocals; exp/log are Triton's (≤ 2 ulp in fp32);
float32's default backward takes tf32x3 tensor-core products (:mod:`.dot`, fp32's rounding).
Band and dense storages are bitwise identical; vs the torch reference: rounding only.
Deterministic: no atomics; every sum has a fixed order.

Parallel decomposition (NB = L+1 degree blocks: block b = degree l = b, its 2l+1 packed columns
and ≤ 3 reduced rows). Attention first runs a statistics pass (:mod:`.stats`). Forward and
backward then run one program per (destination node n, degree block b), grid (N, NB), walking
n's segment in CSR order (:mod:`.walk`; the backward's "dot" variant takes BLOCK_EDGES edges per
step as tl.dot tile products, :mod:`.dot`); the backward writes per-(block, edge) partials of
q = <gout[dst], msg> (per head; plain mode also per-(block, node) partials of gs) that a torch
epilogue sums in block order to finish glogits, genv (and gs). Which kernels run and how they
are launched: the tuning table's ``aggregate`` record (:mod:`mdband.kernels.tuning`).

Bytes moved per edge (fp32, S = 4): y Dm·C·S and the rotation (3D−2)·S (band; as many scattered
dense entries), each read by one program only, perm 8, env/logits (1+H)·S per block program
(mostly cache hits); out N·D·C·S in total. The backward also reads gout (N·D·C·S) and writes gy
(Dm·C·S), the storage cotangent and NB·H·S (plain: NB·S) of partials for the epilogue. No dense
(E, D, D) buffer for the band.

Modules: :mod:`.reference` (torch), :mod:`.stats`, :mod:`.walk`, :mod:`.dot` (Triton kernels),
:mod:`.launch` (kernel choice and launches), :mod:`.op` (dispatch, ``triton_op`` registration
with fake and closed-form backward, the public function).
"""

from mdband.kernels.aggregate.op import MAX_CHANNELS, OP, OP_BWD, aggregate, backend
from mdband.kernels.aggregate.reference import aggregate_bwd_reference, aggregate_reference

__all__ = [
    "MAX_CHANNELS",
    "OP",
    "OP_BWD",
    "aggregate",
    "aggregate_bwd_reference",
    "aggregate_reference",
    "backend",
]
