"""A real ``mdband run`` killed with SIGKILL leaves a readable trajectory; --resume finishes
it, and the result equals an uninterrupted run bit for bit (see also test_kill_loop.py)."""

import os
import signal
import subprocess
import sys
import time

import ase.io
import h5py
import numpy as np
import pytest
import torch
from ase.build import bulk
from rich.console import Console

from mdband.io.checkpoint import CheckpointError, read_checkpoint
from mdband.io.h5md import H5MDReader
from mdband.io.repair import is_flagged
from mdband.md import RunConfig, run
from mdband.testing.lj import lennard_jones_potential

STEPS, TRAJ_EVERY, CKPT_EVERY = 600, 10, 50
ARGS = [
    "--structure",
    "ar.xyz",
    "--model",
    "lj.mdband",
    "--ensemble",
    "nvt-langevin",
    "--temperature",
    "80",
    "--timestep",
    "5",
    "--steps",
    str(STEPS),
    "--seed",
    "21",
    "--traj-every",
    str(TRAJ_EVERY),
    "--checkpoint-every",
    str(CKPT_EVERY),
    "--trajectory",
    "t.h5",
    "--checkpoint",
    "c.ckpt",
    "--dtype",
    "float64",
    "--no-progress",
]
RUN = "from mdband.cli import main; main()"


def _start(cwd, *extra):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", RUN, "run", *ARGS, *extra],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _checkpoint_step(path):
    try:
        return read_checkpoint(path).step
    except CheckpointError:
        return -1


@pytest.fixture
def work(tmp_path):
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=1)
    ase.io.write(tmp_path / "ar.xyz", atoms)
    lennard_jones_potential().save(tmp_path / "lj.mdband")
    return tmp_path


def test_sigkill_then_resume(work):
    proc = _start(work)
    deadline = time.monotonic() + 120
    while _checkpoint_step(work / "c.ckpt") < 2 * CKPT_EVERY:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "run made no progress"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    killed_at = read_checkpoint(work / "c.ckpt").step
    assert 2 * CKPT_EVERY <= killed_at < STEPS
    if not is_flagged(work / "t.h5"):  # flagged only if the kill landed inside a frame write
        with h5py.File(work / "t.h5", "r") as f:  # closed between batches: any reader opens it
            assert f["particles/all/position/step"][-1] >= killed_at
    with H5MDReader(work / "t.h5") as r:
        steps = r.steps
        assert steps[0] == 0 and np.all(np.diff(steps) == TRAJ_EVERY)
        assert steps[-1] >= killed_at
        assert all(np.all(np.isfinite(fr.positions)) and fr.positions.shape == (32, 3) for fr in r)

    done = _start(work, "--resume")
    out, err = done.communicate(timeout=300)
    assert done.returncode == 0, err.decode()
    assert f"Resuming from c.ckpt at step {killed_at}" in out.decode()

    # the same run without interruption, in this process (one torch thread, as above)
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = RunConfig(
            structure=str(work / "ar.xyz"),
            model=str(work / "lj.mdband"),
            ensemble="nvt-langevin",
            temperature=80.0,
            timestep=5.0,
            steps=STEPS,
            seed=21,
            traj_every=TRAJ_EVERY,
            checkpoint_every=CKPT_EVERY,
            trajectory=str(work / "ref.h5"),
            checkpoint=str(work / "ref.ckpt"),
            dtype="float64",
            progress=False,
        )
        run(cfg, console=Console(file=open(work / "ref.txt", "w")))
    finally:
        torch.set_num_threads(old)

    a, b = read_checkpoint(work / "c.ckpt"), read_checkpoint(work / "ref.ckpt")
    assert a.step == b.step == STEPS
    assert a.positions.tobytes() == b.positions.tobytes()
    assert a.momenta.tobytes() == b.momenta.tobytes()
    with H5MDReader(work / "t.h5") as r, H5MDReader(work / "ref.h5") as ref:
        assert not r.recovered
        np.testing.assert_array_equal(r.steps, np.arange(0, STEPS + 1, TRAJ_EVERY))
        np.testing.assert_array_equal(r.steps, ref.steps)
        for fa, fb in zip(r, ref):
            assert fa.positions.tobytes() == fb.positions.tobytes()
            assert fa.velocities.tobytes() == fb.velocities.tobytes()
