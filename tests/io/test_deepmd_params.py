"""Strict reading of deepmd-kit model parameters: every argcheck key has a status in KEYS.

``tests/fixtures/deepmd/argcheck_keys.json`` lists the keys of deepmd-kit 3.2.0's argcheck for a
DPA4 model (made by ``tests/fixtures/make_argcheck_keys.py`` in the reference venv).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from mdband.errors import UnsupportedModelError
from mdband.io.deepmd_params import KEYS, config_from_deepmd

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"
SPIN_FIX = FIX.parent / "deepmd_spin"  # the spin models' parity fixtures
ARGCHECK = json.loads((FIX / "argcheck_keys.json").read_text())["sections"]
_META = json.loads((FIX / "configs.json").read_text())
_HEADS = json.loads((FIX / "heads.json").read_text())  # make_heads_fixtures.py
#: multi-task parity fixtures -> the head whose model_params stand for them
HEAD_OF = {name: next(iter(m["heads"])) for name, m in _HEADS["multitask"].items()}
_SPIN = json.loads((SPIN_FIX / "configs.json").read_text())["configs"]
#: ZBL-bridged parity fixtures (make_zbl_fixtures.py): their npz meta holds the model_params
ZBL = {name: None for name in ("zbl", "zbl_scatter")}
CONFIGS = {**_META["configs"], **_META["newer_configs"], **HEAD_OF, "dens": _HEADS["dens"],
           **_SPIN, **ZBL, **_META["chgspin_configs"]}  # fmt: skip


def normalized(name: str = "s2ffn") -> dict:
    """The model_params deepmd-kit normalised for a parity fixture (as its checkpoint holds;
    a multi-task fixture's: those of one head)."""
    if name in HEAD_OF:
        meta = json.loads(str(np.load(FIX / f"{name}.{HEAD_OF[name]}.npz")["meta"]))
        return meta["model_params"]["model_dict"][HEAD_OF[name]]
    path = FIX / f"{name}.npz" if name not in _SPIN else SPIN_FIX / f"{name}.npz"
    return json.loads(str(np.load(path)["meta"]))["model_params"]


def with_key(section: str, key: str, value) -> dict:
    params = copy.deepcopy(normalized())
    target = params if section == "model" else params[section]
    target[key] = value
    return params


def other_value(default):
    """A value unlike ``default`` of the same kind."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, str):
        return "bogus"
    if isinstance(default, int):
        return default + 1
    if isinstance(default, list):
        return [[0, 1]]
    return {"x": 1}  # default None


ENTRIES = [(s, k, rule) for s, table in KEYS.items() for k, rule in table.items()]


@pytest.mark.parametrize("section", sorted(ARGCHECK))
def test_every_argcheck_key_has_a_status(section):
    keys = ARGCHECK[section]
    names = set(keys) | {a for entry in keys.values() for a in entry["aliases"]}
    # descriptor/model type aliases are values of "type", not keys
    names -= {"DPA4", "SeZM", "sezm"}
    missing = sorted(set(keys) - set(KEYS[section]))
    assert not missing, f"{section} keys of deepmd-kit's argcheck without a status: {missing}"
    stale = sorted(set(KEYS[section]) - names)
    assert not stale, f"{section} keys in KEYS that argcheck does not have: {stale}"
    for key in KEYS[section]:
        assert KEYS[section][key].status in ("implemented", "inert", "refused"), key


@pytest.mark.parametrize("section,key,rule", [e for e in ENTRIES if e[2].status == "implemented"])
def test_implemented_keys_are_covered_by_parity_fixtures(section, key, rule):
    assert rule.covered, f"{section}.{key} names no parity fixture"
    for name in rule.covered:
        assert name in CONFIGS, f"{section}.{key}: no parity fixture {name!r}"
        params = normalized(name)
        target = params if section == "model" else params[section]
        if key in target:  # deepmd-kit normalises aliases away (so2_layers, n_neuron)
            config_from_deepmd(params, 1.2)


@pytest.mark.parametrize("section,key,rule", [e for e in ENTRIES if e[2].status == "refused"])
def test_refused_keys_raise_naming_the_key(section, key, rule):
    config_from_deepmd(with_key(section, key, copy.deepcopy(rule.default)), 1.2)  # default: ok
    value = other_value(rule.default)
    with pytest.raises(UnsupportedModelError) as info:
        config_from_deepmd(with_key(section, key, value), 1.2)
    assert info.value.option.split(".")[-1] == key and info.value.value == value
    assert key in str(info.value)


@pytest.mark.parametrize("section,key,rule", [e for e in ENTRIES if e[2].status == "inert"])
def test_inert_keys_do_not_change_the_config(section, key, rule):
    assert rule.why
    base = config_from_deepmd(normalized(), 1.2)
    default = ARGCHECK[section].get(key, {}).get("default")
    value = other_value(default) if default is not None else 7
    assert config_from_deepmd(with_key(section, key, value), 1.2) == base


@pytest.mark.parametrize(
    "key,value",
    [
        ("edge_norm", 1),  # an int where a bool is expected
        ("use_env_seed", "true"),
        ("ffn_so3_grid", [True]),  # a list where a bool is expected
        ("sandwich_norm", True),  # a scalar where a list is expected
        ("s2_activation", [False, True, True]),
        ("radial_mlp", 0),
        ("env_exp", [7, 5, 3]),
        ("lebedev_quadrature", [True]),
        ("lebedev_quadrature", 1),
        ("grid_branch", [0, 1]),
        ("grid_mlp", [False, 0, False]),
        ("channels", 8.0),
        ("channels", True),
        ("rcut", "6"),
        ("l_schedule", 3),
        ("so3_readout", "attn"),
        ("not_an_option", 1),
    ],
)
def test_wrong_type_or_form_is_refused_never_coerced(key, value):
    with pytest.raises(UnsupportedModelError) as info:
        config_from_deepmd(with_key("descriptor", key, value), 1.2)
    assert info.value.option == key and info.value.value == value


@pytest.mark.parametrize(
    "section,key,value",
    [("fitting_net", "neuron", 24), ("fitting_net", "bogus", 0), ("model", "bogus", 0)],
)
def test_fitting_and_model_sections_are_strict(section, key, value):
    with pytest.raises(UnsupportedModelError, match=key):
        config_from_deepmd(with_key(section, key, value), 1.2)


@pytest.mark.parametrize(
    "key,value,field,expected",
    [
        ("env_exp", 5, "env_exp", (0, 5)),  # one envelope, on the messages
        ("env_exp", [0, 6], "env_exp", (0, 6)),
        ("edge_norm", [False, True, True], "edge_norm", (False, True, True)),
        ("basis_type", "gaussian/fix", "basis_family", "gaussian"),
        ("basis_type", "Bessel/Fix", "basis_family", "bessel"),
    ],
)
def test_newer_preset_options_read(key, value, field, expected):
    """The 2026-09 preset forms (deepmd-kit after 3.2.0): read, never coerced."""
    cfg = config_from_deepmd(with_key("descriptor", key, value), 1.2)
    assert getattr(cfg, field) == expected


@pytest.mark.parametrize(
    "value,sites",
    [
        (True, (True, True, True)),
        (False, (False, False, False)),
        ([False, True, False], (False, True, False)),
    ],
)
def test_edge_norm_sites(value, sites):
    cfg = config_from_deepmd(with_key("descriptor", "edge_norm", value), 1.2)
    assert (cfg.radial_norm, cfg.film_norm, cfg.focus_norm) == sites


@pytest.mark.parametrize(
    "key,value",
    [
        ("edge_norm", [False, True]),
        ("edge_norm", [0, 1, 1]),
        ("env_exp", 0),
        ("env_exp", [7, 0]),
        ("env_exp", 5.0),
        ("basis_type", "gaussian/fixed"),
    ],
)
def test_newer_preset_forms_are_checked(key, value):
    with pytest.raises(UnsupportedModelError) as info:
        config_from_deepmd(with_key("descriptor", key, value), 1.2)
    assert info.value.option == key and info.value.value == value


@pytest.mark.parametrize(
    "value,expected",
    [(True, (True, True)), (False, (False, False)), ([True, False], (True, False))],
)
def test_lebedev_quadrature_forms(value, expected):
    cfg = config_from_deepmd(with_key("descriptor", "lebedev_quadrature", value), 1.2)
    assert cfg.lebedev_quadrature == expected
    # the stored form (it enters the model hash that run checkpoints compare on resume) keeps
    # the one bool configs had before the pair was kept
    stored = cfg.to_dict()["lebedev_quadrature"]
    assert stored == (expected[0] if expected[0] == expected[1] else list(expected))
    assert type(cfg).from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    "mmax,m_schedule,lmax,ok",
    [(1, None, 2, True), (None, None, 2, False), (None, None, 1, True), (2, None, 2, False),
     (1, [1, 1], 2, True), (1, [1, 2], 2, False)],
)  # fmt: skip
def test_mmax_follows_deepmd_kit(mmax, m_schedule, lmax, ok):
    """mmax None means m = lmax per block in deepmd-kit: only m = 1 is implemented."""
    params = with_key("descriptor", "mmax", mmax)
    params["descriptor"].update(m_schedule=m_schedule, lmax=lmax, l_schedule=None)
    if ok:
        config_from_deepmd(params, 1.2)
    else:
        with pytest.raises(UnsupportedModelError, match="mmax"):
            config_from_deepmd(params, 1.2)


def test_aliases_read_like_their_key():
    params = with_key("descriptor", "so2_layers", 3)
    del params["descriptor"]["mixing_layers"]
    params["fitting_net"]["n_neuron"] = params["fitting_net"].pop("neuron")
    cfg = config_from_deepmd(params, 1.2)
    assert cfg.mixing_layers == 3
    assert cfg.fitting_neuron == tuple(normalized()["fitting_net"]["neuron"])
    params["descriptor"]["mixing_layers"] = 2
    with pytest.raises(UnsupportedModelError, match="so2_layers"):
        config_from_deepmd(params, 1.2)
