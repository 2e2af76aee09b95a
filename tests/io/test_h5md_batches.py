"""The batch writer with image flags and a committee's deviations: positions folded on disk,
unwrapped when read, through batches, a resume (frames dropped in place) and the repair of a
file a killed writer left flagged; a file from before image flags stays continuous."""

import shutil

import h5py
import numpy as np
import pytest
from test_h5md_outputs import frames_and_file

from mdband.io.h5md import H5MDReader, H5MDWriter
from mdband.io.h5md_format import LIBVER, MODEL_DEVI_OBSERVABLES
from mdband.io.repair import is_flagged


def _with_deviations(frames):
    rng = np.random.default_rng(7)
    for fr in frames:
        fr.observables.update({name: float(rng.uniform(0, 1)) for name in MODEL_DEVI_OBSERVABLES})
    return frames


def _header(path):
    with H5MDReader(path) as r:
        header = r.header()
    header.model_devi = True
    return header


def _check(path, frames, pbc):
    periodic = np.asarray(pbc)
    with h5py.File(path, "r") as f:  # a plain open: the file is closed and clean
        part = f["particles/all"]
        assert part["image/value"].shape == (len(frames), 6, 3)
        for k, fr in enumerate(frames):
            pos = part["position/value"][k]
            frac = np.linalg.solve(fr.cell.T, pos.T).T
            assert np.all(frac[:, periodic] >= -1e-12) and np.all(frac[:, periodic] < 1 + 1e-12)
            for name in MODEL_DEVI_OBSERVABLES:
                assert f[f"observables/{name}/value"][k] == fr.observables[name]
    with H5MDReader(path) as r:
        assert list(r.steps) == [fr.step for fr in frames]
        assert r.header().model_devi
        for got, want in zip(r, frames):
            np.testing.assert_allclose(got.positions, want.positions, rtol=0, atol=1e-12)
            for name in MODEL_DEVI_OBSERVABLES:
                assert got.observables[name] == want.observables[name]


@pytest.mark.parametrize("route", ["clean", "flagged"])
@pytest.mark.parametrize("pbc", [(True, True, True), (True, False, True)])
def test_batches_resume_and_repair_keep_images_and_deviations(tmp_path, route, pbc):
    frames = _with_deviations(frames_and_file(tmp_path / "ref.h5", pbc, n=6))
    path = tmp_path / "t.h5"
    w = H5MDWriter.create(path, _header(tmp_path / "ref.h5"), batch_seconds=1e9)
    for fr in frames[:3]:
        w.append(fr)
    w.flush()  # one batch of three frames
    for fr in frames[3:5]:
        w.append(fr)
    w.close()  # a second batch of two
    _check(path, frames[:5], pbc)
    if route == "flagged":  # what a writer killed inside a batch leaves
        live = tmp_path / "live.h5"
        shutil.copy(path, live)
        with h5py.File(live, "r+", libver=LIBVER) as f:
            f.swmr_mode = True
            shutil.copy(live, path)
        assert is_flagged(path)
    with H5MDWriter.resume(path, frames[2].step, batch_seconds=1e9) as w:
        assert w.written == (3, frames[2].step)
        w.append(frames[5])
    _check(path, [*frames[:3], frames[5]], pbc)


def test_file_without_image_flags_stays_continuous(tmp_path):
    frames = frames_and_file(tmp_path / "ref.h5", n=4)
    path = tmp_path / "t.h5"
    with H5MDWriter.create(path, _header(tmp_path / "ref.h5")) as w:
        for fr in frames[:2]:
            w.append(fr)
    with h5py.File(path, "r+") as f:  # as a writer from before image flags left it
        part = f["particles/all"]
        part["position/value"][:2] = [fr.positions for fr in frames[:2]]
        del part["image"]
    with H5MDWriter.resume(path, frames[1].step) as w:
        w.append(frames[3])
    with h5py.File(path, "r") as f:
        assert "image" not in f["particles/all"]
        np.testing.assert_allclose(
            f["particles/all/position/value"][2], frames[3].positions, rtol=0, atol=1e-12
        )
    with H5MDReader(path) as r:
        for got, want in zip(r, [*frames[:2], frames[3]]):
            np.testing.assert_allclose(got.positions, want.positions, rtol=0, atol=1e-12)
