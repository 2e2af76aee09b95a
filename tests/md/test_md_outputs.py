"""The outputs of a run: one writer per file, no input overwritten, resume only into the
run's own files, no repeated log rows, stale temporaries cleaned, modes from the umask."""

import os
import shutil

import h5py
import numpy as np
import pytest
from rich.console import Console
from run_helpers import argon_config, quiet

from mdband.errors import MdbandError
from mdband.io.checkpoint import CheckpointError, read_checkpoint
from mdband.io.h5md import H5MDReader, TrajectoryError
from mdband.io.locks import OutputLock, OutputLockedError
from mdband.md import ConfigError, run
from mdband.md.thermo import header as thermo_header


def config(tmp_path, argon_xyz, lj_file, name="r", steps=20, **kw):
    return argon_config(tmp_path, argon_xyz, lj_file, name, **{"steps": steps, "seed": 5, **kw})


def files(directory):
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("what, name", [("trajectory", "r.h5"), ("final", "r.final.xyz")])
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_second_writer_is_refused(tmp_path, argon_xyz, lj_file, lj, overwrite, what, name):
    c = config(tmp_path, argon_xyz, lj_file, overwrite=overwrite)  # final: the default name
    with OutputLock(tmp_path / name, what):  # as another run holds it
        with pytest.raises(OutputLockedError, match=f"{what} .*{name} .*PID {os.getpid()}"):
            run(c, potential=lj)
    assert files(tmp_path) == ["ar.xyz", "lj.mdband"]  # nothing created, no lock left


@pytest.mark.parametrize(
    "output, input_name",
    [("trajectory", "structure"), ("log", "model"), ("checkpoint", "structure")],
)
def test_an_output_is_never_an_input(tmp_path, argon_xyz, lj_file, lj, output, input_name):
    target = str(argon_xyz if input_name == "structure" else lj_file)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    c = config(tmp_path, argon_xyz, lj_file, overwrite=True, **{output: target})
    with pytest.raises(ConfigError, match=f"{output} file .* is the {input_name}"):
        run(c, potential=lj)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_unwritable_checkpoint_directory_creates_nothing(tmp_path, argon_xyz, lj_file, lj):
    sub = tmp_path / "ro"
    sub.mkdir()
    sub.chmod(0o555)
    try:
        if os.access(sub, os.W_OK):  # root writes anywhere: use a directory no one writes
            pytest.skip("running as root: no directory is read-only to this process")
        c = config(tmp_path, argon_xyz, lj_file, checkpoint=str(sub / "c.ckpt"))
        with pytest.raises(MdbandError, match="cannot write checkpoint"):
            run(c, potential=lj)
    finally:
        sub.chmod(0o755)
    assert files(tmp_path) == ["ar.xyz", "lj.mdband", "ro"]  # no trajectory, no log


def test_unwritable_directory_as_root(tmp_path, argon_xyz, lj_file, lj, monkeypatch):
    """The same refusal where chmod cannot stop this process (root): the lock file's
    creation fails as it would in a read-only directory."""
    import mdband.io.locks as locks

    real_open = os.open

    def read_only(path, flags, *args):
        if os.path.basename(os.path.dirname(path)) == "locked-dir" and flags & os.O_CREAT:
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args)

    monkeypatch.setattr(locks.os, "open", read_only)
    (tmp_path / "locked-dir").mkdir()
    c = config(tmp_path, argon_xyz, lj_file, checkpoint=str(tmp_path / "locked-dir" / "c.ckpt"))
    with pytest.raises(MdbandError, match="cannot write checkpoint .*Permission denied"):
        run(c, potential=lj)
    assert files(tmp_path) == ["ar.xyz", "lj.mdband", "locked-dir"]


def test_checkpoint_records_absolute_outputs(tmp_path, argon_xyz, lj_file, lj, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c = config(tmp_path, argon_xyz, lj_file, trajectory="r.h5", checkpoint="r.ckpt", log="r.log")
    run(c, potential=lj, console=quiet(tmp_path))
    ck = read_checkpoint(tmp_path / "r.ckpt")
    out = ck.outputs
    assert out["trajectory"] == {"path": str(tmp_path / "r.h5"), "frames": 5, "last_step": 20}
    assert out["log"]["path"] == str(tmp_path / "r.log")
    log = (tmp_path / "r.log").read_text()
    assert log[: out["log"]["size"]].splitlines()[-1].split()[0] == "20"  # then the summary
    assert ck.config["trajectory"] == str(tmp_path / "r.h5")  # absolute, for a resume elsewhere
    with H5MDReader(tmp_path / "r.h5") as r:
        assert r.parameters["run_id"] == out["run_id"]


def _split(tmp_path, argon_xyz, lj_file, lj, **kw):
    run(config(tmp_path, argon_xyz, lj_file, steps=10, **kw), potential=lj, console=quiet(tmp_path))


def test_deleted_trajectory_is_not_restarted(tmp_path, argon_xyz, lj_file, lj):
    _split(tmp_path, argon_xyz, lj_file, lj)
    os.remove(tmp_path / "r.h5")
    with pytest.raises(TrajectoryError, match=r"r.h5 is missing.*3 frames .*through step 10"):
        run(config(tmp_path, argon_xyz, lj_file, resume=True), potential=lj)
    # a new name is an explicit choice: a new file from the checkpoint's step on
    res = run(
        config(tmp_path, argon_xyz, lj_file, resume=True, trajectory=str(tmp_path / "n.h5")),
        potential=lj,
        console=quiet(tmp_path),
    )
    assert res.final_step == 20
    with H5MDReader(tmp_path / "n.h5") as r:
        assert list(r.steps) == [15, 20]


def test_trajectory_ending_before_the_checkpoint_is_refused(tmp_path, argon_xyz, lj_file, lj):
    run(config(tmp_path, argon_xyz, lj_file, steps=5, checkpoint_every=5), potential=lj)
    shutil.copy(tmp_path / "r.h5", tmp_path / "old.h5")  # frames 0, 5
    run(config(tmp_path, argon_xyz, lj_file, steps=15, resume=True), potential=lj)
    shutil.copy(tmp_path / "old.h5", tmp_path / "r.h5")  # an older copy put back
    with pytest.raises(TrajectoryError, match=r"frames through step 5, but .*step 15.*missing"):
        run(config(tmp_path, argon_xyz, lj_file, resume=True), potential=lj)


def test_another_runs_trajectory_is_refused(tmp_path, argon_xyz, lj_file, lj):
    _split(tmp_path, argon_xyz, lj_file, lj)
    run(config(tmp_path, argon_xyz, lj_file, name="other", steps=10), potential=lj)
    before = (tmp_path / "other.h5").read_bytes()
    c = config(tmp_path, argon_xyz, lj_file, resume=True, trajectory=str(tmp_path / "other.h5"))
    with pytest.raises(TrajectoryError, match="other.h5 belongs to another run"):
        run(c, potential=lj)
    assert (tmp_path / "other.h5").read_bytes() == before


@pytest.mark.parametrize(
    "change, message",
    [({"dtype": "float32"}, "dtype 'float64' -> 'float32'"), ({"ensemble": "nve"}, "ensemble")],
)
def test_settings_that_break_exactness_are_refused(
    tmp_path, argon_xyz, lj_file, lj, change, message
):
    _split(tmp_path, argon_xyz, lj_file, lj)
    with pytest.raises(ConfigError, match=message):
        run(config(tmp_path, argon_xyz, lj_file, resume=True, **change), potential=lj)


def test_other_structure_on_resume_is_ignored_with_a_warning(tmp_path, argon_xyz, lj_file, lj):
    _split(tmp_path, argon_xyz, lj_file, lj)
    other = tmp_path / "other.xyz"
    shutil.copy(argon_xyz, other)
    console = tmp_path / "warn.txt"
    c = config(tmp_path, argon_xyz, lj_file, resume=True, structure=str(other))
    run(c, potential=lj, console=Console(file=open(console, "w")))
    text = console.read_text()
    assert "Warning: structure" in text and "is ignored" in text


def test_log_does_not_repeat_steps_after_kill_and_resume(tmp_path, argon_xyz, lj_file, lj):
    _split(tmp_path, argon_xyz, lj_file, lj)
    shutil.copy(tmp_path / "r.ckpt", tmp_path / "at10.ckpt")
    run(config(tmp_path, argon_xyz, lj_file, resume=True), potential=lj, console=quiet(tmp_path))
    shutil.copy(tmp_path / "at10.ckpt", tmp_path / "r.ckpt")  # as if killed after step 20
    run(config(tmp_path, argon_xyz, lj_file, resume=True), potential=lj, console=quiet(tmp_path))
    rows = [
        int(line.split()[0])
        for line in (tmp_path / "r.log").read_text().splitlines()
        if line.split() and line.split()[0].isdigit()
    ]
    assert rows == [0, 5, 10, 15, 20]
    assert (tmp_path / "r.log").read_text().count(thermo_header()) == 2  # start + one resume


def test_stale_temporaries_are_cleaned(tmp_path, argon_xyz, lj_file, lj):
    _split(tmp_path, argon_xyz, lj_file, lj)
    for name in (".r.ckpt.abc123.tmp", ".r.h5.k9x.tmp", ".other.ckpt.x.tmp"):
        (tmp_path / name).write_bytes(b"left by a killed writer")
    run(config(tmp_path, argon_xyz, lj_file, resume=True), potential=lj, console=quiet(tmp_path))
    left = [name for name in files(tmp_path) if name.startswith(".")]
    assert left == [".other.ckpt.x.tmp"]  # not an output of this run: left alone


@pytest.mark.parametrize("flagged", [False, True])
def test_resumed_trajectory_mode_follows_umask(tmp_path, argon_xyz, lj_file, lj, flagged):
    old = os.umask(0o022)
    try:
        run(config(tmp_path, argon_xyz, lj_file, steps=10, checkpoint_every=5), potential=lj)
        shutil.copy(tmp_path / "r.ckpt", tmp_path / "at10.ckpt")
        run(config(tmp_path, argon_xyz, lj_file, steps=15, resume=True), potential=lj)
        shutil.copy(tmp_path / "at10.ckpt", tmp_path / "r.ckpt")  # frames 15 must be dropped
        if flagged:  # as a writer killed inside a batch leaves it
            with h5py.File(tmp_path / "r.h5", "r+", libver=("v110", "v110")) as f:
                f.swmr_mode = True
                shutil.copy(tmp_path / "r.h5", tmp_path / "flagged.h5")
            shutil.move(tmp_path / "flagged.h5", tmp_path / "r.h5")
        run(config(tmp_path, argon_xyz, lj_file, resume=True), potential=lj)
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "r.h5").st_mode & 0o777 == 0o644
    with h5py.File(tmp_path / "r.h5", "r") as f:
        assert list(f["particles/all/position/step"][()]) == [0, 5, 10, 15, 20]


def test_corrupt_checkpoint_record_is_refused(tmp_path, argon_xyz, lj_file, lj):
    _split(tmp_path, argon_xyz, lj_file, lj)
    with h5py.File(tmp_path / "r.ckpt", "r+") as f:
        f.attrs["outputs_json"] = "{}"
    with pytest.raises(CheckpointError, match="checksum"):
        run(config(tmp_path, argon_xyz, lj_file, resume=True), potential=lj)


def test_thermo_every_step_frames_every_five_and_resume(tmp_path, argon_xyz, lj_file, lj):
    """thermo_every apart from traj_every: a CSV row and a table line every step, a frame every
    5; extra columns and pressures in bar; a resumed run keeps the recorded thermo_every."""
    import csv

    from mdband.io.run_files import read_csv_log

    extra = dict(thermo_every=1, thermo_columns=["pressure_tensor", "cell", "density"],
                 pressure_unit="bar", log=str(tmp_path / "r.csv"))  # fmt: skip
    res = run(config(tmp_path, argon_xyz, lj_file, steps=10, **extra), potential=lj,
              console=quiet(tmp_path))  # fmt: skip
    assert [s[0] for s in res.samples] == list(range(11))
    with H5MDReader(tmp_path / "r.h5") as r:
        assert list(r.steps) == [0, 5, 10]
        pressure = r.observable("pressure")
    cols = read_csv_log(tmp_path / "r.csv")
    assert list(cols["step"]) == list(range(11))
    with open(tmp_path / "r.csv") as fh:
        names = next(csv.reader(fh))
    assert names[7:] == ["pressure_bar", "volume_A3", "pxx_bar", "pyy_bar", "pzz_bar", "pyz_bar",
                         "pxz_bar", "pxy_bar", "a_A", "b_A", "c_A", "density_g_cm3"]  # fmt: skip
    assert cols["pressure_bar"][::5] == pytest.approx(pressure * 1e4, rel=1e-12)
    trace = (cols["pxx_bar"] + cols["pyy_bar"] + cols["pzz_bar"]) / 3
    assert trace == pytest.approx(cols["pressure_bar"], rel=1e-12)
    density = 32 * 39.948 * 1.66053906660 / cols["volume_A3"]  # 32 argon atoms, g/cm^3
    assert cols["density_g_cm3"] == pytest.approx(density, rel=1e-6)
    table = (tmp_path / "console.txt").read_text()
    assert "P[bar]" in table and "Pxy[bar]" in table and "rho[g/cm3]" in table
    # resumed from the checkpoint at step 10 with only steps changed: still a row per step
    again = dict(extra, thermo_every=None, thermo_columns=["density"], pressure_unit="GPa")
    run(config(tmp_path, argon_xyz, lj_file, steps=13, resume=True, **again), potential=lj,
        console=quiet(tmp_path))  # fmt: skip
    cols = read_csv_log(tmp_path / "r.csv")
    assert list(cols["step"]) == list(range(14))
    assert read_checkpoint(tmp_path / "r.ckpt").config["thermo_every"] == 1
    # the file keeps its columns and units, whatever the resumed run prints
    for name in ("pxx_bar", "pressure_bar", "density_g_cm3", "c_A"):
        assert np.isfinite(cols[name]).all(), name
    assert "P[GPa]" in (tmp_path / "console.txt").read_text()
