"""benchmarks/experiments/grid_sweep.py under the Triton interpreter: its rows check the fused
grid product against float64 and leave the tuning table as they found it (speed is measured on a
GPU)."""

from __future__ import annotations

import os

import pytest

from mdband.kernels import _common as cm
from mdband.kernels import tuning

pytestmark = pytest.mark.skipif(
    not cm.TRITON_AVAILABLE or os.environ.get("TRITON_INTERPRET") != "1",
    reason="needs Triton's interpreter (TRITON_INTERPRET=1, as make test sets)",
)


def test_sweep_rows_check_every_launch(tmp_path):
    from benchmarks import harness
    from benchmarks.experiments import grid_sweep

    out = tmp_path / "g.jsonl"
    before = tuning.current()
    cases = ["mini readout", "default ffn (s2)"]
    argv = ["--device", "cpu", "--nodes", "3", "--cases", *cases, "--launches", "16x2", "64x4"]
    rows = grid_sweep.main([*argv, "--out", str(out)])
    assert [r["launch"] for r in rows] == ["torch", "16x2", "64x4"] * 2
    assert all(r["rel_err_vs_fp64"] < 1e-5 for r in rows)
    assert tuning.current() is before
    assert rows == harness.results.read(out, kind="row")
