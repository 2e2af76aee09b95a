"""``mdband fit`` on the command line: TOML + flags, report, exit codes."""

import subprocess
import sys

import ase.io
import pytest
from click.testing import CliRunner
from conftest import emt_frames

import mdband
from mdband.cli import main

TINY_FLAGS = ["--channels", "8", "--lmax", "1", "--n-radial", "6", "--rcut", "4.0"]


def _run(args):
    return CliRunner().invoke(main, ["fit", *args])


def test_cli_fit_from_toml_with_flag_override(cu_xyz, tmp_path):
    toml = tmp_path / "fit.toml"
    toml.write_text(
        f'data = "{cu_xyz.name}"\n'
        "epochs = 50\nbatch_size = 1\nlr = 5e-3\nval-fraction = 0.25\n"
        "[model]\nchannels = 8\nlmax = 1\nn_radial = 6\nrcut = 4.0\n"
    )
    out = tmp_path / "m.mdband"
    res = _run(["--config", str(toml), "-o", str(out), "--epochs", "2", "-q"])
    assert res.exit_code == 0, res.output
    assert "validation: energy RMSE" in res.output and "meV/Å" in res.output
    pot = mdband.load_model(out)
    assert pot.metadata["fit"]["epochs"] == 2  # the flag won over the file
    assert pot.config["channels"] == 8 and pot.config["l_schedule"] == [1]
    assert pot.metadata["fit"]["n_val"] == 4


@pytest.mark.parametrize(
    "args, message",
    [
        (["--epochs", "0"], "epochs"),
        (["--lr", "nan"], "lr"),
        (["--val-fraction", "1.5"], "val_fraction"),
        (["--l-schedule", "1,x"], "l-schedule"),
        (["--dtype", "float16"], "dtype"),
        (["--epochs", "two"], "epochs"),
    ],
)
def test_cli_bad_values_exit_2(cu_xyz, tmp_path, args, message):
    res = _run([str(cu_xyz), "-o", str(tmp_path / "m.mdband"), *TINY_FLAGS, *args])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert not (tmp_path / "m.mdband").exists()


def test_cli_data_and_output_errors(cu_xyz, tmp_path):
    out = tmp_path / "m.mdband"
    res = _run([str(tmp_path / "missing.xyz"), "-o", str(out)])
    assert res.exit_code == 2 and "does not exist" in res.output
    res = _run([str(cu_xyz)])
    assert res.exit_code == 2 and "--output" in res.output
    res = _run(["-o", str(out)])
    assert res.exit_code == 2 and "no training data" in res.output
    out.write_text("precious")
    res = _run([str(cu_xyz), "-o", str(out), *TINY_FLAGS, "--epochs", "1"])
    assert res.exit_code == 2 and "--overwrite" in res.output
    assert out.read_text() == "precious"
    bad = tmp_path / "bad.toml"
    bad.write_text("epochs = 1\nlearning_rate = 3\n")
    res = _run([str(cu_xyz), "-o", str(tmp_path / "n.mdband"), "--config", str(bad)])
    assert res.exit_code == 2 and "learning_rate" in res.output


def test_cli_unlabelled_data_and_unknown_element_one_line(tmp_path):
    noforce = tmp_path / "e.extxyz"
    atoms = emt_frames(1)[0]
    atoms.calc = None
    atoms.info["energy"] = -1.0
    ase.io.write(noforce, atoms, format="extxyz")
    proc = subprocess.run(
        [sys.executable, "-m", "mdband.cli", "fit", str(noforce), "-o", str(tmp_path / "x.mdband")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no forces" in proc.stderr
    cu = tmp_path / "cu.extxyz"
    ase.io.write(cu, emt_frames(4, seed=2), format="extxyz")
    base = tmp_path / "cu.mdband"
    assert _run([str(cu), "-o", str(base), *TINY_FLAGS, "--epochs", "1", "-q"]).exit_code == 0
    ni = tmp_path / "ni.extxyz"
    ase.io.write(ni, emt_frames(2, symbols=("Ni",)), format="extxyz")
    res = _run([str(ni), "-o", str(tmp_path / "ft.mdband"), "--init", str(base)])
    assert res.exit_code == 2 and "Ni" in res.output and "type map" in res.output
    res = _run([str(cu), "-o", str(tmp_path / "ft.mdband"), "--init", str(base), "--channels", "4"])
    assert res.exit_code == 2 and "scratch" in res.output
