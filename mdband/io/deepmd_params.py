"""Strict reading of a deepmd-kit DPA4 ``model_params`` dict: every key has a status.

:data:`KEYS` lists every key of the three sections deepmd-kit 3.2.0's argcheck defines for a DPA4
model (``sezm_model_args`` plus the common ``model_args``, ``descrpt_se_zm_args`` and
``fitting_sezm_ener``; ``tests/fixtures/deepmd/argcheck_keys.json`` is that list, and
``tests/io/test_deepmd_params.py`` checks the table against it). Each key is one of:

* ``implemented``: parsed (type and form checked, never coerced) into :class:`SeZMConfig`;
  ``covered`` names the parity fixtures (``tests/fixtures/deepmd``) that exercise it;
* ``inert``: does not change what deepmd-kit evaluates (training-only, metadata, or inert while
  another key is off); type-checked, then ignored. ``why`` says which;
* ``refused``: only its default is accepted, any other value raises
  :class:`~mdband.errors.UnsupportedModelError` naming the key and the value.

A key that is not in the table is refused too. The ``spin`` section is read key by key by
:func:`spin_from_deepmd`, ZBL bridging by :func:`bridging_from_deepmd`, the charge/spin
conditioning (``add_chg_spin_ebd`` / ``default_chg_spin``) in :func:`config_from_deepmd`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from mdband.config import SeZMConfig, SpinConfig
from mdband.errors import UnsupportedModelError

#: deepmd-kit release whose argcheck the table follows
REFERENCE = "deepmd-kit 3.2.0"
#: radial bases; the "/fix" forms (deepmd-kit after 3.2.0) evaluate like their family
_BASES = ("bessel", "gaussian", "bessel/fix", "gaussian/fix")


@dataclass(frozen=True)
class Key:
    """Status of one key: ``implemented`` / ``inert`` / ``refused``.

    ``default`` is the one value a refused key accepts; ``covered`` the parity fixtures of an
    implemented key.
    """

    status: str
    default: object = None
    why: str = ""
    covered: tuple[str, ...] = ()


ALL = ("s2ffn", "gated_pyramid", "grid_mini", "grid_neo")


def _impl(*covered: str) -> Key:
    return Key("implemented", covered=tuple(covered) or ALL)


def _inert(why: str) -> Key:
    return Key("inert", why=why)


def _refused(default, why: str = "") -> Key:
    return Key("refused", default, why)


_TRAIN = "training only: does not change evaluation"
_OTHER = "not implemented by mdband yet"

DESCRIPTOR = {
    "type": _impl(),
    "sel": _inert(
        "SeZM's energy path keeps every neighbour within rcut; only the dens mode (decided by "
        "the weights) keeps the sum(sel) nearest, and reads it then; a deepspin spin model's "
        "neighbour list keeps the sel nearest real neighbours (read into its spin section)"
    ),
    "rcut": _impl(),
    "env_exp": _impl("s2ffn", "preset_0911", "edge_norm_mixed"),
    "channels": _impl(),
    "basis_type": _impl("s2ffn", "pro_like", "preset_0911", "edge_norm_mixed"),
    "n_radial": _impl(),
    "radial_mlp": _impl(),
    "edge_norm": _impl("s2ffn", "gated_pyramid", "preset_0901", "edge_norm_mixed"),
    "use_env_seed": _impl(),
    "random_gamma": _inert("deepmd-kit rolls the edge frames only in training mode"),
    "edge_cartesian": _refused(False),
    "node_cartesian": _refused("none"),
    "lmax": _impl(),
    "l_schedule": _impl("gated_pyramid"),
    "mmax": _impl(),
    "kmax": _impl(),
    "m_schedule": _impl(),
    "extra_node_l": _refused(0),
    "n_blocks": _impl(),
    "so2_norm": _refused(False),
    "mixing_layers": _impl(),
    "so2_layers": _impl(),  # argcheck alias of mixing_layers
    "so2_attn_res": _refused("none"),
    "radial_so2_mode": _impl(),
    "radial_so2_rank": _impl("gated_pyramid", "grid_neo"),
    "n_focus": _impl("gated_pyramid", "grid_neo"),
    "focus_dim": _impl(),
    "n_atten_head": _impl("gated_pyramid", "grid_mini"),
    "atten_f_mix": _refused(False),
    "atten_v_proj": _refused(False),
    "atten_o_proj": _refused(False),
    "ffn_neurons": _impl(),
    "grid_mlp": _impl("grid_mini"),
    "grid_branch": _impl("grid_mini", "grid_neo"),
    "ffn_blocks": _impl(),
    "sandwich_norm": _impl("s2ffn", "preset_0901", "preset_0911"),
    "mlp_bias": _refused(False),
    "layer_scale": _refused(False),
    "full_attn_res": _refused("none"),
    "block_attn_res": _refused("none"),
    "s2_activation": _impl("s2ffn", "gated_pyramid"),
    "ffn_so3_grid": _impl("grid_mini", "grid_neo"),
    "node_wise_s2": _refused(False),
    "node_wise_so3": _refused(False),
    "message_node_s2": _refused(False),
    "message_node_so3": _impl("grid_mini", "grid_neo"),
    "so3_readout": _impl("gated_pyramid", "grid_mini"),
    "readout_layers": _refused(1),
    "lebedev_quadrature": _impl("s2ffn", "s2ffn_e3nn", "pro_like"),
    "activation_function": _refused("silu"),
    "glu_activation": _impl(),
    "use_amp": _inert("mixed precision of deepmd-kit's training (evaluation follows DP_AMP_INFER)"),
    "add_chg_spin_ebd": _impl("chgspin", "chgspin_default"),
    "default_chg_spin": _impl("chgspin_default"),  # read only while add_chg_spin_ebd is on
    "exclude_types": _refused([]),
    "precision": _inert("mdband evaluates at the dtype it is asked for (float32 or float64)"),
    "eps": _impl(),
    "trainable": _inert(_TRAIN),
    "seed": _inert(_TRAIN),
}

FITTING = {
    "type": _impl(),
    "numb_fparam": _refused(0),
    "numb_aparam": _refused(0),
    "default_fparam": _refused(None),
    "dim_case_embd": _impl("multitask_film", "multitask_concat"),
    "neuron": _impl("s2ffn", "gated_pyramid", "grid_neo"),
    "n_neuron": _impl("gated_pyramid"),  # argcheck alias of neuron
    "activation_function": _refused("silu"),
    "precision": _inert("mdband evaluates at the dtype it is asked for (float32 or float64)"),
    "resnet_dt": _inert("stored by deepmd-kit's dpa4_ener fitting but never used by its layers"),
    "trainable": _inert(_TRAIN),
    "rcond": _inert("energy-bias statistics of training; the checkpoint holds the biases"),
    "seed": _inert(_TRAIN),
    "atom_ener": _refused([]),
    "layer_name": _inert("deepmd-kit's dpa4_ener fitting does not read it (parameter sharing)"),
    "use_aparam_as_mask": _refused(False),
    "case_film_embd": _impl("multitask_film"),
}

MODEL = {
    "type": _impl(),
    "type_map": _impl(),
    "descriptor": _impl(),
    "fitting_net": _impl(),
    "data_stat_nbatch": _inert(_TRAIN),
    "data_stat_protect": _inert(_TRAIN),
    "data_bias_nsample": _inert(_TRAIN),
    "use_srtab": _refused(None),
    "smin_alpha": _refused(None),
    "sw_rmin": _refused(None),
    "sw_rmax": _refused(None),
    "pair_exclude_types": _refused([]),
    "atom_exclude_types": _refused([]),
    "preset_out_bias": _inert("sets the energy bias at training start; the checkpoint holds it"),
    "srtab_add_bias": _inert("TensorFlow tabulated potentials only (use_srtab is refused)"),
    "type_embedding": _refused(None),
    "modifier": _refused(None),
    "compress": _refused(None),
    "spin": _impl("spin_native", "spin_deepspin"),
    "finetune_head": _inert(_TRAIN),
    "use_compile": _inert("torch.compile of deepmd-kit's training"),
    "enable_tf32": _inert("TF32 matmuls of deepmd-kit's CUDA training"),
    "model_branch_alias": _inert("names of a multi-task branch; the branch is chosen by head="),
    "info": _inert("free-form metadata"),
    "bridging_method": _impl("zbl", "zbl_scatter"),
    "bridging_r_inner": _impl("zbl"),  # zbl_scatter: the defaults
    "bridging_r_outer": _impl("zbl"),
    "lora": _inert("LoRA training config; adapters in the weights are folded when loaded"),
}

#: section name → key table
KEYS = {"descriptor": DESCRIPTOR, "fitting_net": FITTING, "model": MODEL}
#: where each section's keys are named in error messages
_PREFIX = {"descriptor": "", "fitting_net": "fitting_net.", "model": "model."}


# ----------------------------------------------------------------------------- typed reads
def _bad(name: str, value, why: str) -> NoReturn:
    raise UnsupportedModelError(name, value, why)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def read_bool(name: str, v) -> bool:
    """Return ``v`` when it is a bool; raise :class:`UnsupportedModelError` for key ``name``."""
    if not isinstance(v, bool):
        _bad(name, v, "expected true or false")
    return v


def read_int(name: str, v, lo: int = 0) -> int:
    """Return ``v`` when it is an integer (not a bool) >= ``lo``; raise otherwise."""
    if not _is_int(v) or v < lo:
        _bad(name, v, f"expected an integer >= {lo}")
    return v


def read_float(name: str, v) -> float:
    """Return number ``v`` (an int or a float, not a bool) as a float; raise otherwise."""
    if not (_is_int(v) or isinstance(v, float)):
        _bad(name, v, "expected a number")
    return float(v)


def read_str(name: str, v, choices: tuple[str, ...]) -> str:
    """Return string ``v`` lower-cased when it is one of ``choices`` (case-insensitive)."""
    if not isinstance(v, str) or v.lower() not in choices:
        _bad(name, v, f"expected one of {list(choices)}")
    return v.lower()


def read_list(name: str, v, item, n: int | None = None) -> tuple:
    """Read a list (never a scalar) of ``n`` items (any length when None), each by ``item``."""
    if not isinstance(v, (list, tuple)) or (n is not None and len(v) != n):
        _bad(name, v, f"expected a list of {n if n is not None else 'one or more'} items")
    if n is None and not v:
        _bad(name, v, "expected a non-empty list")
    try:
        return tuple(item(name, x) for x in v)
    except UnsupportedModelError as exc:  # name the whole list, not the item
        why = str(exc).split(": ", 1)[-1]
        raise UnsupportedModelError(name, v, f"item {exc.value!r}: {why}") from None


def read_scalar_or_list(name: str, v, item, n: int) -> tuple:
    """Read a scalar (broadcast to ``n``) or a list of exactly ``n`` items."""
    if isinstance(v, (list, tuple)):
        return read_list(name, v, item, n)
    return (item(name, v),) * n


def _section(section: str, params: dict) -> None:
    """Unknown keys and refused keys with a value other than their default raise."""
    table, prefix = KEYS[section], _PREFIX[section]
    for key, value in params.items():
        if key.startswith("_"):  # deepmd-kit's "_comment" style keys are stripped by argcheck
            continue
        rule = table.get(key)
        if rule is None:
            _bad(prefix + key, value, f"not an option of a DPA4 {section} in {REFERENCE}")
        if rule.status == "refused" and not _same(value, rule.default):
            _bad(prefix + key, value, rule.why)


def _same(value, default) -> bool:
    if default is None:
        return value is None
    if isinstance(default, bool) or isinstance(value, bool):
        return type(value) is type(default) and value == default
    if isinstance(default, str):
        return isinstance(value, str) and value.lower() == default.lower()
    if isinstance(default, list):
        return isinstance(value, list) and value == default
    return type(value) is type(default) and value == default


# ----------------------------------------------------------------------------- the mapping
def _env_exp(v) -> tuple[int, int]:
    """Read ``env_exp`` as the [rbf, edge] exponents.

    One integer p (deepmd-kit after 3.2.0: the 2026-09 presets) is one envelope, on the
    messages: (0, p), 0 meaning no envelope on the radial basis.
    """
    if _is_int(v):
        return 0, read_int("env_exp", v, 1)
    rbf, edge = read_list("env_exp", v, read_int, 2)
    if edge < 1:
        _bad("env_exp", v, "the edge exponent must be >= 1")
    return rbf, edge


def _edge_norm(v) -> bool | tuple[bool, bool, bool]:
    """One bool, or [radial, film, focus] (deepmd-kit after 3.2.0: the 2026-09 presets)."""
    if isinstance(v, (list, tuple)):
        return read_list("edge_norm", v, read_bool, 3)
    return read_bool("edge_norm", v)


def _lebedev(v) -> tuple[bool, bool]:
    """Read ``lebedev_quadrature`` as [so2, ffn].

    The so2 entry only matters for the SO(2) S2 grids (node_wise_s2, message_node_s2,
    s2_activation[0]), which are refused by their own keys.
    """
    return read_scalar_or_list("lebedev_quadrature", v, read_bool, 2)


def _alias(params: dict, key: str, alias: str, default):
    if key in params and alias in params and params[key] != params[alias]:
        _bad(alias, params[alias], f"differs from {key}={params[key]!r}")
    return params[key] if key in params else params.get(alias, default)


def _opt(read, name: str, v, *args):
    return None if v is None else read(name, v, *args)


def _sel(v) -> int:
    """Neighbours per atom deepmd-kit's dens path keeps: ``sum(sel)``."""
    return sum(read_scalar_or_list("sel", v, read_int, len(v) if isinstance(v, list) else 1))


def config_from_deepmd(model_params: dict, version: float, active_mode: str = "ener") -> SeZMConfig:
    """Map a deepmd-kit DPA4 ``model_params`` dict to :class:`SeZMConfig`, strictly.

    Every key must be in :data:`KEYS`; refused keys must hold their default; implemented keys
    must have the type and form deepmd-kit's argcheck gives them (a list is never read as a bool,
    a scalar never as a list). Missing keys take argcheck's defaults. ``active_mode`` is what the
    checkpoint's weights say (deepmd-kit decides it from them, not from these parameters):
    ``"dens"`` when they hold the denoising heads, whose neighbour list reads ``sel``.
    """
    if not isinstance(model_params, dict):
        _bad("model", type(model_params).__name__, "expected a dict of model parameters")
    read_str("model.type", model_params.get("type", ""), ("dpa4", "sezm"))
    desc = model_params.get("descriptor")
    fit = model_params.get("fitting_net")
    if not isinstance(desc, dict) or not isinstance(fit, dict):
        _bad("model.descriptor/fitting_net", (type(desc), type(fit)), "expected two dicts")
    _section("model", model_params)
    _section("descriptor", desc)
    _section("fitting_net", fit)
    read_str("descriptor.type", desc.get("type", "dpa4"), ("dpa4", "sezm"))
    read_str("fitting_net.type", fit.get("type", "dpa4_ener"), ("dpa4_ener", "sezm_ener"))
    type_map = model_params.get("type_map")
    if not isinstance(type_map, list) or not all(isinstance(t, str) for t in type_map):
        _bad("model.type_map", type_map, "expected a list of element names")

    d = desc.get
    lmax = read_int("lmax", d("lmax", 3), 0)
    n_blocks = read_int("n_blocks", d("n_blocks", 3), 0)
    l_sched = _opt(read_list, "l_schedule", d("l_schedule"), read_int)
    l_sched = (lmax,) * n_blocks if l_sched is None else l_sched
    # mmax None: every block's m follows its lmax (deepmd-kit), so only lmax 1 runs
    mmax = _opt(read_int, "mmax", d("mmax", 1))
    m_sched = _opt(read_list, "m_schedule", d("m_schedule"), read_int)
    if m_sched is not None:
        m_eff = m_sched
    else:
        m_eff = tuple(l if mmax is None else min(mmax, l) for l in l_sched)
    if any(m != 1 for m in m_eff):
        _bad("mmax/m_schedule", list(m_sched) if m_sched else mmax, "only mmax=1 is implemented")
    fit_neuron = _alias(fit, "neuron", "n_neuron", [0])
    n_case = read_int("fitting_net.dim_case_embd", fit.get("dim_case_embd", 0))
    film = read_bool("fitting_net.case_film_embd", fit.get("case_film_embd", False))
    chg_spin = read_bool("add_chg_spin_ebd", d("add_chg_spin_ebd", False))
    # deepmd-kit reads default_chg_spin only while the embedding is on
    default_cs = d("default_chg_spin") if chg_spin else None
    cfg = SeZMConfig(
        type_map=tuple(type_map),
        rcut=read_float("rcut", d("rcut", 6.0)),
        channels=read_int("channels", d("channels", 64), 1),
        n_radial=read_int("n_radial", d("n_radial", 16), 1),
        basis_type=read_str("basis_type", d("basis_type", "bessel"), _BASES),
        radial_mlp=read_list("radial_mlp", d("radial_mlp", [0]), read_int),
        env_exp=_env_exp(d("env_exp", [7, 5])),
        edge_norm=_edge_norm(d("edge_norm", True)),
        use_env_seed=read_bool("use_env_seed", d("use_env_seed", True)),
        l_schedule=l_sched,
        kmax=read_int("kmax", d("kmax", 1)),
        mixing_layers=read_int("mixing_layers", _alias(desc, "mixing_layers", "so2_layers", 4)),
        radial_so2_mode=read_str(
            "radial_so2_mode",
            d("radial_so2_mode", "degree_channel"),
            ("none", "degree", "degree_channel"),
        ),
        radial_so2_rank=read_int("radial_so2_rank", d("radial_so2_rank", 1)),
        n_focus=read_int("n_focus", d("n_focus", 1), 1),
        focus_dim=read_int("focus_dim", d("focus_dim", 0)),
        n_atten_head=read_int("n_atten_head", d("n_atten_head", 1)),
        ffn_neurons=read_int("ffn_neurons", d("ffn_neurons", 0)),
        ffn_blocks=read_int("ffn_blocks", d("ffn_blocks", 1)),
        sandwich_norm=read_list(
            "sandwich_norm", d("sandwich_norm", [False, True, True, False]), read_bool, 4
        ),
        s2_activation=read_list("s2_activation", d("s2_activation", [False, True]), read_bool, 2),
        ffn_so3_grid=read_bool("ffn_so3_grid", d("ffn_so3_grid", False)),
        grid_mlp=read_scalar_or_list("grid_mlp", d("grid_mlp", False), read_bool, 3),
        grid_branch=read_scalar_or_list("grid_branch", d("grid_branch", 0), read_int, 3),
        message_node_so3=read_bool("message_node_so3", d("message_node_so3", False)),
        so3_readout=read_str("so3_readout", d("so3_readout", "none"), ("none", "glu", "mlp")),
        glu_activation=read_bool("glu_activation", d("glu_activation", True)),
        lebedev_quadrature=_lebedev(d("lebedev_quadrature", True)),
        eps=read_float("eps", d("eps", 1e-7)),
        version=float(version),
        fitting_neuron=read_list("fitting_net.neuron", fit_neuron, read_int),
        dim_case_embd=n_case,
        # deepmd-kit: FiLM only with a case embedding (case_film_embd and dim_case_embd > 0)
        case_film_embd=film and n_case > 0,
        active_mode=active_mode,
        sel=_sel(d("sel", 256)) if active_mode == "dens" else 0,
        add_chg_spin_ebd=chg_spin,
        default_chg_spin=_opt(read_list, "default_chg_spin", default_cs, read_float, 2),
        spin=spin_from_deepmd(model_params),
        **bridging_from_deepmd(model_params),
    )
    cfg.validate()
    return cfg


def bridging_from_deepmd(model_params: dict) -> dict:
    """Return the bridging fields of :class:`SeZMConfig` from deepmd-kit model parameters.

    deepmd-kit reads ``bridging_method`` case-insensitively ("none" disables it; its pt backend
    builds only "zbl") and the window ``bridging_r_inner`` / ``bridging_r_outer`` (defaults
    0.5 and 0.8 Å).
    """
    method = read_str("model.bridging_method", model_params.get("bridging_method", "None"),
                      ("none", "zbl"))  # fmt: skip
    r_in = read_float("model.bridging_r_inner", model_params.get("bridging_r_inner", 0.5))
    r_out = read_float("model.bridging_r_outer", model_params.get("bridging_r_outer", 0.8))
    if method == "none":  # the window is inert then
        return {}
    return {"bridging": method, "bridging_r_inner": r_in, "bridging_r_outer": r_out}


#: keys of the spin section: read, or (inert) not read by deepmd-kit's PyTorch models
_SPIN_KEYS = ("scheme", "use_spin", "virtual_scale", "allow_missing_label")
_SPIN_INERT = ("spin_norm", "virtual_len")  # TensorFlow only


def spin_from_deepmd(model_params: dict) -> SpinConfig | None:
    """Return the :class:`~mdband.config.SpinConfig` of ``model_params["spin"]``.

    None when there is no spin section. The section is read as deepmd-kit's
    ``get_sezm_spin_model`` reads it: ``scheme`` native or deepspin (the default),
    ``use_spin`` as one bool per type, type indices or element names, deepspin's
    ``virtual_scale`` as one number, one per type or one per magnetic type.
    ``allow_missing_label`` (training data) and the TensorFlow-only ``spin_norm`` /
    ``virtual_len`` are not read; any other key is refused.
    """
    spin = model_params.get("spin")
    if spin is None:
        return None
    if not isinstance(spin, dict):
        _bad("model.spin", spin, "expected a section")
    for key, value in spin.items():
        if key not in _SPIN_KEYS + _SPIN_INERT and not key.startswith("_"):
            _bad(f"spin.{key}", value, f"not an option of a DPA4 spin section in {REFERENCE}")
    read_bool("spin.allow_missing_label", spin.get("allow_missing_label", False))
    bridging = model_params.get("bridging_method", "none")
    if not (isinstance(bridging, str) and bridging.lower() == "none"):
        _bad("model.bridging_method", bridging, "not with a spin model")
    type_map = list(model_params["type_map"])
    scheme = read_str("spin.scheme", spin.get("scheme", "deepspin"), ("native", "deepspin"))
    use = spin.get("use_spin")
    if not isinstance(use, list) or not use:
        _bad("spin.use_spin", use, "expected a non-empty list")
    if all(isinstance(x, bool) for x in use):
        if len(use) != len(type_map):
            _bad("spin.use_spin", use, "one flag per type of the type map")
        flags = tuple(use)
    elif all(isinstance(x, str) for x in use):
        unknown = [x for x in use if x not in type_map]
        if unknown:
            _bad("spin.use_spin", use, f"{unknown} not in the type map")
        flags = tuple(t in use for t in type_map)
    elif all(_is_int(x) and 0 <= x < len(type_map) for x in use):
        flags = tuple(i in use for i in range(len(type_map)))
    else:
        _bad("spin.use_spin", use, "bools, type indices or element names")
    if scheme == "native":
        return SpinConfig("native", flags)
    vs = spin.get("virtual_scale")
    n_mag = sum(flags)
    if isinstance(vs, list) and len(vs) == n_mag and n_mag != len(flags):
        it = iter(read_list("spin.virtual_scale", vs, read_float, n_mag))
        scale = tuple(next(it) if on else 0.0 for on in flags)
    elif isinstance(vs, list):
        scale = read_list("spin.virtual_scale", vs, read_float, len(flags))
    elif isinstance(vs, float):  # deepmd-kit takes a float, not an int, for all types
        scale = (vs,) * len(flags)
    else:
        _bad("spin.virtual_scale", vs, "expected a number or a list per (magnetic) type")
    sel = model_params["descriptor"].get("sel", 120)
    sel = read_int("sel", sel) if _is_int(sel) else sum(read_list("sel", sel, read_int))
    return SpinConfig("deepspin", flags, tuple(s if on else 0.0 for s, on in zip(scale, flags)),
                      sel)  # fmt: skip
