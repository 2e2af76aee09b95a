"""``mdband test``: dp test's report for any data format, detail files never overwritten
unasked, one-line errors (parity with deepmd-kit: tests/model_test/test_dp_test_parity.py)."""

import json

import ase.io
import numpy as np
import pytest
from ase.build import bulk, molecule
from ase.calculators.singlepoint import SinglePointCalculator
from click.testing import CliRunner

from mdband.cli import main
from mdband.potential import Potential
from mdband.testing.lj import lennard_jones_potential


def model_pot():
    return lennard_jones_potential(type_map=("H", "C", "O"), sigma=1.6, cutoff=4.5, r_on=3.5)


@pytest.fixture
def data(tmp_path):
    """An extxyz of three frames of 8, 6 and 16 atoms (periodic, open, periodic) labelled by
    a slightly different LJ model (energy, forces; stress of the periodic frames)."""
    truth = lennard_jones_potential(type_map=("H", "C", "O"), sigma=1.65, cutoff=4.5, r_on=3.5)
    a = bulk("C", "diamond", a=3.7, cubic=True)
    a.rattle(0.05, seed=1)
    m = molecule("CH3OH")
    b = bulk("C", "diamond", a=3.7, cubic=True).repeat((2, 1, 1))
    b.symbols[:3] = "OHH"
    b.rattle(0.05, seed=2)
    for atoms in (a, m, b):
        r = truth.evaluate(atoms.positions, atoms.cell.array, atoms.pbc, atoms.numbers)
        res = {"energy": r.energy + 0.1 * len(atoms), "forces": r.forces * 1.1}
        if atoms.pbc.all():
            res["stress"] = r.stress(atoms.get_volume())[[0, 1, 2, 1, 0, 0], [0, 1, 2, 2, 2, 1]]
        atoms.calc = SinglePointCalculator(atoms, **res)
    path = tmp_path / "frames.extxyz"
    ase.io.write(path, [a, m, b])
    model = tmp_path / "m.mdband"
    model_pot().save(model)
    return path, model, ase.io.read(path, ":")  # the labels as the file holds them


def invoke(*args):
    return CliRunner().invoke(main, ["test", *map(str, args)])


def test_report_and_json_of_mixed_sizes(data):
    """Per-atom errors of frames of different sizes divide each frame by its own atom count;
    the virial and stress come only with a system periodic in every direction."""
    path, model, frames = data
    res = invoke("-m", model, path, "--dtype", "float64")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[1] == f"# testing system : {path}" and lines[2] == "# number of test data : 3 "
    names = [ln.split(":")[0].rstrip() for ln in lines if not ln.startswith("#")]
    assert names[:6] == ["Energy MAE", "Energy RMSE", "Energy MAE/Natoms",
                         "Energy RMSE/Natoms", "Force  MAE", "Force  RMSE"]  # fmt: skip
    assert "Virial MAE" not in names  # a frame is open: no virial, as dp test
    out = json.loads(invoke("-m", model, path, "--dtype", "float64", "--json").stdout)
    pot = model_pot()
    pred = [pot.evaluate(a.positions, a.cell.array, a.pbc, a.numbers) for a in frames]
    de = np.array([p.energy - a.get_potential_energy() for p, a in zip(pred, frames)])
    n = np.array([len(a) for a in frames])
    df = np.concatenate([(p.forces - a.get_forces()).ravel() for p, a in zip(pred, frames)])
    sys0 = out["systems"][0]
    assert sys0["frames"] == 3 and sys0["atoms"] == [6, 8, 16]
    expect = {"mae_e": np.abs(de).mean(), "rmse_ea": np.sqrt(np.mean((de / n) ** 2)),
              "mae_ea": np.mean(np.abs(de) / n), "rmse_f": np.sqrt(np.mean(df**2))}  # fmt: skip
    for key, value in expect.items():
        assert sys0["errors"][key] == pytest.approx(value, rel=1e-12)
    assert sys0["weights"]["rmse_f"] == df.size and out["average"]["frames"] == 3

    periodic = path.with_name("periodic.extxyz")
    ase.io.write(periodic, [frames[0], frames[2]])
    out = json.loads(invoke("-m", model, periodic, path, "--dtype", "float64", "--json").stdout)
    first = out["systems"][0]
    w_ref = [-a.get_stress(voigt=False) * a.get_volume() for a in (frames[0], frames[2])]
    dv = np.stack([p.virial - w for p, w in zip((pred[0], pred[2]), w_ref)])
    assert first["errors"]["rmse_v"] == pytest.approx(np.sqrt(np.mean(dv**2)), rel=1e-10)
    assert first["weights"]["mae_s"] == 18 and "mae_v" not in out["systems"][1]["errors"]
    assert out["average"]["weights"]["mae_e"] == 5 and out["average"]["weights"]["mae_v"] == 18


def test_detail_files_are_never_overwritten_unasked(data, tmp_path):
    path, model, _ = data
    prefix = tmp_path / "detail"
    existing = tmp_path / "detail.e.out"
    existing.write_text("keep me\n")
    res = invoke("-m", model, path, "-d", prefix)
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "exists; use --overwrite" in res.stderr and existing.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("detail")) == [
        "detail.e.out"
    ]
    stale = tmp_path / "detail.s.out"
    stale.write_text("from an older run\n")
    res = invoke("-m", model, path, "-d", prefix, "--overwrite")
    assert res.exit_code == 0, res.output
    assert not stale.exists()  # this run has no periodic system with virials
    e = np.loadtxt(existing)
    assert e.shape == (3, 2) and existing.read_text().startswith(f"# {path}: data_e pred_e")
    f = np.loadtxt(tmp_path / "detail.f.out")
    assert f.shape == (30, 6)
    assert not list(tmp_path.glob(".detail*"))  # no temporary file left


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.xyz"], "missing.xyz does not exist"),
        (["{data}", "-n", "-1"], "--numb-test must be >= 0"),
        (["{data}", "--batch-size", "0"], "--batch-size must be a positive integer"),
        (["{data}", "-d", "nowhere/x"], "directory of detail file nowhere/x.e.out does not"),
        (["{data}", "--format", "nonsense"], "format 'nonsense' is not one of"),
        (["{fe}"], "element(s) Fe not in the model's type map"),
    ],
)
def test_bad_input_is_one_line(data, tmp_path, monkeypatch, args, message):
    path, model, _ = data
    monkeypatch.chdir(tmp_path)
    fe = tmp_path / "fe.extxyz"
    iron = bulk("Fe", "bcc", a=2.87)
    iron.calc = SinglePointCalculator(iron, energy=1.0, forces=np.zeros((1, 3)))
    ase.io.write(fe, iron)
    args = [a.format(data=path, fe=fe) for a in args]
    res = invoke("-m", model, *args)
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and message in res.stderr, res.stderr


def test_interrupt_writes_nothing(data, tmp_path, monkeypatch):
    path, model, _ = data

    def interrupted(self, systems, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(Potential, "evaluate_many", interrupted)
    res = invoke("-m", model, path, "-d", tmp_path / "d")
    assert res.exit_code == 130 and "interrupted; nothing written" in res.stderr
    assert not list(tmp_path.glob("d.*")) and not list(tmp_path.glob(".d*"))
