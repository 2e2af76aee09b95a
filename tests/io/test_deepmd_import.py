"""deepmd-kit checkpoint import: layout of keys, heads, LoRA, versions, model files, bad input."""

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

import mdband
from mdband.errors import ModelFileError, UnknownElementError, UnsupportedModelError

REPO = Path(__file__).resolve().parents[2]
WATER = REPO.parent / "shared" / "data" / "dpa4-water-smoke" / "pretrained.pt"
needs_shared = pytest.mark.skipif(not WATER.exists(), reason="../shared (water checkpoint) absent")

POS = np.array([[0.0, 0.0, 0.0], [0.96, 0.0, 0.0], [-0.24, 0.93, 0.0], [2.5, 0.3, 0.4]])
SYM = ["O", "H", "H", "O"]


def load_raw():
    return torch.load(WATER, map_location="cpu", weights_only=True)


def save(obj, tmp_path, name="ck.pt"):
    p = tmp_path / name
    torch.save(obj, p)
    return p


def energy(pot):
    return pot.evaluate(POS, None, False, SYM)


@needs_shared
def test_water_loads_with_config_from_checkpoint():
    pot = mdband.load_model(WATER, dtype="float64")
    assert pot.kind == "sezm" and pot.type_map == ["O", "H"] and pot.cutoff == 6.0
    assert pot.config["channels"] == 16 and pot.config["l_schedule"] == [1]
    assert pot.config["version"] in (1.1, 1.2)
    assert pot.metadata["source"] == "deepmd-kit" and len(pot.metadata["source_sha256"]) == 64


@needs_shared
def test_model_file_roundtrip_is_exact(tmp_path):
    pot = mdband.load_model(WATER, dtype="float64")
    out = tmp_path / "water.mdband"
    pot.save(out)
    again = mdband.load_model(out, dtype="float64")
    assert again.model_hash == pot.model_hash
    assert again.metadata["source_sha256"] == pot.metadata["source_sha256"]
    a, b = energy(pot), energy(again)
    assert a.energy == b.energy
    np.testing.assert_array_equal(a.forces, b.forces)
    raw = torch.load(out, weights_only=True)
    assert raw["format"] == "mdband-model" and raw["format_version"] == 1


@needs_shared
def test_multitask_head_selection(tmp_path):
    raw = load_raw()
    sd = raw["model"]
    params = sd["_extra_state"]["model_params"]
    multi = {"_extra_state": {"model_params": {"model_dict": {"water": params, "shifted": params}}}}
    for k, v in sd.items():
        if k.startswith("model.Default."):
            multi[k.replace("model.Default.", "model.water.")] = v
            v2 = v.clone()
            if k.endswith("atomic_model.out_bias"):
                v2 = v2 + 1.0
            multi[k.replace("model.Default.", "model.shifted.")] = v2
    path = save({"model": multi}, tmp_path)
    with pytest.raises(ModelFileError, match="multi-task"):
        mdband.load_model(path)
    with pytest.raises(ModelFileError, match="no head 'nope'"):
        mdband.load_model(path, head="nope")
    e1 = energy(mdband.load_model(path, head="water", dtype="float64")).energy
    e2 = energy(mdband.load_model(path, head="shifted", dtype="float64")).energy
    assert e2 - e1 == pytest.approx(len(SYM), abs=1e-9)


@needs_shared
def test_lora_adapters_are_folded(tmp_path):
    raw = load_raw()
    sd = dict(raw["model"])
    p = "model.Default.atomic_model.descriptor.blocks.0."
    g = torch.Generator().manual_seed(0)
    # SO(3) linear: W = W0 - B·A, adapters A (L, r, in), B (L, out, r)
    w = sd[p + "so2_conv.pre_focus_mix.weight"]
    L1, cin, cout = w.shape
    a = torch.randn(L1, 2, cin, generator=g)
    b = torch.randn(L1, cout, 2, generator=g)
    sd[p + "so2_conv.pre_focus_mix.weight"] = w - torch.einsum("lor,lri->lio", b, a)
    sd[p + "so2_conv.pre_focus_mix.A_by_l"] = a
    sd[p + "so2_conv.pre_focus_mix.B_by_l"] = b
    # SO(2) linear: weight_m0 and weight_m.0 with A (r, in), B (out, r), scaling 0.5
    q = p + "so2_conv.so2_linears.0."
    for wk, ak, bk in (("weight_m0", "A_m0", "B_m0"), ("weight_m.0", "A_m.0", "B_m.0")):
        w = sd[q + wk]
        a = torch.randn(3, w.shape[0], generator=g)
        b = torch.randn(w.shape[1], 3, generator=g)
        sd[q + wk] = w - 0.5 * torch.einsum("ri,or->io", a, b)
        sd[q + ak], sd[q + bk] = a, b
    sd[q + "lora_scaling"] = torch.tensor(0.5)
    path = save({"model": sd}, tmp_path)
    ref = energy(mdband.load_model(WATER, dtype="float64"))
    got = energy(mdband.load_model(path, dtype="float64"))
    assert got.energy == pytest.approx(ref.energy, rel=1e-6, abs=1e-6)
    np.testing.assert_allclose(got.forces, ref.forces, atol=1e-6)


@needs_shared
def test_missing_version_means_1_0(tmp_path):
    raw = load_raw()
    sd = {k: v for k, v in raw["model"].items() if not k.endswith("version_tensor")}
    pot = mdband.load_model(save({"model": sd}, tmp_path), dtype="float64")
    assert pot.config["version"] == 1.0
    assert energy(pot).energy != pytest.approx(
        energy(mdband.load_model(WATER, dtype="float64")).energy, abs=1e-9
    )


@needs_shared
@pytest.mark.parametrize(
    "key,value",
    [
        ("mmax", 2),
        ("edge_cartesian", True),
        ("so2_norm", True),
        ("atten_v_proj", True),
        ("readout_layers", 2),
        ("lebedev_quadrature", [False]),
        ("edge_norm", 1),
        ("use_spin", [True]),
    ],
)
def test_unsupported_option_is_named(tmp_path, key, value):
    raw = load_raw()
    sd = dict(raw["model"])
    extra = copy.deepcopy(sd["_extra_state"])
    extra["model_params"]["descriptor"][key] = value
    if key == "mmax":
        extra["model_params"]["descriptor"]["lmax"] = 2
    sd["_extra_state"] = extra
    with pytest.raises(UnsupportedModelError, match=key):
        mdband.load_model(save({"model": sd}, tmp_path))


@needs_shared
def test_unknown_element():
    pot = mdband.load_model(WATER)
    with pytest.raises(UnknownElementError, match="Fe"):
        pot.evaluate(POS, None, False, ["O", "H", "Fe", "O"])
    with pytest.raises(UnknownElementError, match="C"):
        pot.evaluate(POS, None, False, [8, 1, 6, 8])


def test_bad_files(tmp_path):
    with pytest.raises(ModelFileError, match="does not exist"):
        mdband.load_model(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00\x01garbage" * 100)
    with pytest.raises(ModelFileError, match="corrupt"):
        mdband.load_model(junk)
    notck = save({"weights": torch.zeros(3)}, tmp_path, "other.pt")
    with pytest.raises(ModelFileError, match="not a SeZM checkpoint"):
        mdband.load_model(notck)
    other_model = save(
        {"model": {"_extra_state": {"model_params": {"type": "dpa3", "type_map": ["H"]}}}},
        tmp_path,
        "dpa3.pt",
    )
    with pytest.raises(UnsupportedModelError, match="dpa3"):
        mdband.load_model(other_model)


@needs_shared
def test_truncated_file_is_corrupt(tmp_path):
    data = WATER.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match="corrupt"):
        mdband.load_model(cut)
