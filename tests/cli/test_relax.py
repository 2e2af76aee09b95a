"""``mdband relax``: progress, final energy and force, atomic output; bad values of every flag
are one line with exit code 2 and write nothing."""

import ase.io
import numpy as np
import pytest
from ase import Atoms
from ase.build import bulk
from click.testing import CliRunner

from mdband.calculator import Calculator
from mdband.cli import main
from mdband.testing.lj import lennard_jones_potential


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.1, seed=2)
    ase.io.write(tmp_path / "rattled.xyz", atoms)
    strained = bulk("Ar", "fcc", a=5.26 * 1.04, cubic=True).repeat(2)
    strained.rattle(0.02, seed=3)
    ase.io.write(tmp_path / "strained.xyz", strained)
    Atoms("Ar2", positions=[[0, 0, 0], [3.6, 0, 0]]).write(tmp_path / "gas.xyz")
    lennard_jones_potential().save(tmp_path / "lj.mdband")
    return tmp_path


def relax(*args):
    return CliRunner().invoke(main, ["relax", *map(str, args)])


def snapshot(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


BASE = ("--structure", "rattled.xyz", "--model", "lj.mdband", "--output", "out.xyz")


def test_relax_prints_progress_and_the_result(work):
    res = relax(*BASE, "--fmax", 0.01)
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "FIRE:" in out and "fmax" in out  # ASE's step table
    assert "Energy -" in out and "max force" in out and "Converged after" in out
    atoms = ase.io.read(work / "out.xyz")
    atoms.calc = Calculator(lennard_jones_potential())
    assert np.sqrt((atoms.get_forces() ** 2).sum(axis=1).max()) < 0.01


def test_cell_relaxation_with_bfgs_and_a_trajectory(work):
    res = relax(
        "--structure", "strained.xyz", "--model", "lj.mdband", "--output", "out.extxyz",
        "--cell", "--optimizer", "bfgs", "--trajectory", "path.traj",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "BFGS:" in res.stdout and "max stress" in res.stdout
    start, out = ase.io.read(work / "strained.xyz"), ase.io.read(work / "out.extxyz")
    assert out.get_volume() < start.get_volume()
    frames = ase.io.read(work / "path.traj", ":")
    assert len(frames) >= 2 and frames[-1].get_volume() == pytest.approx(out.get_volume())


def test_not_converged_exits_1_with_the_last_structure(work):
    res = relax(*BASE, "--steps", 2)
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "not converged to fmax 0.01 eV/Å in 2 steps" in lines[0]
    assert (work / "out.xyz").is_file()


def test_quiet(work):
    res = CliRunner().invoke(main, ["-q", "relax", *BASE])
    assert res.exit_code == 0 and res.stdout == "" and res.stderr == ""
    assert (work / "out.xyz").is_file()


def test_overwrite(work):
    (work / "out.xyz").write_text("old")
    assert relax(*BASE, "--overwrite").exit_code == 0
    assert len(ase.io.read(work / "out.xyz")) == 32


BAD = {
    "fmax zero": (["--fmax", "0"], "fmax must be positive"),
    "fmax negative": (["--fmax", "-0.1"], "fmax must be positive"),
    "fmax text": (["--fmax", "tight"], "'tight' is not a valid float"),
    "optimizer": (["--optimizer", "lbfgs"], "'lbfgs' is not one of 'fire', 'bfgs'"),
    "steps zero": (["--steps", "0"], "steps must be positive"),
    "steps text": (["--steps", "many"], "'many' is not a valid integer"),
    "cell value": (["--cell=3"], "does not take a value"),
    "cell open": (["--structure", "gas.xyz", "--cell"], "--cell needs a structure periodic"),
    "no output": (["--output", ""], "no output given (--output FILE)"),
    "output exists": (["--output", "gas.xyz"], "output file gas.xyz exists; use --overwrite"),
    "output format": (["--output", "out.nosuch"], "cannot tell an ASE format that writes"),
    "output dir": (["--output", "no/out.xyz"], "directory of output file no/out.xyz"),
    "trajectory format": (["--trajectory", "t.h5"], "must end in .traj, .xyz or .extxyz"),
    "trajectory exists": (["--trajectory", "strained.xyz"], "trajectory file strained.xyz exists"),
    "trajectory is output": (["--trajectory", "out.xyz"], "must be different files"),
    "structure": (["--structure", "none.xyz"], "structure file none.xyz does not exist"),
    "model": (["--model", "none.pt"], "model file none.pt does not exist"),
    "device": (["--device", "gpu"], "unknown device 'gpu'"),
    "dtype": (["--dtype", "float16"], "'float16' is not one of"),
    "frame": (["--frame", "5"], "rattled.xyz has no frame 5"),
    "unknown flag": (["--fmaxx", "1"], "No such option '--fmaxx'"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_values_are_one_line_and_write_nothing(work, case):
    args, message = BAD[case]
    before = snapshot(work)
    res = relax(*BASE, *args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mdband: error: "), res.stderr
    assert message in lines[0]
    assert "Traceback" not in res.output
    assert snapshot(work) == before
