"""Exporter to deepmd-kit: a SeZM model as a deepmd-kit 3.2 training checkpoint (``.pt``).

The inverse of :mod:`mdband.io.deepmd`'s importer. The checkpoint is what ``dp train`` saves::

    {"model": {"_extra_state": {"model_params": {...}, "train_infos": {"lr": 0, "step": 0}},
               "model.Default.min_nbor_dist": ...,
               "model.Default.atomic_model.<name>": tensor, ...}}

* ``model_params`` is the DPA4 model section as deepmd-kit's argument checker normalises it
  (every option written out, deepmd-kit 3.2's defaults for the options mdband fixes), built from
  the model's :class:`~mdband.config.SeZMConfig`; an option this exporter does not know is
  refused by name (:class:`~mdband.errors.UnsupportedModelError`), never dropped.
* The weights keep their names (mdband's state-dict names are deepmd-kit's).
* The buffers the importer drops because mdband recomputes them are written back as deepmd-kit
  builds them (degree and m-major index tables, norm weights, the radial mixer's scatter
  indices, the geometric embedding's row tables, the l=1 Wigner-D permutation), with
  ``version_tensor`` (the descriptor version the model computes with), empty descriptor
  statistics and deepmd-kit's initial ``out_std``, ``dens_force_rmsd`` and ``min_nbor_dist``,
  so that deepmd-kit loads the file strictly (``dp --pt freeze`` does).

``DeepPot``, ``dp --pt test`` and ``dp --pt freeze`` read the file; the numbers equal mdband's
(float64: to rounding). ``tests/io/test_deepmd_export.py`` checks both in the reference venv.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

import torch
from ase.data import atomic_numbers

from mdband.config import SeZMConfig
from mdband.errors import UnsupportedModelError
from mdband.io.atomic import atomic_path

PREFIX = "model.Default.atomic_model."
MAX_LMAX = 10  # deepmd-kit stores coefficient tables of l >= 11 that mdband does not build
TRAIN_INFOS = {"lr": 0, "step": 0}

# descriptor options that SeZMConfig fixes (config._FIXED) and the other options deepmd-kit
# 3.2's argcheck writes out, at their normalised values, in its order
_DESCRIPTOR_REST: dict[str, Any] = {
    "seed": None,
    "sel": 256,
    "random_gamma": True,
    "edge_cartesian": False,
    "node_cartesian": "none",
    "mmax": 1,
    "m_schedule": None,
    "extra_node_l": 0,
    "so2_norm": False,
    "so2_attn_res": "none",
    "atten_f_mix": False,
    "atten_v_proj": False,
    "atten_o_proj": False,
    "mlp_bias": False,
    "layer_scale": False,
    "full_attn_res": "none",
    "block_attn_res": "none",
    "node_wise_s2": False,
    "node_wise_so3": False,
    "message_node_s2": False,
    "readout_layers": 1,
    "activation_function": "silu",
    "use_amp": True,
    "add_chg_spin_ebd": False,
    "default_chg_spin": None,
    "exclude_types": [],
    "trainable": True,
}
_FITTING_REST: dict[str, Any] = {
    "seed": None,
    "numb_fparam": 0,
    "numb_aparam": 0,
    "default_fparam": None,
    "dim_case_embd": 0,
    "activation_function": "silu",
    "resnet_dt": False,
    "trainable": True,
    "rcond": None,
    "atom_ener": [],
    "use_aparam_as_mask": False,
    "case_film_embd": False,
}
_MODEL_REST = {
    "data_stat_nbatch": 10,
    "data_stat_protect": 0.01,
    "data_bias_nsample": 10,
    "pair_exclude_types": [],
    "atom_exclude_types": [],
    "preset_out_bias": None,
    "srtab_add_bias": True,
    "use_compile": False,
    "enable_tf32": True,
    "model_branch_alias": [],
    "info": {},
    "bridging_method": "None",
    "bridging_r_inner": 0.5,
    "bridging_r_outer": 0.8,
    "lora": None,
}
# SeZMConfig fields -> descriptor keys of the same meaning and value
_SAME = (
    "rcut",
    "channels",
    "n_radial",
    "edge_norm",
    "n_focus",
    "n_atten_head",
    "radial_so2_mode",
    "radial_so2_rank",
    "ffn_so3_grid",
    "message_node_so3",
    "ffn_neurons",
    "so3_readout",
    "env_exp",
    "basis_type",
    "radial_mlp",
    "use_env_seed",
    "kmax",
    "focus_dim",
    "ffn_blocks",
    "sandwich_norm",
    "s2_activation",
    "lebedev_quadrature",
    "glu_activation",
    "eps",
    "grid_mlp",
    "grid_branch",
    "add_chg_spin_ebd",
    "default_chg_spin",
)
# fields written elsewhere (type_map, l_schedule as lmax/n_blocks/l_schedule, mixing_layers,
# version as version_tensor, fitting_neuron as fitting_net.neuron, the case embedding as
# fitting_net.dim_case_embd / case_film_embd) or not a model option; active_mode and sel: only
# "ener" (sel then 0) is written; spin models are refused; bridging as the model section's
# bridging_method / bridging_r_inner / bridging_r_outer
_HANDLED = {
    "bridging",
    "bridging_r_inner",
    "bridging_r_outer",
    "type_map",
    "l_schedule",
    "mixing_layers",
    "version",
    "fitting_neuron",
    "dim_case_embd",
    "case_film_embd",
    "active_mode",
    "sel",
    "extra",
    "spin",
}


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def model_params(cfg: SeZMConfig, precision: str) -> dict:
    """deepmd-kit's normalised ``model_params`` of ``cfg`` (``precision``: float32/float64)."""
    unknown = sorted({f.name for f in fields(SeZMConfig)} - set(_SAME) - _HANDLED)
    if unknown:
        raise UnsupportedModelError(
            unknown[0], getattr(cfg, unknown[0]), "the deepmd-kit exporter does not write it"
        )
    if cfg.direct_forces:
        raise UnsupportedModelError(
            "active_mode", cfg.active_mode, "the deepmd-kit exporter writes energy models"
        )
    if cfg.lmax > MAX_LMAX:
        raise UnsupportedModelError("lmax", cfg.lmax, f"the exporter writes lmax <= {MAX_LMAX}")
    if cfg.spin is not None:
        raise UnsupportedModelError(
            "spin", cfg.spin.to_dict(), "the deepmd-kit exporter does not write spin models"
        )
    same = {k: _plain(getattr(cfg, k)) for k in _SAME}
    grid_mlp, grid_branch = list(cfg.grid_mlp), list(cfg.grid_branch)
    same["grid_mlp"] = grid_mlp[0] if len(set(grid_mlp)) == 1 else grid_mlp
    same["grid_branch"] = grid_branch[0] if len(set(grid_branch)) == 1 else grid_branch
    so2, ffn = cfg.lebedev_quadrature  # one bool when both agree, as argcheck keeps a bool
    same["lebedev_quadrature"] = so2 if so2 == ffn else [so2, ffn]
    uniform = len(set(cfg.l_schedule)) == 1
    values = {
        **_DESCRIPTOR_REST,
        **same,
        "type": "dpa4",
        "rcut": float(cfg.rcut),
        "n_blocks": cfg.n_blocks,
        "mixing_layers": cfg.mixing_layers,
        "precision": precision,
        "lmax": cfg.lmax,
        "l_schedule": None if uniform else list(cfg.l_schedule),
    }
    descriptor = {k: values[k] for k in _DESCRIPTOR_ORDER}
    fitting: dict[str, Any] = {
        "type": "dpa4_ener",
        "neuron": list(cfg.fitting_neuron),
        "precision": precision,
    }
    fitting.update(_FITTING_REST)
    # a head of a multi-task model keeps its case one-hot (fitting_net.case_embd in the weights)
    fitting.update(dim_case_embd=cfg.dim_case_embd, case_film_embd=cfg.case_film_embd)
    rest = dict(_MODEL_REST)
    if cfg.bridging != "none":  # deepmd-kit's concise spelling, as dp train stores it
        rest.update(bridging_method=cfg.bridging, bridging_r_inner=cfg.bridging_r_inner,
                    bridging_r_outer=cfg.bridging_r_outer)  # fmt: skip
    return {
        "type": "dpa4",
        "type_map": list(cfg.type_map),
        "descriptor": descriptor,
        "fitting_net": fitting,
        **rest,
    }


# argcheck's order of the descriptor options (what normalisation writes)
_DESCRIPTOR_ORDER = (
    "type rcut channels n_radial n_blocks mixing_layers precision lmax edge_norm n_focus "
    "n_atten_head radial_so2_mode radial_so2_rank ffn_so3_grid grid_branch message_node_so3 "
    "ffn_neurons so3_readout seed sel env_exp basis_type radial_mlp use_env_seed random_gamma "
    "edge_cartesian node_cartesian l_schedule mmax kmax m_schedule extra_node_l so2_norm "
    "so2_attn_res focus_dim atten_f_mix atten_v_proj atten_o_proj grid_mlp ffn_blocks "
    "sandwich_norm mlp_bias layer_scale full_attn_res block_attn_res s2_activation node_wise_s2 "
    "node_wise_so3 message_node_s2 readout_layers lebedev_quadrature activation_function "
    "glu_activation use_amp add_chg_spin_ebd default_chg_spin exclude_types eps trainable"
).split()


# ---------------------------------------------------------------------------- buffers
def degree_index(lmax: int) -> torch.Tensor:
    """Return the degree l of every coefficient of the packed (l, m) layout."""
    return torch.tensor([l for l in range(lmax + 1) for _ in range(2 * l + 1)], dtype=torch.long)


def m_major_degree_index(lmax: int) -> torch.Tensor:
    """Return the degree l of every row of the m-major layout with |m| <= 1.

    The rows are m=0, then m=-1, then m=+1.
    """
    rows = list(range(lmax + 1)) + list(range(1, lmax + 1)) * 2
    return torch.tensor(rows, dtype=torch.long)


def _mixer_indices(lmax: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the radial degree mixer's compact -> dense (out, in) scatter indices (|m| <= 1)."""
    dim = (lmax + 1) + 2 * lmax
    compact, dense = [], []

    def block(start: int, n: int, offset: int) -> None:
        for l_in in range(n):
            for l_out in range(n):
                compact.append(offset + l_in * n + l_out)
                dense.append((start + l_out) * dim + start + l_in)

    block(0, lmax + 1, 0)
    block(lmax + 1, lmax, (lmax + 1) ** 2)
    block(2 * lmax + 1, lmax, (lmax + 1) ** 2)
    return torch.tensor(compact, dtype=torch.long), torch.tensor(dense, dtype=torch.long)


def _norm_weight(lmax: int, channels: int, dtype) -> torch.Tensor:
    """1 / ((2l+1) (lmax+1) C) per coefficient, rounded as deepmd-kit rounds it."""
    scale = 1.0 / ((lmax + 1) * channels)
    return torch.tensor([scale / (2 * l + 1) for l in degree_index(lmax).tolist()], dtype=dtype)


def _module_lmax(name: str, cfg: SeZMConfig) -> int:
    m = re.match(r"descriptor\.blocks\.(\d+)\.", name)
    if m:
        return cfg.l_schedule[int(m.group(1))]
    if name.startswith("descriptor.output_ffn."):
        return 0 if cfg.so3_readout == "none" else cfg.readout_lmax
    raise UnsupportedModelError("module", name, "no degree known for this module")


def derived_buffers(cfg: SeZMConfig, state: dict, dtype) -> dict[str, torch.Tensor]:
    """Return the buffers deepmd-kit derives from the config.

    They are named by the names of ``state`` (mdband's state dict) and the config: see the
    module docstring.
    """
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        module, _, leaf = key.rpartition(".")
        last = module.rpartition(".")[2]
        if leaf == "adam_scale" and value.dim() == 3:  # EquivariantRMSNorm (L+1, F, C)
            lmax = value.shape[0] - 1
            out[f"{module}.expand_index"] = degree_index(lmax)
            out[f"{module}.balance_weight"] = _norm_weight(lmax, value.shape[2], dtype)
        elif leaf == "weight" and value.dim() == 3 and last in _SO3_LINEARS:
            out[f"{module}.expand_index"] = degree_index(value.shape[0] - 1)
        elif leaf == "weight_m0":  # SO2Linear: m=0 rows, then m=-1, m=+1
            lmax = _module_lmax(module, cfg)
            out[f"{module}.m0_idx"] = torch.arange(lmax + 1)
            out[f"{module}.neg_indices"] = torch.arange(lmax + 1, 2 * lmax + 1)
            out[f"{module}.pos_indices"] = torch.arange(2 * lmax + 1, 3 * lmax + 1)
        elif leaf == "weight" and last == "gate_linear":  # GatedActivation with lmax > 0
            act = module.rpartition(".")[0]
            lmax = _module_lmax(act, cfg)
            rows = m_major_degree_index(lmax) if ".non_linearities." in act else degree_index(lmax)
            out[f"{act}.expand_index"] = rows[1:] - 1
        if ".radial_degree_mixer." in key:
            mixer = key[: key.index(".radial_degree_mixer.")] + ".radial_degree_mixer"
            compact, dense = _mixer_indices(_module_lmax(mixer, cfg))
            out[f"{mixer}.kernel_compact_index"] = compact
            out[f"{mixer}.kernel_dense_index"] = dense
    if cfg.so3_readout == "none":  # the read-out's lmax-0 gate has no weights
        out["descriptor.output_ffn.act.expand_index"] = torch.zeros(0, dtype=torch.long)
    sign = torch.tensor([-1.0, -1.0, 1.0], dtype=dtype)
    out["descriptor.wigner_calc.l1_perm"] = torch.tensor([1, 2, 0])
    out["descriptor.wigner_calc.l1_sign_outer"] = torch.outer(sign, sign)
    if cfg.use_gie:
        deg = degree_index(cfg.lmax)[1:]
        out["descriptor.gie.non_scalar_row_index"] = torch.arange(1, (cfg.lmax + 1) ** 2)
        out["descriptor.gie.zonal_m0_col_index_for_row"] = deg * (deg + 1)
        out["descriptor.gie.radial_slot_index_for_row"] = deg - 1
    out["descriptor.version_tensor"] = torch.tensor(float(cfg.version), dtype=torch.float64)
    out["descriptor.mean"] = torch.zeros(0, dtype=dtype)
    out["descriptor.stddev"] = torch.ones(0, dtype=dtype)
    out["out_std"] = torch.ones(1, cfg.ntypes, 1, dtype=torch.float64)
    out["dens_force_rmsd"] = torch.tensor(1.0, dtype=torch.float64)
    return out


_SO3_LINEARS = ("so3_linear_1", "so3_linear_2", "pre_focus_mix", "post_focus_mix")


def deepmd_checkpoint(potential, precision: str | None = None) -> dict:
    """Build the deepmd-kit training checkpoint of a SeZM ``potential``.

    The checkpoint is a dict for ``torch.save``.

    ``precision`` (``"float32"``/``"float64"``) defaults to the dtype of the model's weights.
    """
    if potential.kind != "sezm":
        raise UnsupportedModelError(
            "kind", potential.kind, "only SeZM models have a deepmd-kit checkpoint form"
        )
    cfg = SeZMConfig.from_dict(dict(potential.config))
    state = {k: v.detach().cpu().clone() for k, v in potential.model.state_dict().items()}
    if precision is None:
        floats = [v.dtype for v in state.values() if v.is_floating_point() and v.dim() > 1]
        precision = "float64" if floats and floats[0] == torch.float64 else "float32"
    if precision not in ("float32", "float64"):
        raise ValueError(f"precision must be float32 or float64, got {precision!r}")
    dtype = torch.float64 if precision == "float64" else torch.float32
    params = model_params(cfg, precision)
    for key, value in state.items():
        if value.is_floating_point() and key not in _FLOAT64_BUFFERS:
            state[key] = value.to(dtype)
    derived = derived_buffers(cfg, state, dtype)
    clash = sorted(set(derived) & set(state))
    if clash:
        raise UnsupportedModelError("state", clash[0], "a derived buffer is also a weight")
    model: dict[str, Any] = {
        "_extra_state": {"model_params": params, "train_infos": dict(TRAIN_INFOS)}
    }
    model["model.Default.min_nbor_dist"] = torch.tensor(-1.0, dtype=torch.float64)
    if cfg.bridging != "none":  # deepmd-kit's InnerPotential keeps the nuclear charges
        z = [float(atomic_numbers[s]) for s in cfg.type_map]
        model["model.Default.inter_potential.atomic_numbers"] = torch.tensor(z, dtype=torch.float64)
    for key, value in {**state, **derived}.items():
        model[PREFIX + key] = value
    return {"model": model}


# buffers deepmd-kit keeps in float64 whatever the precision
_FLOAT64_BUFFERS = ("out_bias", "fitting_net.bias_atom_e")


def save_deepmd_checkpoint(potential, path, precision: str | None = None, *, replace=True):
    """Write the deepmd-kit training checkpoint of ``potential`` to ``path`` atomically."""
    obj = deepmd_checkpoint(potential, precision)
    with atomic_path(path, replace=replace) as tmp:
        torch.save(obj, tmp)
