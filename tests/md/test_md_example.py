"""examples/nvt stays runnable: make its inputs, run a short piece of it, read it back."""

import runpy
import shutil
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from mdband.cli import main
from mdband.io.h5md import H5MDReader

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nvt"


def test_nvt_example_runs(tmp_path, monkeypatch):
    for name in ("make_inputs.py", "run.toml", "analyse.py"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    monkeypatch.setattr("sys.argv", ["make_inputs.py", str(tmp_path)])
    runpy.run_path(str(tmp_path / "make_inputs.py"), run_name="__main__")
    assert (tmp_path / "argon.xyz").is_file() and (tmp_path / "lj-argon.mdband").is_file()
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(
        main, ["run", "--config", "run.toml", "--steps", "40", "--traj-every", "10"]
    )
    assert res.exit_code == 0, res.output
    with H5MDReader(tmp_path / "nvt.h5") as r:
        assert list(r.steps) == [0, 10, 20, 30, 40] and r.n_atoms == 108
        assert np.all(r.observable("temperature") > 0)
    assert "Finished at step 40" in (tmp_path / "nvt.log").read_text()
    monkeypatch.setattr("sys.argv", ["analyse.py", "nvt.h5"])
    runpy.run_path(str(tmp_path / "analyse.py"), run_name="__main__")
    assert (tmp_path / "final.extxyz").is_file()
