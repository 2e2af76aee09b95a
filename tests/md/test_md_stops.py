"""Runs that stop early: NaN forces (diverged) and SIGTERM (checkpoint, then resume)."""

import os
import signal

import h5py
import numpy as np
import pytest
import torch
from run_helpers import argon_config, quiet

from mdband.io.checkpoint import read_checkpoint
from mdband.io.h5md import H5MDReader
from mdband.md import RunInterrupted, SimulationDivergedError, run
from mdband.potential import Potential
from mdband.testing.lj import LennardJones


class Sabotaged(torch.nn.Module):
    """LJ that turns NaN, or sends this process SIGTERM, from its ``after``-th call on."""

    # the model contract (mdband.contract.ModelContract), as the LJ it wraps declares it
    settings = rotation_layout = spin = charge_spin_inputs = chunking = None
    rotation_layout_reason = ""
    direct_forces = float64_edges = zero_beyond_cutoff = False
    accepts_energy_rows = accepts_edge_csr = False
    exchange_width = LennardJones.exchange_width

    def __init__(self, after=None, action="nan"):
        super().__init__()
        self.inner = LennardJones(0.0104, 3.4, 8.5, 7.0)
        self.after, self.action, self.calls = after, action, 0

    def forward(self, types, src, dst, edge_vec, exchange=None):
        self.calls += 1
        e = self.inner(types, src, dst, edge_vec)
        if self.after is not None and self.calls == self.after and self.action == "term":
            os.kill(os.getpid(), signal.SIGTERM)
        if self.after is not None and self.calls >= self.after and self.action == "nan":
            e = e * float("nan")
        return e


def potential(after=None, action="nan"):
    config = {"epsilon": 0.0104, "sigma": 3.4, "cutoff": 8.5, "r_on": 7.0}
    return Potential(
        Sabotaged(after, action),
        kind="lj",
        type_map=["Ar"],
        cutoff=8.5,
        config=config,
        dtype="float64",
    )


def config(tmp_path, argon_xyz, lj_file, name, **kw):
    return argon_config(tmp_path, argon_xyz, lj_file, name, **kw)


def test_nan_stops_and_keeps_last_good_outputs(tmp_path, argon_xyz, lj_file):
    # call 1 is step 0; call k + 1 ends step k: NaN appears at the end of step 22
    with pytest.raises(SimulationDivergedError, match="step 22.*checkpoint: step 20"):
        run(
            config(tmp_path, argon_xyz, lj_file, "nan"),
            potential=potential(after=23),
            console=quiet(tmp_path),
        )
    ck = read_checkpoint(tmp_path / "nan.ckpt")
    assert ck.step == 20 and np.all(np.isfinite(ck.positions))
    with h5py.File(tmp_path / "nan.h5", "r") as f:  # closed cleanly: a plain open works
        assert list(f["particles/all/position/step"][()]) == [0, 5, 10, 15, 20]
    with H5MDReader(tmp_path / "nan.h5") as r:
        assert all(np.all(np.isfinite(fr.forces)) for fr in r)
    # and the run can be continued from the kept checkpoint
    res = run(
        config(tmp_path, argon_xyz, lj_file, "nan", resume=True),
        potential=potential(),
        console=quiet(tmp_path),
    )
    assert res.final_step == 40


def test_nan_at_start_writes_nothing(tmp_path, argon_xyz, lj_file):
    with pytest.raises(SimulationDivergedError, match="step 0.*no checkpoint"):
        run(config(tmp_path, argon_xyz, lj_file, "bad"), potential=potential(after=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ar.xyz", "lj.mdband"]


def test_sigterm_checkpoints_then_resume_is_exact(tmp_path, argon_xyz, lj_file):
    whole = run(
        config(tmp_path, argon_xyz, lj_file, "whole"),
        potential=potential(),
        console=quiet(tmp_path),
    )
    with pytest.raises(RunInterrupted, match="SIGTERM at step 13"):
        run(
            config(tmp_path, argon_xyz, lj_file, "cut"),
            potential=potential(14, "term"),
            console=quiet(tmp_path),
        )
    assert read_checkpoint(tmp_path / "cut.ckpt").step == 13
    again = run(
        config(tmp_path, argon_xyz, lj_file, "cut", resume=True),
        potential=potential(),
        console=quiet(tmp_path),
    )
    assert again.first_step == 13
    for getter in ("get_positions", "get_momenta"):
        assert getattr(whole.atoms, getter)().tobytes() == getattr(again.atoms, getter)().tobytes()
    with H5MDReader(tmp_path / "whole.h5") as a, H5MDReader(tmp_path / "cut.h5") as b:
        np.testing.assert_array_equal(a.steps, b.steps)
        for fa, fb in zip(a, b):
            assert fa.positions.tobytes() == fb.positions.tobytes()
    log = (tmp_path / "cut.log").read_text()
    assert log.count("Step") == 2 and "Resuming from" in log  # appended, not replaced
