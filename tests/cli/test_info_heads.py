"""``mdband info`` / ``convert`` / ``run`` / ``relax`` with multi-task heads and dens models."""

import json
from pathlib import Path

import ase.io
import pytest
from click.testing import CliRunner

from mdband.cli import main

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"
FILM, CONCAT, DENS = FIX / "multitask_film.pt", FIX / "multitask_concat.pt", FIX / "dens.pt"


def invoke(*args):
    return CliRunner().invoke(main, [*map(str, args)])


def one_error_line(res):
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mdband: error: ")
    return lines[0]


@pytest.mark.parametrize(
    "head,line",
    [
        (None, "head             water_1 (none given: the head aliased Default)"),
        ("water2", "head             water_2 (asked for 'water2')"),
        ("Water", "head             water_1 (asked for 'Water')"),
    ],
)
def test_info_lists_heads_and_aliases(head, line):
    res = invoke("info", FILM, "--device", "cpu", *(["--head", head] if head else []))
    assert res.exit_code == 0, res.output
    out = res.stdout.splitlines()
    assert "heads            water_1 (aliases Default, Water), water_2 (alias Water2)" in out
    assert line in out
    assert "mode             ener: forces and virial from the energy's gradient" in out


def test_info_json_names_head_and_mode():
    res = invoke("info", FILM, "--device", "cpu", "--head", "Water2", "--json")
    info = json.loads(res.stdout)
    assert info["head"] == "water_2" and info["mode"] == "ener"
    assert info["heads"] == {"water_1": ["Default", "Water"], "water_2": ["Water2"]}


def test_info_without_a_default_head_is_one_line():
    msg = one_error_line(invoke("info", CONCAT, "--device", "cpu"))
    assert "without a Default head" in msg
    assert msg.endswith("mptrj (alias MP), omol (aliases Molecules, spice), alex")
    msg = one_error_line(invoke("info", CONCAT, "--device", "cpu", "--head", "nope"))
    assert "no head 'nope'" in msg


def test_info_says_dens_mode():
    res = invoke("info", DENS, "--device", "cpu")
    assert res.exit_code == 0, res.output
    assert (
        "mode             dens (deepmd-kit's denoising heads): energy from the dens energy head, "
        "direct forces, no virial, the 11 nearest neighbours of each atom (sel)"
    ) in res.stdout.splitlines()
    assert "heads " not in res.stdout
    assert json.loads(invoke("info", DENS, "--device", "cpu", "--json").stdout)["mode"] == "dens"


def test_convert_a_head_by_alias(tmp_path):
    out = tmp_path / "w2.mdband"
    res = invoke("convert", FILM, out, "--head", "Water2")
    assert res.exit_code == 0, res.output
    info = json.loads(invoke("info", out, "--device", "cpu", "--json").stdout)
    assert info["head"] == "water_2" and info["metadata"]["head_requested"] == "Water2"
    res = invoke("info", out, "--device", "cpu")
    assert "head             water_2 (asked for 'Water2')" in res.stdout.splitlines()


@pytest.fixture
def frame(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    atoms = ase.io.read(FIX / "structures.extxyz", index=0)
    ase.io.write(tmp_path / "s.extxyz", atoms)
    return tmp_path


def test_run_npt_refuses_a_dens_model(frame):
    res = invoke("run", "--structure", "s.extxyz", "--model", DENS, "--ensemble", "npt-mtk",
                 "--temperature", 300, "--steps", 1, "--device", "cpu")  # fmt: skip
    assert "npt-mtk needs the virial" in one_error_line(res)
    assert sorted(p.name for p in frame.iterdir()) == ["s.extxyz"]


def test_relax_cell_refuses_a_dens_model(frame):
    res = invoke("relax", "--structure", "s.extxyz", "--model", DENS, "--cell",
                 "--output", "out.extxyz", "--device", "cpu")  # fmt: skip
    assert "--cell needs the stress" in one_error_line(res)
    assert not (frame / "out.extxyz").exists()


def test_run_nve_with_a_dens_model(frame):
    res = invoke("run", "--structure", "s.extxyz", "--model", DENS, "--steps", 2,
                 "--dtype", "float64", "--device", "cpu", "--temperature", 100)  # fmt: skip
    assert res.exit_code == 0, res.output
