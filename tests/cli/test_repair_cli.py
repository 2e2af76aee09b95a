"""``mdband repair TRAJ``: a flagged trajectory becomes a clean file every reader opens."""

import shutil

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from mdband.cli import main
from mdband.io.h5md import Frame, H5MDWriter, TrajectoryHeader
from mdband.io.locks import OutputLock


def repair(*args):
    return CliRunner().invoke(main, ["repair", *map(str, args)])


def _trajectory(path, steps):
    header = TrajectoryHeader(
        species=np.array([18, 18]), masses=np.array([39.948] * 2), pbc=np.ones(3, bool)
    )
    rng = np.random.default_rng(0)
    with H5MDWriter.create(path, header) as w:
        for s in steps:
            w.append(Frame(s, s * 0.01, *(rng.normal(size=(2, 3)) for _ in range(3)), np.eye(3)))


def _flag(path):
    """The file as a writer killed inside a batch leaves it (HDF5's open-for-write flag)."""
    with h5py.File(path, "r+", libver=("v110", "v110")) as f:
        f.swmr_mode = True
        shutil.copy(path, path.with_name("copy.h5"))
    shutil.move(path.with_name("copy.h5"), path)


@pytest.fixture
def flagged(tmp_path):
    path = tmp_path / "t.h5"
    _trajectory(path, [0, 10, 20, 30])
    _flag(path)
    with pytest.raises(OSError, match="already open for write"):
        h5py.File(path, "r")
    return path


def test_repair_a_flagged_file(flagged):
    res = repair(flagged)
    assert res.exit_code == 0, res.output
    assert "rewrote a clean file with 4 frames, the last at step 30" in res.output
    with h5py.File(flagged, "r") as f:
        assert list(f["particles/all/position/step"][()]) == [0, 10, 20, 30]
    res = repair(flagged)
    assert res.exit_code == 0 and "nothing to do" in res.output


def test_repair_through_a_step(flagged):
    res = repair(flagged, "--through-step", 15)
    assert res.exit_code == 0, res.output
    with h5py.File(flagged, "r") as f:
        assert list(f["particles/all/position/step"][()]) == [0, 10]


def test_repair_refuses_a_file_being_written(flagged):
    before = flagged.read_bytes()
    with OutputLock(flagged, "trajectory"):
        res = repair(flagged)
    assert res.exit_code == 2 and "is being written by another process (PID" in res.stderr
    assert flagged.read_bytes() == before


@pytest.mark.parametrize("content", [b"", b"not an hdf5 file" * 10])
def test_repair_of_junk_is_one_line(tmp_path, content):
    (tmp_path / "t.h5").write_bytes(content)
    res = repair(tmp_path / "t.h5")
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.output
    assert "cannot read trajectory" in res.stderr
    res = repair(tmp_path / "missing.h5")
    assert res.exit_code == 2 and "does not exist" in res.stderr
