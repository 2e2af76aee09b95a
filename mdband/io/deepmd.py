"""Importer for deepmd-kit SeZM (DPA4) training checkpoints (``.pt``).

A training checkpoint is ``{"model": state_dict, ...}``; the state dict holds
``_extra_state.model_params`` (the normalised model config) and weights under
``model.<branch>.atomic_model.*`` (branch ``Default`` for single-task models, the head name for
multi-task ones, whose configs live in ``model_params["model_dict"]``; heads are chosen by name
or ``model_branch_alias`` as deepmd-kit's DeepPot chooses them). Weights holding the dens heads
(``dens_fitting_net``) are evaluated in deepmd-kit's dens mode (:mod:`mdband.model.dens`).
Unfolded LoRA adapters are folded into their base weights; a missing
``descriptor.version_tensor`` means version 1.0. Derived index buffers and the weights the
evaluated mode does not read are dropped; the rest must load strictly.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from mdband.errors import ModelFileError, UnsupportedModelError
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
    "descriptor.version_tensor",
    "descriptor.mean",
    "descriptor.stddev",
)
# what each mode does not read: the plain head ignores out_std and the dens statistics; the
# dens mode ignores the plain head, and a plain evaluation gives the force embedding and the
# denoising head nothing to act on (see mdband.model.dens)
_UNUSED = {
    "ener": (("out_std", "dens_force_rmsd"), ()),
    "dens": (
        (),
        ("fitting_net.", "dens_fitting_net.force_embedding.", "dens_fitting_net.denoising_head."),
    ),
}


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


_DORMANT_SPIN = (
    "spin_embedding.mag_layer2.matrix",
    "spin_embedding.adam_spin_vec_weight",
    "spin_embedding.adam_spin_nbr_weight",
    "env_seed_embedding.spin_scale",
)


def migrate_spin_1_1(cfg, sd: dict[str, torch.Tensor]):
    """Migrate native spin weights from descriptor 1.1 to 1.2, as deepmd-kit does.

    The migration is in place on ``sd``; returns the config at version 1.2 (other configs
    unchanged).

    Version 1.2 applies the env-seed spin gate to the quadratic form, not to the spin channels:
    a 1.1 ``spin_scale`` is squared. A model without magnetic types has its dormant spin
    weights zeroed (deepmd-kit ``SeZM._migrate_variables``).
    """
    if cfg.spin is None or cfg.spin.scheme != "native" or not 1.1 <= cfg.version < 1.2:
        return cfg
    gate = "descriptor.env_seed_embedding.spin_scale"
    if not any(cfg.spin.use_spin):
        for key in _DORMANT_SPIN:
            if "descriptor." + key in sd:
                sd["descriptor." + key] = torch.zeros_like(sd["descriptor." + key])
    elif gate in sd:
        sd[gate] = sd[gate] ** 2
    return dataclasses.replace(cfg, version=1.2)


def head_table(model_dict: dict, path) -> dict[str, list[str]]:
    """Each head of a multi-task ``model_dict`` with its ``model_branch_alias`` list."""
    table, owner = {}, {}
    for name, branch in model_dict.items():
        aliases = branch.get("model_branch_alias", []) if isinstance(branch, dict) else []
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise ModelFileError(f"{path}: head {name!r} has model_branch_alias {aliases!r}")
        table[name] = list(aliases)
        for alias in aliases:
            if alias in owner or alias in model_dict:
                raise ModelFileError(f"{path}: alias {alias!r} names two heads")
            owner[alias] = name
    return table


def describe_heads(table: dict[str, list[str]]) -> str:
    """``water_1 (aliases Default, Water), water_2 (alias Water2)``."""
    parts = []
    for name, aliases in table.items():
        word = "alias" if len(aliases) == 1 else "aliases"
        parts.append(f"{name} ({word} {', '.join(aliases)})" if aliases else name)
    return ", ".join(parts)


def resolve_head(table: dict[str, list[str]], head: str | None, path) -> str:
    """Return the head deepmd-kit's DeepPot evaluates for ``head``.

    ``head`` is a head's name or one of its aliases, matched exactly, else case-insensitively
    (the first match); none given: the head aliased ``Default``, and without one the choice is
    the user's.
    """
    names = {}  # deepmd-kit's order: each head, then its aliases (decides "the first match")
    for name, aliases in table.items():
        names.update({key: name for key in (name, *aliases)})
    if head is None:
        if "Default" not in names:
            raise ModelFileError(
                f"{path} is a multi-task checkpoint without a Default head; choose one with "
                f"head= (--head): {describe_heads(table)}"
            )
        head = "Default"
    if head not in names:
        head = next((n for n in names if n.lower() == str(head).lower()), head)
    if head not in names:
        raise ModelFileError(f"{path}: no head {head!r}; heads: {describe_heads(table)}")
    return names[head]


def unwrap_bridged_composition(params: dict) -> dict:
    """Return a DPA4 model section from deepmd-kit's canonical spelling of a bridged model.

    deepmd-kit expands ``bridging_method`` into ``{"type": "linear_ener", "weights": "sum",
    "models": [<dpa4 model>, {"type": "inner_potential", "mode", "r_inner", "r_outer"}]}`` and
    accepts that form as input; its pt backend builds the same ``SeZMModel`` (same weight
    names) from either. Any other ``linear_ener`` composition is refused. Other sections are
    returned unchanged.
    """
    if str(params.get("type", "")).lower() != "linear_ener":
        return params
    children = [c for c in params.get("models") or [] if isinstance(c, dict)]
    inner = [c for c in children if c.get("type") == "inner_potential"]
    learned = [c for c in children if c.get("type") != "inner_potential"]
    if len(inner) != 1 or len(learned) != 1 or len(children) != 2:
        raise UnsupportedModelError(
            "model.type", "linear_ener", "only deepmd-kit's bridged DPA4 [dpa4, inner_potential]"
        )
    if str(params.get("weights")) != "sum":
        raise UnsupportedModelError("linear_ener.weights", params.get("weights"), "need 'sum'")
    if params.get("shared_dict"):
        raise UnsupportedModelError("linear_ener.shared_dict", params["shared_dict"])
    out = dict(learned[0])
    out.setdefault("type", "dpa4")
    out["type_map"] = out.get("type_map", params.get("type_map"))
    if out["type_map"] != params.get("type_map"):
        raise UnsupportedModelError("linear_ener.models.type_map", out["type_map"])
    for key in ("pair_exclude_types", "atom_exclude_types", "spin"):
        if params.get(key):
            out[key] = params[key]
    out["bridging_method"] = inner[0].get("mode", "zbl")
    out["bridging_r_inner"] = inner[0].get("r_inner", 0.5)
    out["bridging_r_outer"] = inner[0].get("r_outer", 0.8)
    return out


def _select_branch(model_sd: dict, head: str | None, path) -> tuple[dict, str, dict]:
    """(model params, branch of the weights, metadata naming the head) of ``head``."""
    params = model_sd["_extra_state"]["model_params"]
    if "model_dict" in params:
        table = head_table(params["model_dict"], path)
        branch = resolve_head(table, head, path)
        meta = {"head": branch, "head_requested": head, "heads": table}
        return params["model_dict"][branch], branch, meta
    branches = sorted({k.split(".")[1] for k in model_sd if k.startswith("model.")})
    if head is not None and head not in branches:
        raise ModelFileError(f"{path}: no head {head!r}; available heads: {branches}")
    branch = head or ("Default" if "Default" in branches else (branches or ["Default"])[0])
    return params, branch, {"head": None}


class ImportedCheckpoint(NamedTuple):
    """What :func:`import_deepmd_checkpoint` reads: the model file's parts and its metadata.

    In the metadata, ``head``: the head evaluated, ``heads``: every head with its aliases,
    multi-task only.
    """

    kind: str
    type_map: list[str]
    cutoff: float
    config: dict
    state_dict: dict
    metadata: dict


def import_deepmd_checkpoint(obj: dict, path, head: str | None = None) -> ImportedCheckpoint:
    """Return the parts of a model file for a deepmd-kit checkpoint.

    ``head``: a head or alias of a multi-task one; see :func:`resolve_head`.
    """
    model_sd = obj.get("model")
    if not isinstance(model_sd, dict) or "_extra_state" not in model_sd:
        raise ModelFileError(
            f"{path} is not a SeZM checkpoint or mdband model file "
            "(no deepmd-kit 'model' state with '_extra_state')"
        )
    extra = model_sd["_extra_state"]
    if not isinstance(extra, dict) or "model_params" not in extra:
        raise ModelFileError(f"{path}: deepmd-kit checkpoint lacks _extra_state.model_params")
    params, branch, meta = _select_branch(model_sd, head, path)
    prefix = f"model.{branch}.atomic_model."
    sd = {k[len(prefix) :]: v for k, v in model_sd.items() if k.startswith(prefix)}
    version_t = sd.get("descriptor.version_tensor")
    version = 1.0 if version_t is None else round(float(version_t), 6)
    # deepmd-kit switches a model to its dens mode when the weights hold the dens heads
    mode = "dens" if any(k.startswith("dens_fitting_net.") for k in sd) else "ener"
    config = config_from_deepmd(unwrap_bridged_composition(params), version, active_mode=mode)
    if not sd:
        raise ModelFileError(f"{path}: no weights under '{prefix}'")
    fold_lora(sd)
    config = migrate_spin_1_1(config, sd)
    unused_keys, unused_prefixes = _UNUSED[mode]
    clean = {}
    for k, v in sd.items():
        if k in _DROP_KEYS or k.startswith(_DROP_PREFIXES) or k.endswith(_DERIVED_SUFFIXES):
            continue
        if k in unused_keys or k.startswith(unused_prefixes):
            continue
        clean[k] = v
    return ImportedCheckpoint(
        "sezm", list(config.type_map), config.rcut, config.to_dict(), clean, meta
    )
