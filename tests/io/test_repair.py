"""Bounded recovery: a damaged flagged file gives one error within the stall limit, never a
hang; a clean file with uneven time series is detected and rewritten."""

import os
import shutil
import time

import h5py
import numpy as np
import pytest
from test_h5md import N, frame, header

from mdband.io.h5md import H5MDReader, H5MDWriter, TrajectoryError
from mdband.io.h5md_format import LIBVER
from mdband.io.repair import (
    inspect_trajectory,
    is_flagged,
    repair_trajectory,
    uneven_series,
)


def _flagged_copy(tmp_path, frames: int):
    """What a writer killed after ``frames`` frames of one long SWMR session leaves: a copy
    of the file taken while it is still open (superblock flagged, its EOF never updated)."""
    import mdband.io.h5md as h5md

    path, copy = tmp_path / "live.h5", tmp_path / "t.h5"
    rng = np.random.default_rng(0)
    H5MDWriter.create(path, header()).close()
    with h5py.File(path, "r+", libver=LIBVER) as f:
        f.swmr_mode = True
        datasets = h5md._series(f, list(h5md.OBSERVABLES))
        for row in range(frames):
            fr = frame(row, rng)
            image = np.zeros((N, 3), dtype=np.int32)  # positions as they are: no box crossing
            values = [fr.positions, fr.velocities, fr.forces, fr.cell, image]
            values += [fr.observables[k] for k in h5md.OBSERVABLES] + [fr.time, fr.step]
            for ds, v in zip(datasets, values):
                h5md._put_rows(ds, row, np.asarray([v]))
        shutil.copy(path, copy)
    return copy


def test_flagged_file_is_counted_and_repaired(tmp_path):
    path = _flagged_copy(tmp_path, 40)
    assert is_flagged(path)
    state = inspect_trajectory(path)
    assert state.flagged and state.frames == 40 and state.last_step == 39
    state = repair_trajectory(path, through_step=29)
    assert not state.flagged and (state.frames, state.last_step) == (30, 29)
    with h5py.File(path, "r") as f:
        assert f["particles/all/position/value"].shape == (30, N, 3)


@pytest.mark.parametrize("fraction", [0.2, 0.5])
def test_truncated_flagged_file_fails_fast(tmp_path, fraction):
    path = _flagged_copy(tmp_path, 200)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    before = path.read_bytes()
    t0 = time.monotonic()
    with pytest.raises(TrajectoryError, match=r"t.h5 (is damaged|.*truncated)"):
        with H5MDReader(path, stall_seconds=2):
            pass
    with pytest.raises(TrajectoryError, match="t.h5"):
        repair_trajectory(path, stall_seconds=2)
    assert time.monotonic() - t0 < 60  # HDF5 alone would retry for many minutes
    assert path.read_bytes() == before  # left as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["live.h5", "t.h5"]


def test_uneven_clean_file_is_rewritten(tmp_path):
    path = tmp_path / "t.h5"
    rng = np.random.default_rng(0)
    with H5MDWriter.create(path, header()) as w:
        for step in range(4):
            w.append(frame(step, rng))
    assert not uneven_series(path)
    with h5py.File(path, "r+") as f:  # a batch whose values landed but not its step
        f["particles/all/position/value"].resize(6, axis=0)
    assert uneven_series(path) and not is_flagged(path)
    assert repair_trajectory(path).frames == 4
    assert not uneven_series(path)


def test_missing_or_foreign_files(tmp_path):
    with pytest.raises(TrajectoryError, match="does not exist"):
        inspect_trajectory(tmp_path / "none.h5")
    (tmp_path / "junk.h5").write_bytes(b"junk" * 100)
    with pytest.raises(TrajectoryError, match="cannot read"):
        repair_trajectory(tmp_path / "junk.h5")
    assert os.listdir(tmp_path) == ["junk.h5"]
