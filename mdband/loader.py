"""``load_model``: one function for deepmd-kit checkpoints, mdband model files and built-ins."""

from __future__ import annotations

import logging
import time

import torch

from mdband.errors import MdbandError, ModelContractError, ModelFileError, is_out_of_memory
from mdband.io.modelfile import file_sha256, is_model_file, parse_model_file, read_torch_file
from mdband.kinds import model_builder
from mdband.potential import Potential
from mdband.result import verified_hash

logger = logging.getLogger(__name__)


def potential_from_parts(
    kind,
    type_map,
    cutoff,
    config,
    state_dict,
    metadata,
    device,
    dtype,
    options=None,
    source=None,
    checked: bool = False,
) -> Potential:
    """Build a :class:`Potential` of model ``kind`` from its configuration and weights.

    Every weight must be one the built network has, with its shape (a
    :class:`~mdband.errors.ModelFileError` otherwise, whatever the kind's builder checks). The
    model hash recorded in ``metadata`` is kept where a checksum ``checked`` the file it came
    from, else only where the weights give it (:func:`mdband.result.verified_hash`).
    """
    where = f"{source}: " if source is not None else ""
    try:
        module = model_builder(kind)(config, state_dict, dict(options or {}))
    except MdbandError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ModelFileError(
            f"{where}cannot build the {kind} model from its configuration "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:160]})"
        ) from None
    if not isinstance(module, torch.nn.Module):  # what Potential checks, before the weights
        raise ModelContractError(kind, [f"torch.nn.Module (it built a {type(module).__name__})"])
    check_weights(module, state_dict, where)
    meta = dict(metadata)
    if not (checked and meta.get("model_hash")):
        params = {name for name, _ in module.named_parameters()}
        meta["model_hash"] = verified_hash(config, state_dict, meta.get("model_hash"), params)
    return Potential(
        module,
        kind=kind,
        type_map=type_map,
        cutoff=cutoff,
        config=config,
        metadata=meta,
        device=device,
        dtype=dtype,
        neighbour_list=(options or {}).get("neighbour_list"),
        host_memory=(options or {}).get("host_memory"),
    )


def load_model(
    path,
    device: str | torch.device | None = "auto",
    dtype: str = "float32",
    head: str | None = None,
    rotation_layout: str | None = None,
    kernels: str | None = None,
    recompute: str | bool | None = None,
    stack_precision: str | None = None,
    cuda_graphs: str | bool | None = None,
    compile: str | bool | None = None,
    neighbour_list: str | None = None,
    memory_budget: str | int | None = None,
    host_memory: str | bool | None = None,
) -> Potential:
    """Load a deepmd-kit SeZM training checkpoint, an mdband model file or ``builtin:NAME``.

    Parameters
    ----------
    path : str or Path
        ``.pt`` deepmd-kit checkpoint, mdband model file, or ``"builtin:NAME"``.
    device : {"auto", "cpu", "cuda", "cuda:N"} or torch.device
        ``"auto"`` (default): CUDA when available, else CPU.
    dtype : {"float32", "float64"}
    head : str, optional
        Head (branch) of a multi-task deepmd-kit checkpoint, by name or by one of its
        ``model_branch_alias`` aliases (case-insensitive when no exact match), as deepmd-kit's
        ``DeepPot(head=)`` takes it. None: the head aliased ``Default``; a checkpoint without
        one raises :class:`~mdband.errors.ModelFileError` listing the heads and aliases.
    rotation_layout : {"auto", "band", "dense"}, optional
        Request for the rotation storage; ``"dense"`` forces dense, ``"auto"`` (default, or the
        ``MDBAND_ROTATION_LAYOUT`` environment variable) uses the band whenever every consumer
        reads it.
    kernels : {"auto", "torch"}, optional
        ``"auto"`` runs the Triton kernels on CUDA tensors; ``"torch"`` the references everywhere.
    recompute : {"off", "stack", "all"} or bool, optional
        "stack" rebuilds each block's SO(2) mixing layers, "all" each block's edge work, in the
        backward.
    stack_precision : {"tf32x3", "fp16x3", "fp16", "ieee"}, optional
        Products of the fused SO(2) mixing layers on CUDA (float32): three TF32 tensor-core
        products per fp32 product (default, about fp32 rounding; on GPUs with TMA, compute
        capability 9.0+, older ones use the exact path), three fp16 products (same rounding or
        better, each edge's inputs scaled by a power of two; about as fast), one fp16
        product (≈ 2⁻¹¹ relative per product), or exact fp32 cuBLAS GEMMs. Measured force
        errors: ``docs/precision.md``.
    cuda_graphs : {"auto", "off"} or bool, optional
        ``"auto"`` (default) replays captured CUDA graphs for repeated evaluations on CUDA
        (edge list padded to a size bucket with edges beyond the cutoff, which contribute
        exactly zero); ``"off"`` launches every kernel from Python.
    compile : {"off", "on"} or bool, optional
        ``"on"``: ``torch.compile`` the SeZM model's torch code between its fused ops (the
        first call of each new size compiles, tens of seconds on a GPU); ``"off"`` (default).
    neighbour_list : {"auto", "cell_list", "vesin"}, optional
        ``"auto"`` (default): the cell list on the GPU for CUDA models, vesin on the CPU
        for CPU models; ``"cell_list"`` / ``"vesin"`` force one.
    memory_budget : str or int, optional
        Bytes one evaluation may use: a size (``"8GB"``, ``"512MiB"``, a number of bytes),
        ``"auto"`` (default: on CUDA 90 % of the GPU's free memory, on CPU no limit) or
        ``"off"``. An evaluation estimated above it runs in chunks of destination atoms (same
        numbers, more time; ``Result.chunks``); one too large even one atom per chunk raises
        :class:`~mdband.errors.MemoryBudgetError`.
    host_memory : {"auto", "keep", "system"} or bool, optional
        ``"auto"`` (default): a model loaded for the CPU keeps freed host memory in the
        process for the next call (glibc, process-wide: no page faults on each call's large
        tensors, 20–45 % faster CPU calls; the process keeps its peak memory until it exits);
        ``"keep"`` does so for any device, ``"system"`` never (:mod:`mdband.host_memory`).
        See :class:`mdband.settings.EngineSettings` for the environment overrides.
    """
    t0 = time.perf_counter()
    options = {
        "rotation_layout": rotation_layout,
        "kernels": kernels,
        "recompute": recompute,
        "stack_precision": stack_precision,
        "cuda_graphs": cuda_graphs,
        "compile": compile,
        "neighbour_list": neighbour_list,
        "memory_budget": memory_budget,
        "host_memory": host_memory,
    }
    try:
        return _load(path, device, dtype, head, options, t0)
    except MdbandError:
        raise
    except (TypeError, KeyError, IndexError, AttributeError, RuntimeError) as exc:
        # a malformed checkpoint (a value of a type nothing expects, a tensor of another shape)
        # is a bad file, told in one line, not a traceback; memory errors stay what they are
        if is_out_of_memory(exc):
            raise
        raise ModelFileError(
            f"{path}: cannot build a model from it ({type(exc).__name__}: {exc})"
        ) from exc


def _load(path, device, dtype, head, options, t0) -> Potential:
    spath = str(path)
    if spath.startswith("builtin:"):
        from mdband.builtin import builtin_path

        path = builtin_path(spath.split(":", 1)[1])
    obj = read_torch_file(path)
    if is_model_file(obj):
        parse_model_file(obj, path)
        pot = potential_from_parts(
            obj["kind"],
            obj["type_map"],
            obj["cutoff"],
            dict(obj["config"]),
            obj["state_dict"],
            obj.get("metadata", {}),
            device,
            dtype,
            options,
            source=path,
            checked="checksum" in obj,  # parse_model_file verified it
        )
        return _loaded(pot, spath, t0)
    from mdband.io.deepmd import import_deepmd_checkpoint

    imp = import_deepmd_checkpoint(obj, path, head=head)
    meta = {"source": "deepmd-kit", "source_sha256": file_sha256(path), **imp.metadata}
    pot = potential_from_parts(
        imp.kind, imp.type_map, imp.cutoff, imp.config, imp.state_dict, meta, device, dtype,
        options, source=path,
    )  # fmt: skip
    return _loaded(pot, spath, t0)


def check_weights(module, state_dict: dict, where: str = "") -> None:
    """Raise :class:`ModelFileError` unless ``state_dict`` fits the built network.

    It must hold exactly the built network's weights, each with the network's shape.
    """
    own = module.state_dict()
    extra = sorted(set(state_dict) - set(own))
    missing = sorted(set(own) - set(state_dict))
    wrong = [
        k for k in state_dict if k in own and tuple(state_dict[k].shape) != tuple(own[k].shape)
    ]
    if wrong:
        k = wrong[0]
        raise ModelFileError(
            f"{where}weight {k} has shape {tuple(state_dict[k].shape)}, but the model's "
            f"configuration gives it {tuple(own[k].shape)}"
        )
    if extra or missing:
        what = (
            f"weights the model does not have: {', '.join(extra[:3])}"
            if extra
            else (f"no weight {', '.join(missing[:3])}")
        )
        raise ModelFileError(f"{where}the weights do not fit the model's configuration ({what})")


def _loaded(pot: Potential, source: str, t0: float) -> Potential:
    logger.info(
        "loaded model %s: %s %s, types %s, cutoff %g Å, on %s (%s), %s layout, %.2f s",
        source,
        pot.kind,
        pot.model_hash[:12],
        " ".join(pot.type_map),
        pot.cutoff,
        pot.device,
        str(pot.dtype).replace("torch.", ""),
        pot.rotation_layout,
        time.perf_counter() - t0,
    )
    return pot
