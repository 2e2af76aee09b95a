"""Runaway dynamics stop the run (step, reason, last checkpoint kept); absurd timesteps are
refused at start."""

import math

import h5py
import numpy as np
import pytest
from run_helpers import argon_config, quiet

from mdband.io.checkpoint import read_checkpoint
from mdband.md import ConfigError, RunConfig, SimulationDivergedError, run
from mdband.md.guards import RunawayGuard


def config(tmp_path, argon_xyz, lj_file, **kw):
    base = dict(temperature=3000.0, steps=60, seed=4, checkpoint=str(tmp_path / "c.ckpt"), log=None)
    return argon_config(tmp_path, argon_xyz, lj_file, "t", **{**base, **kw})


def test_long_timestep_is_stopped(tmp_path, argon_xyz, lj_file, lj):
    """The issue's case: 200 fs at 3,000 K used to 'finish' at 3e7 K with atoms 0.3 Å apart."""
    c = config(tmp_path, argon_xyz, lj_file, timestep=200.0, allow_unusual_timestep=True)
    with pytest.raises(SimulationDivergedError) as info:
        run(c, potential=lj, console=quiet(tmp_path))
    msg = str(info.value)
    # stopped by the temperature guard at the first sample (step 5), or before it, at a step
    # whose atoms flew beyond the coordinate range the neighbour list accepts
    step = int(msg.split("run stopped at step ")[1].split(":")[0])
    assert 0 < step <= 5
    assert "exceeds max_temperature 30000 K" in msg or "the atoms flew apart" in msg
    assert "last good checkpoint: step 0" in msg
    assert read_checkpoint(tmp_path / "c.ckpt").step == 0
    with h5py.File(tmp_path / "t.h5", "r") as f:  # closed, holding only the good frame
        assert list(f["particles/all/position/step"][()]) == [0]


def test_collapsing_atoms_are_stopped(tmp_path, argon_xyz, lj_file, lj):
    # argon neighbours are ~3.7 Å apart: a 3.3 Å guard trips on the first close encounter
    c = config(tmp_path, argon_xyz, lj_file, guard_distance=3.3, max_temperature=0.0)
    with pytest.raises(SimulationDivergedError, match=r"closer than guard_distance 3.3 Å") as info:
        run(c, potential=lj, console=quiet(tmp_path))
    step = int(str(info.value).split("step ")[1].split(":")[0])
    assert step % 5 == 0 and step > 0  # found at a sampling step
    ck = read_checkpoint(tmp_path / "c.ckpt")
    assert ck.step < step and f"last good checkpoint: step {ck.step}" in str(info.value)


def test_default_guards_leave_normal_runs_alone(tmp_path, argon_xyz, lj_file, lj):
    res = run(config(tmp_path, argon_xyz, lj_file, temperature=300.0), potential=lj)
    assert res.final_step == 60


@pytest.mark.parametrize(
    "temperature, max_temperature, limit",
    [(300.0, None, 10_000.0), (3000.0, None, 30_000.0), (300.0, 500.0, 500.0), (300, 0, math.inf)],
)
def test_max_temperature_default(temperature, max_temperature, limit):
    c = RunConfig(
        structure="x.xyz",
        model="m.mdband",
        temperature=temperature,
        max_temperature=max_temperature,
    )
    assert RunawayGuard.from_config(c).max_temperature == limit


@pytest.mark.parametrize("timestep", [1e12, 200.0, 20.0, 0.01, 1e-300])
def test_absurd_timesteps_are_refused(timestep):
    with pytest.raises(ConfigError, match="outside 0.01-20 fs.*allow_unusual_timestep"):
        RunConfig(structure="x.xyz", model="m.mdband", timestep=timestep)
    RunConfig(structure="x.xyz", model="m.mdband", timestep=timestep, allow_unusual_timestep=True)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # ASE's integrators divide by ~0
@pytest.mark.parametrize("ensemble", ["nve", "nvt-nhc", "npt-mtk"])
def test_tiny_timestep_gives_one_line_not_a_traceback(tmp_path, argon_xyz, lj_file, lj, ensemble):
    c = config(
        tmp_path, argon_xyz, lj_file, ensemble=ensemble, timestep=1e-300, steps=10,
        allow_unusual_timestep=True, trajectory=None, checkpoint=None,
    )  # fmt: skip
    try:
        res = run(c, potential=lj, console=quiet(tmp_path))
    except SimulationDivergedError as exc:  # the integrator cannot work with it: one line
        assert "integrator failed" in str(exc) or "NaN" in str(exc)
    else:
        assert res.final_step == 10 and np.all(np.isfinite(res.atoms.get_positions()))


@pytest.mark.parametrize(
    "setting, value, message",
    [("max_temperature", -1.0, "max_temperature must be >= 0"), ("guard_distance", -0.1, ">= 0")],
)
def test_guard_settings_are_validated(setting, value, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(structure="x.xyz", model="m.mdband", **{setting: value})
