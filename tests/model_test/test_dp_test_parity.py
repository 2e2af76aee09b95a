"""``mdband test`` against deepmd-kit's ``dp --pt test``: the same errors (to 1e-8 relative)
and detail files in deepmd-kit's layout (fixtures: ``tests/fixtures/make_dp_test_fixtures.py``,
run in the deepmd-kit reference venv)."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from mdband.cli import main
from mdband.model_test.details import SUFFIXES

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "dp_test"
SHARED = REPO.parent / "shared" / "data"
WATER_MODEL = SHARED / "dpa4-water-smoke" / "pretrained.pt"


@pytest.fixture(autouse=True)
def _one_thread_in_repo(monkeypatch):
    """One torch thread; the repository root as working directory (the system labels are the
    paths deepmd-kit was given, relative to it)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.chdir(REPO)
    yield
    torch.set_num_threads(old)


def run_test(args):
    res = CliRunner().invoke(main, ["test", *args, "--dtype", "float64", "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def assert_errors(ours: dict, ref: dict, rtol: float) -> None:
    """mdband's ``{errors, weights}`` against deepmd-kit's ``{key: [value, weight]}``: the
    same quantities, weights equal, values to ``rtol``."""
    assert sorted(ours["errors"]) == sorted(ref)
    for key, (value, weight) in ref.items():
        assert ours["weights"][key] == weight, key
        assert ours["errors"][key] == pytest.approx(value, rel=rtol, abs=0), key


def assert_detail_file(ours: Path, ref: Path, label_cols: int, atol: float = 1e-12) -> None:
    """Same header line, same shape; label columns equal, predictions to 1e-9 relative (or
    ``atol``)."""
    assert ours.read_text().splitlines()[0] == ref.read_text().splitlines()[0]
    a, b = np.loadtxt(ours, ndmin=2), np.loadtxt(ref, ndmin=2)
    assert a.shape == b.shape
    np.testing.assert_allclose(a[:, :label_cols], b[:, :label_cols], rtol=1e-15, atol=0)
    np.testing.assert_allclose(a[:, label_cols:], b[:, label_cols:], rtol=1e-9, atol=atol)


def test_small_systems_match_dp_test(tmp_path):
    """Periodic with virials, triclinic without, nopbc molecule; a random float64 checkpoint:
    every error of every system and their average, and all six detail files."""
    ref = json.loads((FIX / "small.json").read_text())
    systems = [s["system"] for s in ref["systems"]]
    out = run_test(["-m", ref["model"], *systems, "-d", str(tmp_path / "small")])
    assert [s["system"] for s in out["systems"]] == systems
    for ours, theirs in zip(out["systems"], ref["systems"]):
        assert_errors(ours, theirs["errors"], rtol=1e-10)
    assert_errors(out["average"], ref["average"], rtol=1e-10)
    assert out["average"]["systems"] == 3 and out["average"]["frames"] == 7
    for suffix in SUFFIXES:
        cols = {".e.out": 1, ".e_peratom.out": 1, ".f.out": 3}.get(suffix, 9)
        assert_detail_file(tmp_path / f"small{suffix}", FIX / f"small{suffix}", cols)


@pytest.mark.skipif(not WATER_MODEL.is_file(), reason="../shared/data is absent (a user's clone)")
def test_water_checkpoint_matches_dp_test(tmp_path):
    """The shared DPA4 water checkpoint on the DFT water frames (first two of each system),
    float64: deepmd-kit's errors to 1e-8 relative, its detail files' layout and numbers."""
    ref = json.loads((FIX / "water.json").read_text())
    data = os.path.relpath(SHARED / "deepmd-water", REPO)
    args = ["-m", os.path.relpath(WATER_MODEL, REPO), data, "-n", str(ref["numb_test"])]
    out = run_test([*args, "-d", str(tmp_path / "water"), "--batch-size", "3"])
    assert [s["system"] for s in out["systems"]] == [s["system"] for s in ref["systems"]]
    for ours, theirs in zip(out["systems"], ref["systems"]):
        assert_errors(ours, theirs["errors"], rtol=1e-8)
    assert_errors(out["average"], ref["average"], rtol=1e-8)
    for suffix in (".e.out", ".e_peratom.out"):
        assert_detail_file(tmp_path / f"water{suffix}", FIX / f"water{suffix}", 1)
    # deepmd-kit's virials of the unwrapped water frames round to ~3e-10 eV (see
    # tests/model/test_parity_deepmd.py: 1e-8)
    assert_detail_file(tmp_path / "water.v.out", FIX / "water.v.out", 9, atol=1e-8)
    forces = np.loadtxt(tmp_path / "water.f.out")
    assert forces.shape == (4 * 2 * 192, 6)


def test_charge_spin_model_matches_dp_test(tmp_path):
    """A charge/spin model (default_chg_spin [-1, 2]) on systems whose charge_spin.npy gives
    every frame its own (charge, spin) and one without (the default): deepmd-kit's errors and
    predictions, frame by frame."""
    ref = json.loads((FIX / "chgspin.json").read_text())
    systems = [s["system"] for s in ref["systems"]]
    assert any((Path(s) / "set.000" / "charge_spin.npy").is_file() for s in systems)
    out = run_test(["-m", ref["model"], *systems, "-d", str(tmp_path / "cs")])
    for ours, theirs in zip(out["systems"], ref["systems"]):
        assert_errors(ours, theirs["errors"], rtol=1e-10)
    assert_errors(out["average"], ref["average"], rtol=1e-10)
    assert_detail_file(tmp_path / "cs.e.out", FIX / "chgspin.e.out", 1)
    assert_detail_file(tmp_path / "cs.f.out", FIX / "chgspin.f.out", 3)
    # the rows matter: the first system without its charge_spin.npy (the default for every
    # frame) predicts other energies
    pred = np.loadtxt(FIX / "chgspin.e.out", ndmin=2)[:, 1]
    plain = tmp_path / "plain"
    shutil.copytree(systems[0], plain)
    (plain / "set.000" / "charge_spin.npy").unlink()
    res = CliRunner().invoke(main, ["test", "-m", ref["model"], str(plain), "--dtype",
                                    "float64", "-d", str(tmp_path / "plain")])  # fmt: skip
    assert res.exit_code == 0, res.output
    other = np.loadtxt(tmp_path / "plain.e.out", ndmin=2)[:, 1]
    assert np.abs(other - pred[:3]).max() > 1e-3
