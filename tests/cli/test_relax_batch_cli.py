"""``mdband relax`` with several structures (a multi-frame file, a glob, repeated flags): one
multi-frame output in input order, exit code 1 when one did not converge, one-line errors."""

import ase.io
import pytest
from ase.build import bulk
from click.testing import CliRunner

from mdband.cli import main
from mdband.testing.lj import lennard_jones_potential


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cells = []
    for rep, seed in (((1, 1, 1), 1), ((2, 1, 1), 2), ((1, 1, 1), 3)):
        a = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(rep)
        a.rattle(0.1, seed=seed)
        cells.append(a)
    ase.io.write(tmp_path / "two.extxyz", cells[:2])
    ase.io.write(tmp_path / "c_1.xyz", cells[2])
    ase.io.write(tmp_path / "c_2.xyz", cells[0])
    lennard_jones_potential().save(tmp_path / "lj.mdband")
    return tmp_path


def relax(*args):
    return CliRunner().invoke(main, ["relax", "--model", "lj.mdband", *map(str, args)])


def test_all_frames_glob_and_repeated_flags(work):
    res = relax("--structure", "two.extxyz", "--structure", "c_*.xyz", "--all-frames",
                "--output", "out.extxyz", "--fmax", 0.01)  # fmt: skip
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("mdband relax: two.extxyz c_*.xyz (every image) with FIRE")
    assert lines[1].split() == ["Step", "relaxing", "done", "max", "fmax"]
    assert "Converged 4 of 4 structures" in lines[-1] and "wrote out.extxyz" in lines[-1]
    out = ase.io.read(work / "out.extxyz", ":")
    assert [a.info["source"] for a in out] == ["two.extxyz[0]", "two.extxyz[1]", "c_1.xyz[0]",
                                              "c_2.xyz[0]"]  # fmt: skip
    assert [len(a) for a in out] == [4, 8, 4, 4] and all(a.info["converged"] for a in out)
    assert out[0].get_potential_energy() < 0


def test_one_not_converged_exits_1_and_writes_all(work):
    res = relax("--structure", "two.extxyz", "--all-frames", "--output", "out.traj",
                "--steps", 2, "--fmax", 1e-5)  # fmt: skip
    assert res.exit_code == 1
    assert "2 of 2 structures not converged" in res.stderr and "two.extxyz[0]" in res.stderr
    out = ase.io.read(work / "out.traj", ":")
    assert [a.info["converged"] for a in out] == [False, False]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--structure", "c_*.xyz", "--output", "POSCAR"], "holds one structure"),
        (["--structure", "none*.xyz", "--output", "o.xyz"], "no structure file matches none*"),
        (
            ["--structure", "two.extxyz", "--all-frames", "--frame", "1", "--output", "o.xyz"],
            "--frame and --all-frames exclude each other",
        ),  # fmt: skip
        (["--structure", "c_*.xyz", "--output", "two.extxyz"], "exists; use --overwrite"),
        (
            ["--structure", "c_*.xyz", "--output", "o.xyz", "--trajectory", "t.traj"],
            "--trajectory records one relaxation",
        ),  # fmt: skip
    ],
)
def test_bad_input_one_line_nothing_written(work, args, message):
    before = sorted(p.name for p in work.iterdir())
    res = relax(*args)
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and message in res.stderr, res.stderr
    assert sorted(p.name for p in work.iterdir()) == before
