"""Fused SeZM edge kernels: one unit per op (torch reference + Triton kernels + ``triton_op``).

Ops in one module: ``edge_dot``, ``force_assembly``, ``take_rows``, ``grid_product``,
``segment_outer``, ``radial_basis``, ``seed_mlp``, ``radial_mlp``, ``cell_pairs``; ops spread
over several files are packages: ``aggregate``, ``rotate_mix``, ``so2_stack``
(``so2_mix_layer``), ``zonal`` (``zonal_embed``), ``band_producer``. Import the op functions
from their unit (``from mdband.kernels.rotate_mix import rotate_mix``). Shared: ``tuning`` (the
kernel choices and launches of every op, changed only inside ``tuning.override``),
``capability`` (the layout gate) and ``segments``.

Every op reads the rotation storage in either layout (BAND or DENSE) through the tables of
``mdband.so3.storage``; CUDA tensors of fp32/fp64 run the Triton kernel, anything else the torch
reference. ``force_backend("triton" | "reference")`` pins the choice (tests, GPU checks).
"""

from mdband.kernels._common import force_backend, force_triton

__all__ = ["force_backend", "force_triton"]
