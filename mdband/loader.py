"""``load_model``: one function for deepmd-kit checkpoints, mdband model files and built-ins."""

from __future__ import annotations

from collections.abc import Callable

import torch

from mdband.errors import ModelFileError
from mdband.io.modelfile import file_sha256, is_model_file, parse_model_file, read_torch_file
from mdband.potential import Potential, weights_hash

# kind -> builder(config, state_dict, options) -> torch.nn.Module; options are run-time
# settings (e.g. rotation_layout) that do not change the model's numbers or its hash.
_BUILDERS: dict[str, Callable[[dict, dict, dict], torch.nn.Module]] = {}


def register_kind(kind: str):
    """Register a model family: ``builder(config, state_dict, options) -> nn.Module``."""

    def deco(fn):
        _BUILDERS[kind] = fn
        return fn

    return deco


def _builder(kind: str):
    if kind not in _BUILDERS:
        import mdband.model.factory  # noqa: F401  (registers "sezm")
        import mdband.testing.lj  # noqa: F401  (registers "lj")
        import mdband.testing.mp  # noqa: F401  (registers "mp2")
    if kind not in _BUILDERS:
        raise ModelFileError(f"unknown model kind {kind!r} (known: {sorted(_BUILDERS)})")
    return _BUILDERS[kind]


def potential_from_parts(
    kind, type_map, cutoff, config, state_dict, metadata, device, dtype, options=None
) -> Potential:
    module = _builder(kind)(config, state_dict, dict(options or {}))
    meta = dict(metadata)
    meta.setdefault("model_hash", weights_hash(config, state_dict))
    return Potential(
        module,
        kind=kind,
        type_map=type_map,
        cutoff=cutoff,
        config=config,
        metadata=meta,
        device=device,
        dtype=dtype,
    )


def load_model(
    path,
    device: str | None = "cpu",
    dtype: str = "float32",
    head: str | None = None,
    rotation_layout: str | None = None,
    kernels: str | None = None,
    recompute: str | bool | None = None,
    stack_precision: str | None = None,
    cuda_graphs: str | bool | None = None,
    memory_budget: str | int | None = None,
) -> Potential:
    """Load a deepmd-kit SeZM training checkpoint, an mdband model file or ``builtin:NAME``.

    Parameters
    ----------
    path : str or Path
        ``.pt`` deepmd-kit checkpoint, mdband model file, or ``"builtin:NAME"``.
    device : {"cpu", "cuda", "auto"} or torch.device
    dtype : {"float32", "float64"}
    head : str, optional
        Branch of a multi-task deepmd-kit checkpoint (required when it has several).
    rotation_layout : {"auto", "band", "dense"}, optional
        Request for the rotation storage; ``"dense"`` forces dense, ``"auto"`` (default, or the
        ``MDBAND_ROTATION_LAYOUT`` environment variable) uses the band whenever every consumer
        reads it.
    kernels : {"auto", "torch"}, optional
        ``"auto"`` runs the Triton kernels on CUDA tensors; ``"torch"`` the references everywhere.
    recompute : {"off", "stack", "all"} or bool, optional
        "stack" rebuilds each block's SO(2) mixing layers, "all" each block's edge work, in the
        backward.
    stack_precision : {"tf32x3", "ieee"}, optional
        Products of the fused SO(2) mixing layers on CUDA (float32): three TF32 tensor-core
        products per fp32 product (default, about fp32 rounding; on GPUs with TMA, compute
        capability 9.0+, older ones use the exact path) or exact fp32 cuBLAS GEMMs.
    cuda_graphs : {"auto", "off"} or bool, optional
        ``"auto"`` (default) replays captured CUDA graphs for repeated evaluations on CUDA
        (edge list padded to a size bucket with edges beyond the cutoff, which contribute
        exactly zero); ``"off"`` launches every kernel from Python.
    memory_budget : str or int, optional
        Bytes one evaluation may use: a size (``"8GB"``, ``"512MiB"``, a number of bytes),
        ``"auto"`` (default: on CUDA 90 % of the GPU's free memory, on CPU no limit) or
        ``"off"``. An evaluation estimated above it runs in chunks of destination atoms (same
        numbers, more time; ``Result.chunks``); one too large even one atom per chunk raises
        :class:`~mdband.errors.MemoryBudgetError`.
        See :class:`mdband.settings.EngineSettings` for the environment overrides.
    """
    options = {
        "rotation_layout": rotation_layout,
        "kernels": kernels,
        "recompute": recompute,
        "stack_precision": stack_precision,
        "cuda_graphs": cuda_graphs,
        "memory_budget": memory_budget,
    }
    spath = str(path)
    if spath.startswith("builtin:"):
        from mdband.builtin import builtin_path

        path = builtin_path(spath.split(":", 1)[1])
    obj = read_torch_file(path)
    if is_model_file(obj):
        parse_model_file(obj, path)
        return potential_from_parts(
            obj["kind"],
            obj["type_map"],
            obj["cutoff"],
            dict(obj["config"]),
            obj["state_dict"],
            obj.get("metadata", {}),
            device,
            dtype,
            options,
        )
    from mdband.io.deepmd import import_deepmd_checkpoint

    kind, type_map, cutoff, config, sd = import_deepmd_checkpoint(obj, path, head=head)
    meta = {"source": "deepmd-kit", "source_sha256": file_sha256(path), "head": head}
    return potential_from_parts(kind, type_map, cutoff, config, sd, meta, device, dtype, options)
