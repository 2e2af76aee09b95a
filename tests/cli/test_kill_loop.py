"""Kill a real ``mdband run`` with SIGKILL 20+ times, each time inside a frame write or a
checkpoint write, resuming after each kill: afterwards plain ``h5py.File(path, "r")`` opens
the trajectory and the result equals an uninterrupted run bit for bit.

Each life is a forked child running the CLI (no interpreter start-up per kill). The child's
writers announce on a pipe when they are inside their k-th write (k drawn by the test) and
then wait there, so the parent's SIGKILL lands inside that write.
"""

import os
import select
import signal

import ase.io
import h5py
import numpy as np
import pytest
import torch
from ase.build import bulk
from rich.console import Console

from mdband.io.checkpoint import read_checkpoint
from mdband.io.h5md import H5MDReader
from mdband.io.repair import is_flagged
from mdband.md import RunConfig, run
from mdband.testing.lj import lennard_jones_potential

STEPS, TRAJ_EVERY, CKPT_EVERY, KILLS = 400, 5, 20, 20
ARGS = [
    "run",
    "--structure", "ar.xyz", "--model", "lj.mdband", "--ensemble", "nvt-langevin",
    "--temperature", "80", "--timestep", "5", "--steps", str(STEPS), "--seed", "13",
    "--traj-every", str(TRAJ_EVERY), "--checkpoint-every", str(CKPT_EVERY),
    "--trajectory", "t.h5", "--checkpoint", "c.ckpt", "--log", "r.log",
    "--dtype", "float64", "--no-progress",
]  # fmt: skip


def _child(work, resume: bool, kill_at: tuple[str, int], announce: int) -> None:
    """Runs in the forked child; never returns."""
    code = 70
    try:
        os.chdir(work)
        out = os.open("life.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        import mdband.io.checkpoint as checkpoint
        import mdband.io.h5md as h5md
        from mdband.cli import main

        count = {"F": 0, "C": 0}

        def inside(kind: str) -> None:
            count[kind] += 1
            if (kind, count[kind]) == kill_at:
                os.write(announce, kind.encode())
                signal.pause()  # the parent kills us here, inside the write

        put, body = h5md._put_rows, checkpoint._write_body

        def put_rows(ds, row, values):
            if count["F"] % 2:
                inside("F")  # before this dataset's rows
            put(ds, row, values)
            inside("F")  # after them, before the next dataset

        def write_body(f, ck):
            f.attrs["partial"] = 1
            inside("C")  # the temporary checkpoint file exists, half written
            body(f, ck)
            inside("C")  # written, not yet verified and renamed

        h5md._put_rows, checkpoint._write_body = put_rows, write_body
        main([*ARGS, *(["--resume"] if resume else [])], standalone_mode=False)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported through the exit code
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def _life(work, resume: bool, kill_at: tuple[str, int]):
    """One run: returns ("killed", "F"|"C") or ("exited", code)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        _child(work, resume, kill_at, w)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 120)
        what = os.read(r, 1).decode() if ready else ""
        if what:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(r)
    if what:
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        return "killed", what
    assert ready, "the run neither finished nor reached a write in 120 s"
    return "exited", os.waitstatus_to_exitcode(status)


def _mdanalysis_reads(path) -> None:
    """MDAnalysis (when installed; not a dependency of mdband) reads every frame."""
    try:
        from MDAnalysis.coordinates.H5MD import H5MDReader as MDAReader
    except ImportError:
        return
    with h5py.File(path, "r") as f:
        n = f["particles/all/position/step"].shape[0]
    reader = MDAReader(str(path))
    try:
        assert reader.n_frames == n and reader[n - 1].positions.shape == (32, 3)
    finally:
        reader.close()


@pytest.fixture
def work(tmp_path):
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=1)
    ase.io.write(tmp_path / "ar.xyz", atoms)
    lennard_jones_potential().save(tmp_path / "lj.mdband")
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tmp_path
    torch.set_num_threads(old)


def test_kills_inside_writes_then_resume_is_exact(work):
    rng = np.random.default_rng(2024)
    kills = {"F": 0, "C": 0}
    resume = False
    for _ in range(4 * KILLS):
        # a frame write (one of ~20 dataset writes per batch) or a checkpoint write (2 points
        # each): about one checkpoint interval of progress per life
        kind = "F" if rng.random() < 0.5 else "C"
        kill_at = (kind, int(rng.integers(1, 30 if kind == "F" else 4)))
        outcome, what = _life(work, resume, kill_at)
        if outcome == "exited":
            assert what == 0, (work / "life.txt").read_text()[-3000:]
            if sum(kills.values()) >= KILLS:
                break
            # finished before the drawn write: start again from scratch (rare)
            for name in ("t.h5", "c.ckpt", "r.log"):
                (work / name).unlink()
            resume = False
            continue
        kills[what] += 1
        resume = (work / "c.ckpt").exists()
        if not resume:  # killed before the first checkpoint: start again
            for name in ("t.h5", "r.log"):
                (work / name).unlink(missing_ok=True)
            continue
        read_checkpoint(work / "c.ckpt")  # the last good checkpoint always reads
        # killed inside a frame write the file is flagged (--resume repairs it); killed
        # anywhere else it is closed and any HDF5 reader opens it
        assert is_flagged(work / "t.h5") == (what == "F")
        if what == "C":
            with h5py.File(work / "t.h5", "r"):
                pass
            _mdanalysis_reads(work / "t.h5")
        with H5MDReader(work / "t.h5") as r:  # and always readable, flagged or not
            steps = r.steps
        assert steps[0] == 0 and np.all(np.diff(steps) == TRAJ_EVERY)
        if sum(kills.values()) >= KILLS and resume:
            assert _life(work, True, ("-", 0)) == ("exited", 0)  # the final resume, no kill
            break
    assert sum(kills.values()) >= KILLS and kills["F"] >= 5 and kills["C"] >= 5, kills

    # plain HDF5 opens the result; no temporary or lock file is left
    with h5py.File(work / "t.h5", "r") as f:
        assert list(f["particles/all/position/step"][()]) == list(range(0, STEPS + 1, TRAJ_EVERY))
    _mdanalysis_reads(work / "t.h5")
    assert sorted(p.name for p in work.iterdir() if p.name.startswith(".")) == []
    rows = [ln.split()[0] for ln in (work / "r.log").read_text().splitlines() if ln[:10].strip()]
    steps = [int(x) for x in rows if x.isdigit()]
    assert steps == list(range(0, STEPS + 1, TRAJ_EVERY))  # no step logged twice

    # the same run without interruption
    cfg = RunConfig(
        structure=str(work / "ar.xyz"), model=str(work / "lj.mdband"), ensemble="nvt-langevin",
        temperature=80.0, timestep=5.0, steps=STEPS, seed=13, traj_every=TRAJ_EVERY,
        checkpoint_every=CKPT_EVERY, trajectory=str(work / "ref.h5"),
        checkpoint=str(work / "ref.ckpt"), dtype="float64", progress=False,
    )  # fmt: skip
    run(cfg, console=Console(file=open(work / "ref.txt", "w")))
    a, b = read_checkpoint(work / "c.ckpt"), read_checkpoint(work / "ref.ckpt")
    assert a.step == b.step == STEPS
    assert a.positions.tobytes() == b.positions.tobytes()
    assert a.momenta.tobytes() == b.momenta.tobytes()
    with H5MDReader(work / "t.h5") as ra, H5MDReader(work / "ref.h5") as rb:
        np.testing.assert_array_equal(ra.steps, rb.steps)
        for fa, fb in zip(ra, rb):
            for name in ("positions", "velocities", "forces", "cell"):
                assert getattr(fa, name).tobytes() == getattr(fb, name).tobytes(), name
