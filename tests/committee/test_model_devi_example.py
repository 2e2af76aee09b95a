"""examples/model-devi stays runnable: its commands at a tiny size (4 frames, 1 epoch, 32 atoms)."""

import runpy
import shutil
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from mdband.cli import main
from mdband.io.h5md import H5MDReader

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def script(tmp_path, monkeypatch, name, *args):
    monkeypatch.setattr("sys.argv", [name, *args])
    runpy.run_path(str(tmp_path / name), run_name="__main__")


def cli(*args):
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code == 0, res.output
    return res.output


def test_model_devi_example_runs(tmp_path, monkeypatch):
    for name in ("make_data.py", "run.toml", "select_frames.py"):
        shutil.copy(EXAMPLES / "model-devi" / name, tmp_path / name)
    shutil.copy(EXAMPLES / "builtin-emt" / "make_structure.py", tmp_path / "make_structure.py")
    monkeypatch.chdir(tmp_path)
    script(tmp_path, monkeypatch, "make_data.py", "--frames", "4")
    for seed in (1, 2):
        cli("fit", "finetune.extxyz", "--init", "builtin:emt-cuni", "-o", f"ft-{seed}.mdband",
            "--seed", str(seed), "--epochs", "1", "--threads", "1", "-q")  # fmt: skip
    script(tmp_path, monkeypatch, "make_structure.py", "--reps", "2", "--output", "cuni-256.xyz")
    out = cli("run", "--config", "run.toml", "--steps", "20", "--threads", "1", "--no-progress")
    assert "Model deviation: 3 models, every 10 steps" in out
    rows = np.loadtxt("model_devi.out")
    assert rows.shape == (3, 7) and rows[:, 0].tolist() == [0, 10, 20]
    assert np.all(rows[:, 4] > 0)  # the fine-tuned copies differ from the built-in model
    with H5MDReader("cuni.h5") as r:
        np.testing.assert_allclose(r.observable("max_devi_f"), rows[:, 4], rtol=6e-7)
    script(tmp_path, monkeypatch, "select_frames.py", "--lo", "0", "--hi", "10")
    cli("model-devi", "builtin:emt-cuni", "ft-1.mdband", "ft-2.mdband", "-s", "candidates.extxyz",
        "-o", "check.out", "--every", "10")  # fmt: skip
    check = np.loadtxt("check.out")
    np.testing.assert_allclose(check[:, 1:], rows[:, 1:], rtol=1e-4, atol=1e-5)  # float32
