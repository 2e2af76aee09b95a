"""``mdband run`` under adversarial use: one line and the documented exit code for absurd
settings, runaway dynamics, a full disk and no memory; one writer per trajectory; resume
from another directory; a damaged trajectory never hangs the run."""

import errno
import os
import shutil
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest
import test_run
from test_run import invoke, snapshot

from mdband.io.checkpoint import read_checkpoint
from mdband.io.h5md import H5MDReader
from mdband.io.locks import lock_path

work = test_run.work  # test_run's fixture: an argon run directory
BASE = ("--config", "run.toml", "--trajectory", "t.h5", "--checkpoint", "c.ckpt")


def one_line(res, code, message):
    assert res.exit_code == code, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert "Traceback" not in res.output


def test_help_documents_the_exit_codes_and_guards(work):
    res = invoke("--help")
    text = " ".join(res.output.split())
    assert "4 out of resources (disk full, out of memory" in text
    assert "3 the run diverged (NaN/inf) or ran away" in text
    for flag in ("--max-temperature", "--guard-distance", "--allow-unusual-timestep"):
        assert flag in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--timestep", "1e12"], "timestep 1e+12 fs is outside 0.01-20 fs"),
        (["--timestep", "1e-300"], "timestep 1e-300 fs is outside"),
        (["--device", "tpu"], "device must be auto, cpu, cuda or cuda:N; got 'tpu'"),
        (["--max-temperature", "-3"], "max_temperature must be >= 0"),
        (["--log", "run.toml", "--overwrite"], "log file run.toml is the config file"),
        (["--trajectory", "ar.xyz", "--overwrite"], "trajectory file ar.xyz is the structure"),
        (["--log", "lj.mdband", "--overwrite"], "log file lj.mdband is the model"),
    ],
)
def test_refused_before_anything_is_written(work, args, message):
    before = snapshot(work)
    one_line(invoke(*BASE, *args), 2, message)
    assert snapshot(work) == before


def test_runaway_exits_3(work):
    res = invoke(*BASE, "--timestep", "200", "--allow-unusual-timestep", "--temperature", "3000")
    # the temperature guard at the first sample, or before it the step whose atoms flew beyond
    # the coordinates a neighbour list accepts
    assert "exceeds max_temperature 30000 K" in res.stderr or "the atoms flew apart" in res.stderr
    one_line(res, 3, "run stopped at step")
    assert "last good checkpoint: step 0 (c.ckpt)" in res.stderr
    with h5py.File(work / "t.h5", "r") as f:
        assert list(f["particles/all/position/step"][()]) == [0]


def test_disk_full_exits_4(work, monkeypatch):
    import mdband.io.h5md as h5md

    put = h5md._put_rows

    def full(ds, row, values):
        if row >= 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        put(ds, row, values)

    monkeypatch.setattr(h5md, "_put_rows", full)
    res = invoke(*BASE, "--steps", "40")
    one_line(res, 4, "disk full while writing trajectory t.h5")
    assert read_checkpoint(work / "c.ckpt").step == 10
    with h5py.File(work / "t.h5", "r") as f:
        assert list(f["particles/all/position/step"][()]) == [0, 10]


def test_out_of_memory_exits_4(work, monkeypatch):
    from mdband.testing import lj

    forward = lj.LennardJones.forward
    calls = []

    def hungry(self, *args, **kw):
        calls.append(1)
        if len(calls) > 25:
            raise MemoryError
        return forward(self, *args, **kw)

    monkeypatch.setattr(lj.LennardJones, "forward", hungry)
    res = invoke(*BASE, "--steps", "40")
    one_line(res, 4, "out of memory (CPU)")
    assert "last good checkpoint: step 20 (c.ckpt)" in res.stderr
    assert read_checkpoint(work / "c.ckpt").step == 20


def test_resume_from_another_directory(work, monkeypatch):
    (work / "a").mkdir()
    (work / "b").mkdir()
    monkeypatch.chdir(work / "a")
    assert invoke(*BASE, "--config", "../run.toml", "--steps", "20").exit_code == 0
    monkeypatch.chdir(work / "b")
    assert invoke(*BASE, "--config", "../run.toml", "--steps", "10").exit_code == 0
    theirs = (work / "b" / "t.h5").read_bytes()
    # the checkpoint's trajectory is a/t.h5, wherever the resume is started from
    res = invoke("--resume", "--checkpoint", "../a/c.ckpt", "--steps", "40")
    assert res.exit_code == 0, res.output
    assert (work / "b" / "t.h5").read_bytes() == theirs
    with H5MDReader(work / "a" / "t.h5") as r:
        assert list(r.steps) == [0, 10, 20, 30, 40]
    # naming b's own trajectory explicitly is refused: it belongs to another run
    res = invoke("--resume", "--checkpoint", "../a/c.ckpt", "--steps", "50", "--trajectory", "t.h5")
    one_line(res, 2, "t.h5 belongs to another run")
    assert (work / "b" / "t.h5").read_bytes() == theirs


def test_resume_never_hangs_on_a_damaged_trajectory(work, monkeypatch):
    import mdband.io.h5md as h5md
    import mdband.io.repair as repair

    assert invoke(*BASE, "--steps", "20").exit_code == 0
    path = work / "t.h5"
    with H5MDReader(path) as r:
        header, first = r.header(), r.frame(0)
    # what a writer killed late in one long SWMR session leaves: flagged, with a stale EOF
    h5md.H5MDWriter.create(path, header).close()
    with h5py.File(path, "r+", libver=("v110", "v110")) as f:
        f.swmr_mode = True
        series = h5md._series(f, list(h5md.OBSERVABLES))
        image = np.zeros(first.positions.shape, dtype=np.int32)
        values = [first.positions, first.velocities, first.forces, first.cell, image]
        values += [first.observables[k] for k in h5md.OBSERVABLES] + [0.0, 0]
        for row in range(200):
            values[-1] = 10 * row
            for ds, value in zip(series, values):
                h5md._put_rows(ds, row, np.asarray([value]))
        shutil.copy(path, work / "flagged.h5")
    data = (work / "flagged.h5").read_bytes()
    path.write_bytes(data[: len(data) // 2])  # and then truncated
    monkeypatch.setattr(repair, "STALL_SECONDS", 2.0)
    t0 = time.monotonic()
    res = invoke(*BASE, "--steps", "40", "--resume")
    assert time.monotonic() - t0 < 90  # before: no output for 590 s, then killed
    one_line(res, 2, "trajectory t.h5 is damaged: HDF5 stopped answering")


_SLOW_RUN = textwrap.dedent(
    """
    import sys, time
    import mdband.md.runner as runner
    advance = runner._Run._advance

    def slow(self, step):
        time.sleep(0.05)
        advance(self, step)

    runner._Run._advance = slow
    from mdband.cli import main
    main(sys.argv[1:])
    """
)


def test_two_runs_on_one_trajectory(work):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(
        [sys.executable, "-c", _SLOW_RUN, "run", *BASE, "--steps", "60"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not (lock_path(work / "t.h5").exists() and (work / "t.h5").exists()):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for extra in ([], ["--overwrite"]):
            res = invoke(*BASE, "--steps", "20", *extra)
            one_line(res, 2, f"PID {first.pid}")
            assert "is being written by another process" in res.stderr
        out, err = first.communicate(timeout=240)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err.decode()
    with H5MDReader(work / "t.h5") as r:
        assert list(r.steps) == [0, 10, 20, 30, 40, 50, 60]  # the first run's frames, all
    assert not lock_path(work / "t.h5").exists()
