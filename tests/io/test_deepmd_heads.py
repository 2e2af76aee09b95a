"""Heads of multi-task deepmd-kit checkpoints (names, model_branch_alias, the default head) and
the mode of dens-trained ones, as deepmd-kit's DeepPot chooses them."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import mdband
from mdband.errors import ModelFileError
from mdband.io.deepmd import describe_heads, head_table, resolve_head

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"
META = json.loads((FIX / "heads.json").read_text())
FILM = META["multitask"]["multitask_film"]
CONCAT = META["multitask"]["multitask_concat"]
TABLE = {"water_1": ["Default", "Water"], "water_2": ["Water2"], "ice": []}


@pytest.mark.parametrize(
    "asked,head",
    [
        (None, "water_1"),  # DeepPot's default: the head aliased Default
        ("water_2", "water_2"),
        ("Water", "water_1"),
        ("Water2", "water_2"),
        ("default", "water_1"),  # no exact match: case-insensitive
        ("WATER_2", "water_2"),
        ("ice", "ice"),
    ],
)
def test_resolve_head(asked, head):
    assert resolve_head(TABLE, asked, "m.pt") == head


def test_resolve_head_refusals_list_heads_and_aliases():
    listing = "water_1 (aliases Default, Water), water_2 (alias Water2), ice"
    assert describe_heads(TABLE) == listing
    with pytest.raises(ModelFileError) as exc:
        resolve_head(TABLE, "nope", "m.pt")
    assert str(exc.value) == f"m.pt: no head 'nope'; heads: {listing}"
    no_default = {"a": ["A"], "b": []}
    with pytest.raises(ModelFileError, match=r"without a Default head.*: a \(alias A\), b$"):
        resolve_head(no_default, None, "m.pt")


def test_head_table_refuses_an_alias_of_two_heads():
    assert head_table({"a": {"model_branch_alias": ["x"]}, "b": {}}, "m.pt") == {
        "a": ["x"],
        "b": [],
    }
    with pytest.raises(ModelFileError, match="alias 'x' names two heads"):
        head_table({"a": {"model_branch_alias": ["x"]}, "b": {"model_branch_alias": ["x"]}}, "")
    with pytest.raises(ModelFileError, match="alias 'a' names two heads"):
        head_table({"a": {}, "b": {"model_branch_alias": ["a"]}}, "")
    with pytest.raises(ModelFileError, match="model_branch_alias"):
        head_table({"a": {"model_branch_alias": "x"}}, "")


def energies(pot, name, head, frames=(1,)):
    """(mdband, deepmd-kit) energies of ``frames`` (the triclinic one by default)."""
    ref = np.load(FIX / f"{name}.{head}.npz")
    e = []
    for i in frames:
        sym = [pot.type_map[t] for t in ref[f"atype_{i}"]]
        r = pot.evaluate(ref[f"coord_{i}"], ref[f"cell_{i}"], ref[f"pbc_{i}"], sym)
        e.append((r.energy, float(ref[f"energy_{i}"])))
    return e


@pytest.mark.parametrize("asked", [None, "Default", "Water", "water", "water_1", "Water2"])
def test_film_checkpoint_heads(asked):
    pot = mdband.load_model(FIX / "multitask_film.pt", dtype="float64", head=asked)
    head = "water_2" if asked == "Water2" else FILM["default_head"]
    assert pot.metadata["head"] == head and pot.metadata["head_requested"] == asked
    assert pot.metadata["heads"] == FILM["heads"]
    for got, want in energies(pot, "multitask_film", head):
        assert got == pytest.approx(want, rel=1e-10)


def test_concat_checkpoint_needs_a_head():
    """deepmd-kit stops without a head (no Default alias); mdband says so in one line that
    names every head and alias."""
    assert CONCAT["default_head"] is None and "Head must be set" in CONCAT["no_head_message"]
    with pytest.raises(ModelFileError) as exc:
        mdband.load_model(FIX / "multitask_concat.pt")
    msg = str(exc.value)
    assert "\n" not in msg and "multi-task" in msg
    assert msg.endswith("mptrj (alias MP), omol (aliases Molecules, spice), alex")
    pot = mdband.load_model(FIX / "multitask_concat.pt", dtype="float64", head="spice")
    assert pot.metadata["head"] == "omol"
    assert pot.config["dim_case_embd"] == 3 and not pot.config.get("case_film_embd", False)
    for got, want in energies(pot, "multitask_concat", "omol"):
        assert got == pytest.approx(want, rel=1e-10)


def test_converted_head_keeps_its_numbers(tmp_path):
    pot = mdband.load_model(FIX / "multitask_film.pt", dtype="float64", head="Water2")
    pot.save(tmp_path / "w2.mdband")
    again = mdband.load_model(tmp_path / "w2.mdband", dtype="float64")
    assert again.metadata["head"] == "water_2" and again.model_hash == pot.model_hash
    for got, want in energies(again, "multitask_film", "water_2"):
        assert got == pytest.approx(want, rel=1e-10)


def test_dens_mode_from_the_weights():
    """The dens heads in the weights decide the mode (deepmd-kit's rule); without them the same
    checkpoint is a plain energy model with the plain head's numbers."""
    pot = mdband.load_model(FIX / "dens.pt", dtype="float64")
    assert pot.direct_forces and pot.config["active_mode"] == "dens"
    names = {k for k, _ in pot.model.named_parameters()}
    assert "dens_fitting_net.direct_force_head.proj.weight" in names
    assert not any(k.startswith(("fitting_net.", "dens_fitting_net.denoising")) for k in names)


def test_plain_checkpoint_without_dens_keys(tmp_path):
    raw = torch.load(FIX / "dens.pt", weights_only=True)
    sd = {k: v for k, v in raw["model"].items() if ".dens_fitting_net." not in k}
    torch.save({"model": sd}, tmp_path / "plain.pt")
    pot = mdband.load_model(tmp_path / "plain.pt", dtype="float64")
    assert not pot.direct_forces and "active_mode" not in pot.config
    ref = np.load(FIX / "dens.npz")
    plain_e = json.loads(str(ref["meta"]))["diagnostics"]["plain_head_energy"]
    for i, want in enumerate(plain_e[:2]):
        sym = [pot.type_map[t] for t in ref[f"atype_{i}"]]
        r = pot.evaluate(ref[f"coord_{i}"], ref[f"cell_{i}"], ref[f"pbc_{i}"], sym)
        assert r.energy == pytest.approx(want, rel=1e-10)
        assert np.isfinite(r.virial).all()


def test_energy_model_config_keeps_its_keys():
    """Configs without the new options keep their dict, so model hashes recorded by runs and
    model files before them still match."""
    pot = mdband.load_model(FIX / "s2ffn.pt", dtype="float64")
    assert not {"dim_case_embd", "case_film_embd", "active_mode", "sel"} & set(pot.config)


def test_case_insensitive_match_takes_deepmds_first():
    """deepmd-kit scans each head then its aliases, in order: 'WATER' finds head 'water' of
    the first entry before the alias 'Water' of the second."""
    table = {"water": [], "ice": ["Water"]}
    assert resolve_head(table, "WATER", "") == "water"
    assert resolve_head(table, "Water", "") == "ice"  # an exact match comes first
    assert resolve_head({"ice": ["WaTeR"], "water": []}, "WATER", "") == "ice"
