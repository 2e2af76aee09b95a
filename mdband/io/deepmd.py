"""Importer for deepmd-kit SeZM (DPA4) training checkpoints (``.pt``).

A training checkpoint is ``{"model": state_dict, ...}``; the state dict holds
``_extra_state.model_params`` (the normalised model config) and weights under
``model.<branch>.atomic_model.*`` (branch ``Default`` for single-task models, the head name for
multi-task ones, whose configs live in ``model_params["model_dict"]``). Unfolded LoRA adapters are
folded into their base weights; a missing ``descriptor.version_tensor`` means version 1.0.
Derived index buffers are dropped (mdband recomputes them) and the rest must load strictly.
"""

from __future__ import annotations

import torch

from mdband.errors import ModelFileError
from mdband.io.deepmd_params import config_from_deepmd

_DERIVED_SUFFIXES = (
    "expand_index",
    "balance_weight",
    "m0_idx",
    "pos_indices",
    "neg_indices",
    "kernel_compact_index",
    "kernel_dense_index",
)
_DROP_PREFIXES = ("descriptor.wigner_calc.", "descriptor.gie.")
_DROP_KEYS = (
    "out_std",
    "dens_force_rmsd",
    "descriptor.version_tensor",
    "descriptor.mean",
    "descriptor.stddev",
)


def fold_lora(sd: dict[str, torch.Tensor]) -> None:
    """Fold LoRA adapters in place: ΔW = B·A·scaling (SO(3) per degree, SO(2) per |m| block)."""
    for key in [k for k in sd if k.endswith(".A_by_l")]:
        p = key[: -len("A_by_l")]
        if p + "B_by_l" not in sd or p + "weight" not in sd:
            continue
        a, b = sd.pop(p + "A_by_l"), sd.pop(p + "B_by_l")
        s = float(sd.pop(p + "lora_scaling", torch.tensor(1.0)))
        sd[p + "weight"] = sd[p + "weight"] + torch.einsum("lor,lri->lio", b, a) * s
    for key in [k for k in sd if k.endswith(".A_m0")]:
        p = key[: -len("A_m0")]
        if p + "B_m0" not in sd or p + "weight_m0" not in sd:
            continue
        s = float(sd.pop(p + "lora_scaling", torch.tensor(1.0)))
        pairs = [("A_m0", "B_m0", "weight_m0")]
        i = 0
        while p + f"A_m.{i}" in sd:
            pairs.append((f"A_m.{i}", f"B_m.{i}", f"weight_m.{i}"))
            i += 1
        for ak, bk, wk in pairs:
            a, b = sd.pop(p + ak), sd.pop(p + bk)
            sd[p + wk] = sd[p + wk] + torch.einsum("ri,or->io", a, b) * s


def _select_branch(model_sd: dict, head: str | None, path) -> tuple[dict, str]:
    params = model_sd["_extra_state"]["model_params"]
    if "model_dict" in params:
        heads = list(params["model_dict"])
        if head is None:
            if len(heads) != 1:
                raise ModelFileError(
                    f"{path} is a multi-task checkpoint with heads {heads}; choose one with head="
                )
            head = heads[0]
        if head not in params["model_dict"]:
            raise ModelFileError(f"{path}: no head {head!r}; available heads: {heads}")
        return params["model_dict"][head], head
    branches = sorted({k.split(".")[1] for k in model_sd if k.startswith("model.")})
    if head is not None and head not in branches:
        raise ModelFileError(f"{path}: no head {head!r}; available heads: {branches}")
    branch = head or ("Default" if "Default" in branches else (branches or ["Default"])[0])
    return params, branch


def import_deepmd_checkpoint(obj: dict, path, head: str | None = None):
    """Return (kind, type_map, cutoff, config dict, state_dict) for a deepmd-kit checkpoint."""
    model_sd = obj.get("model")
    if not isinstance(model_sd, dict) or "_extra_state" not in model_sd:
        raise ModelFileError(
            f"{path} is not a SeZM checkpoint or mdband model file "
            "(no deepmd-kit 'model' state with '_extra_state')"
        )
    extra = model_sd["_extra_state"]
    if not isinstance(extra, dict) or "model_params" not in extra:
        raise ModelFileError(f"{path}: deepmd-kit checkpoint lacks _extra_state.model_params")
    params, branch = _select_branch(model_sd, head, path)
    prefix = f"model.{branch}.atomic_model."
    sd = {k[len(prefix) :]: v for k, v in model_sd.items() if k.startswith(prefix)}
    version_t = sd.get("descriptor.version_tensor")
    version = 1.0 if version_t is None else round(float(version_t), 6)
    config = config_from_deepmd(params, version)
    if not sd:
        raise ModelFileError(f"{path}: no weights under '{prefix}'")
    fold_lora(sd)
    clean = {}
    for k, v in sd.items():
        if k in _DROP_KEYS or k.startswith(_DROP_PREFIXES) or k.endswith(_DERIVED_SUFFIXES):
            continue
        clean[k] = v
    return "sezm", list(config.type_map), config.rcut, config.to_dict(), clean
