"""Disk full and out of memory stop a run with ResourceExhaustedError: the last good
checkpoint stays, the trajectory is closed (any reader opens it), and the run resumes."""

import errno

import h5py
import pytest
import torch
from run_helpers import argon_config, quiet
from test_md_stops import Sabotaged

from mdband.errors import ResourceExhaustedError
from mdband.io.checkpoint import read_checkpoint
from mdband.md import run
from mdband.potential import Potential


def config(tmp_path, argon_xyz, lj_file, **kw):
    base = dict(steps=30, seed=8, checkpoint=str(tmp_path / "c.ckpt"), log=str(tmp_path / "r.log"))
    return argon_config(tmp_path, argon_xyz, lj_file, "t", **{**base, **kw})


def frames(path):
    with h5py.File(path, "r") as f:  # a plain open: the file was closed cleanly
        return list(f["particles/all/position/step"][()])


def _disk_full():
    return OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_in_the_trajectory(tmp_path, argon_xyz, lj_file, lj, monkeypatch):
    import mdband.io.h5md as h5md

    put = h5md._put_rows

    def full_from_row_3(ds, row, values):
        if row >= 3:  # the batch of frames 15 and 20, written before checkpoint 20
            raise _disk_full()
        put(ds, row, values)

    monkeypatch.setattr(h5md, "_put_rows", full_from_row_3)
    with pytest.raises(ResourceExhaustedError) as info:
        run(config(tmp_path, argon_xyz, lj_file), potential=lj, console=quiet(tmp_path))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("run stopped at step 20: disk full")
    assert "frames through step 10 are kept" in msg and "last good checkpoint: step 10" in msg
    assert read_checkpoint(tmp_path / "c.ckpt").step == 10
    assert frames(tmp_path / "t.h5") == [0, 5, 10]
    monkeypatch.setattr(h5md, "_put_rows", put)  # space again: the run continues
    res = run(config(tmp_path, argon_xyz, lj_file, resume=True), potential=lj)
    assert res.final_step == 30 and frames(tmp_path / "t.h5") == [0, 5, 10, 15, 20, 25, 30]


def test_disk_full_in_the_checkpoint(tmp_path, argon_xyz, lj_file, lj, monkeypatch):
    import mdband.io.checkpoint as checkpoint

    write_body = checkpoint._write_body

    def full_at_step_20(f, ck):
        write_body(f, ck)
        if ck.step == 20:
            raise _disk_full()

    monkeypatch.setattr(checkpoint, "_write_body", full_at_step_20)
    with pytest.raises(ResourceExhaustedError, match="step 20: disk full: checkpoint") as info:
        run(config(tmp_path, argon_xyz, lj_file), potential=lj, console=quiet(tmp_path))
    assert "the previous one is kept" in str(info.value)
    assert read_checkpoint(tmp_path / "c.ckpt").step == 10
    assert frames(tmp_path / "t.h5") == [0, 5, 10, 15, 20]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_disk_full_in_the_log(tmp_path, argon_xyz, lj_file, lj, monkeypatch):
    import mdband.md.progress as progress

    emit = progress.Reporter._emit

    def full_log(self, line):
        if self._log is not None and line.split() and line.split()[0] == "15":
            raise _disk_full()
        emit(self, line)

    monkeypatch.setattr(progress.Reporter, "_emit", full_log)
    with pytest.raises(ResourceExhaustedError, match="step 15: disk full"):
        run(config(tmp_path, argon_xyz, lj_file), potential=lj, console=quiet(tmp_path))
    assert read_checkpoint(tmp_path / "c.ckpt").step == 10
    assert frames(tmp_path / "t.h5")[:3] == [0, 5, 10]


class _OutOfMemory(Sabotaged):
    def __init__(self, after, exc):
        super().__init__()
        self.after, self.exc = after, exc

    def forward(self, types, src, dst, edge_vec, exchange=None):
        self.calls += 1
        if self.calls >= self.after:
            raise self.exc
        return self.inner(types, src, dst, edge_vec)


@pytest.mark.parametrize(
    "exc, what",
    [
        (MemoryError(), "out of memory \\(CPU\\)"),
        (
            torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"),
            "out of GPU memory",
        ),
    ],
)
def test_out_of_memory(tmp_path, argon_xyz, lj_file, exc, what):
    pot = Potential(
        _OutOfMemory(17, exc),  # call k + 1 ends step k: fails inside step 16
        kind="lj",
        type_map=["Ar"],
        cutoff=8.5,
        config={"epsilon": 0.0104, "sigma": 3.4, "cutoff": 8.5, "r_on": 7.0},
        dtype="float64",
    )
    with pytest.raises(ResourceExhaustedError, match=f"step 16: {what} .*32 atoms") as info:
        run(config(tmp_path, argon_xyz, lj_file), potential=pot, console=quiet(tmp_path))
    assert "last good checkpoint: step 10" in str(info.value)
    assert read_checkpoint(tmp_path / "c.ckpt").step == 10
    assert frames(tmp_path / "t.h5") == [0, 5, 10, 15]  # the waiting frame is written too
