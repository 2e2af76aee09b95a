"""``mdband run`` with a committee from the command line and from TOML."""

import ase.io
import numpy as np
import pytest
from ase.build import bulk
from click.testing import CliRunner

from mdband.cli import main
from mdband.testing.lj import lennard_jones_potential


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=1)
    ase.io.write(tmp_path / "ar.xyz", atoms)
    for k, eps in enumerate((0.0104, 0.0110, 0.0098)):
        lennard_jones_potential(epsilon=eps).save(tmp_path / f"m{k}.mdband")
    (tmp_path / "run.toml").write_text(
        'structure = "ar.xyz"\nmodel = ["m0.mdband", "m1.mdband", "m2.mdband"]\n'
        'model-devi = "toml.out"\n'
        "model_devi_every = 5\ntemperature = 80\ntimestep = 5.0\nsteps = 10\nseed = 3\n"
        'dtype = "float64"\nprogress = false\n'
    )
    return tmp_path


def invoke(*args):
    return CliRunner().invoke(main, ["run", *map(str, args)])


def test_toml_list_and_repeated_flags_give_the_same_file(work):
    res = invoke("--config", "run.toml")
    assert res.exit_code == 0, res.output
    assert "Model deviation: 3 models, every 5 steps" in res.output
    flags = ["--model", "m0.mdband", "--model", "m1.mdband", "--model", "m2.mdband"]
    flags += ["--model-devi", "cli.out"]
    res = invoke("--config", "run.toml", *flags)
    assert res.exit_code == 0, res.output
    assert (work / "cli.out").read_text() == (work / "toml.out").read_text()
    rows = np.loadtxt(work / "cli.out")
    assert rows.shape == (3, 7) and rows[:, 0].tolist() == [0, 5, 10]


def test_one_flag_model_replaces_the_toml_committee(work):
    res = invoke("--config", "run.toml", "--model", "m0.mdband")
    assert res.exit_code == 2 and "model_devi needs a committee" in res.output
    two = ("--model", "m0.mdband", "--model", "m2.mdband")
    res = invoke("--config", "run.toml", *two, "--overwrite")
    assert res.exit_code == 0, res.output
    assert "Model deviation: 2 models" in res.output
