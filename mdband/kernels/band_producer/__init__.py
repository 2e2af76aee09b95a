"""band_producer: edge vectors → the (E, 3D−2) band of Wigner-D rows, and its backward.

Shapes (E edges, L = ``lmax``, D = (L+1)²)::

    edge_vec (E, 3) → band (E, 3D−2), layout BAND built for L (``storage.band_offset``)

Equal to ``wigner.band_from_unit(frames.unit_vectors(v)[0], L)``: with û = v / sqrt(|v|² + 1e-14)
and the chart frame (x', y') of ``frames.edge_frame``,

    band[(l, 0), j]  = Y_l(û)[j]
    band[(l, −1), j] = +sqrt(2/(l(l+1))) · (y'·∇) Y_l(û)[j]
    band[(l, +1), j] = −sqrt(2/(l(l+1))) · (x'·∇) Y_l(û)[j]

The kernel evaluates the solid harmonics with the recursions of ``harmonics.py`` (C_m + i S_m =
(x + i y)^m times the associated-Legendre part Q_l^m(z, r²)), carrying value and gradient
(forward) or value, gradient and Hessian (backward, "hyper-dual" numbers), all unrolled at
compile time for the given L. The backward is closed form:

    dL/dû = Σ g0·∇Y + H_Y·(w_y y' + w_x x') + J_{y'}ᵀ Σ w_y ∇Y + J_{x'}ᵀ Σ w_x ∇Y,
    w_y = c_l · g(l,−1), w_x = −c_l · g(l,+1),  dL/dv = dL/dû / r − v (v·dL/dû) / r³.

Accuracy: fp32 or fp64 FMAs in the input dtype; vs the torch reference: rounding only (fp64
agrees to ~1e-14). Bytes per edge: 12 read + (3D−2)·4 written (fp32); backward (3D−2)·4 + 12
read, 12 written. No dense (E, D, D) tensor anywhere.

Layout: the kernel writes the BAND layout only, at the indices of ``storage.kernel_tables``
(DENSE storage comes from ``so3/wigner.py``).

Modules: :mod:`.hyperdual` (the recursions' coefficients and hyper-dual arithmetic, torch and
Triton), :mod:`.reference` (torch), :mod:`.kernel` (the Triton kernel), :mod:`.op` (dispatch,
launch, ``triton_op`` registration with fake and closed-form backward, the public functions).
"""

from mdband.kernels.band_producer.op import (
    OP,
    OP_BWD,
    TRITON_MAX_LMAX,
    backend,
    band_producer,
    band_storage,
)
from mdband.kernels.band_producer.reference import (
    band_producer_bwd_reference,
    band_producer_reference,
)

__all__ = [
    "OP",
    "OP_BWD",
    "TRITON_MAX_LMAX",
    "backend",
    "band_producer",
    "band_producer_bwd_reference",
    "band_producer_reference",
    "band_storage",
]
