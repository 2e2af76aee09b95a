"""Fused SeZM edge kernels: one op per module (torch reference + Triton kernel + triton_op).

Modules: ``band_producer``, ``rotate_mix``, ``so2_stack`` (``so2_mix_layer``), ``edge_dot``,
``aggregate``, ``zonal`` (``zonal_embed``), ``force_assembly``, ``take_rows``, ``grid_product``,
``segment_outer``, ``radial_basis``, ``seed_mlp``, ``radial_mlp`` and the gate
``capability``;
import the op functions from their modules (``from mdband.kernels.rotate_mix import
rotate_mix``).

Every op reads the rotation storage in either layout (BAND or DENSE) through the tables of
``mdband.so3.storage``; CUDA tensors of fp32/fp64 run the Triton kernel, anything else the torch
reference. ``force_backend("triton" | "reference")`` pins the choice (tests, GPU checks).
"""

from mdband.kernels._common import force_backend, force_triton

__all__ = ["force_backend", "force_triton"]
