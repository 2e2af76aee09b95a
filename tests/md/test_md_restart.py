"""Exact restarts: 20 steps == 10 steps + resume to 20, bit for bit, for every ensemble."""

import shutil

import numpy as np
import pytest

from mdband.io.checkpoint import read_checkpoint
from mdband.io.h5md import H5MDReader
from mdband.md import RunConfig, run

CASES = {
    "nve": {"ensemble": "nve"},
    "nvt-langevin": {"ensemble": "nvt-langevin", "friction": 5.0},
    "nvt-bussi": {"ensemble": "nvt-bussi"},
    "nvt-nhc": {"ensemble": "nvt-nhc"},
    "npt-mtk-isotropic": {"ensemble": "npt-mtk", "barostat": "isotropic"},
    "npt-mtk-full": {"ensemble": "npt-mtk", "barostat": "full"},
    "nve-skin": {"ensemble": "nve", "skin": 1.0},
    "nvt-langevin-skin": {"ensemble": "nvt-langevin", "skin": 1.0},
    "npt-mtk-skin": {"ensemble": "npt-mtk", "barostat": "full", "skin": 0.5},
}


def config(tmp_path, argon_xyz, lj_file, name, steps, **kw):
    settings = dict(
        structure=str(argon_xyz),
        model=str(lj_file),
        temperature=80.0,
        pressure=0.2,
        timestep=5.0,
        tdamp=100.0,
        pdamp=500.0,
        seed=11,
        traj_every=5,
        checkpoint_every=5,
        trajectory=str(tmp_path / f"{name}.h5"),
        checkpoint=str(tmp_path / f"{name}.ckpt"),
        dtype="float64",
        progress=False,
        steps=steps,
    )
    settings.update(kw)
    return RunConfig(**settings)


def assert_same_state(a, b):
    for getter in ("get_positions", "get_momenta", "get_velocities"):
        x, y = getattr(a, getter)(), getattr(b, getter)()
        assert x.tobytes() == y.tobytes(), getter
    assert a.get_cell().array.tobytes() == b.get_cell().array.tobytes()


def assert_same_frames(path_a, path_b, steps):
    with H5MDReader(path_a) as ra, H5MDReader(path_b) as rb:
        np.testing.assert_array_equal(ra.steps, steps)
        np.testing.assert_array_equal(rb.steps, steps)
        for fa, fb in zip(ra, rb):
            for name in ("positions", "velocities", "forces", "cell"):
                assert getattr(fa, name).tobytes() == getattr(fb, name).tobytes(), name
            for name, value in fa.observables.items():
                np.testing.assert_array_equal(value, fb.observables[name])


@pytest.mark.parametrize("case", list(CASES))
def test_split_run_is_bitwise_identical(tmp_path, argon_xyz, lj_file, lj, case):
    kw = CASES[case]
    whole = run(config(tmp_path, argon_xyz, lj_file, "whole", 20, **kw), potential=lj)
    first = run(config(tmp_path, argon_xyz, lj_file, "split", 10, **kw), potential=lj)
    assert first.final_step == 10 and read_checkpoint(tmp_path / "split.ckpt").step == 10
    second = run(config(tmp_path, argon_xyz, lj_file, "split", 20, resume=True, **kw), potential=lj)
    assert second.first_step == 10 and second.final_step == 20
    assert_same_state(whole.atoms, second.atoms)
    assert_same_frames(tmp_path / "whole.h5", tmp_path / "split.h5", [0, 5, 10, 15, 20])
    # the dynamics did something (not a trivially frozen state)
    assert not np.array_equal(whole.atoms.get_positions(), first.atoms.get_positions())
    if kw["ensemble"] == "npt-mtk":
        with H5MDReader(tmp_path / "whole.h5") as r:
            assert len(set(r.observable("volume").tolist())) == 5  # the cell moves


def test_frames_after_the_checkpoint_are_dropped(tmp_path, argon_xyz, lj_file, lj):
    """A run that got past its last checkpoint (crash) resumes without duplicate frames."""
    kw = dict(ensemble="nvt-langevin", checkpoint_every=10)
    whole = run(config(tmp_path, argon_xyz, lj_file, "whole", 30, **kw), potential=lj)
    run(config(tmp_path, argon_xyz, lj_file, "split", 10, **kw), potential=lj)
    shutil.copy(tmp_path / "split.ckpt", tmp_path / "at10.ckpt")
    run(config(tmp_path, argon_xyz, lj_file, "split", 20, resume=True, **kw), potential=lj)
    with H5MDReader(tmp_path / "split.h5") as r:
        assert list(r.steps) == [0, 5, 10, 15, 20]
    shutil.copy(tmp_path / "at10.ckpt", tmp_path / "split.ckpt")  # as if killed after step 20
    resumed = run(
        config(tmp_path, argon_xyz, lj_file, "split", 30, resume=True, **kw), potential=lj
    )
    assert_same_state(whole.atoms, resumed.atoms)
    assert_same_frames(tmp_path / "whole.h5", tmp_path / "split.h5", [0, 5, 10, 15, 20, 25, 30])


def test_resume_at_the_end_is_a_no_op(tmp_path, argon_xyz, lj_file, lj):
    done = run(config(tmp_path, argon_xyz, lj_file, "r", 10), potential=lj)
    again = run(config(tmp_path, argon_xyz, lj_file, "r", 10, resume=True), potential=lj)
    assert again.first_step == again.final_step == 10
    assert_same_state(done.atoms, again.atoms)
    with H5MDReader(tmp_path / "r.h5") as r:
        assert list(r.steps) == [0, 5, 10]
