"""benchmarks/grid_sweep.py under the Triton interpreter: its rows check the fused grid product
against float64 and leave the package's launch as it found it (speed is measured on a GPU)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mdband.kernels import _common as cm
from mdband.kernels import grid_product as gp

pytestmark = pytest.mark.skipif(
    not cm.TRITON_AVAILABLE or os.environ.get("TRITON_INTERPRET") != "1",
    reason="needs Triton's interpreter (TRITON_INTERPRET=1, as make test sets)",
)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_sweep_rows_check_every_launch():
    import grid_sweep

    before, shapes = {p: dict(v) for p, v in gp.LAUNCH.items()}, dict(gp.SHAPE_LAUNCH)
    rows = grid_sweep.main(["--device", "cpu", "--nodes", "3",
                            "--cases", "mini readout", "default ffn (s2)",
                            "--launches", "16x2", "64x4"])  # fmt: skip
    assert [r["launch"] for r in rows] == ["torch", "16x2", "64x4"] * 2
    assert all(r["rel_err_vs_fp64"] < 1e-5 for r in rows)
    assert gp.LAUNCH == before and gp.SHAPE_LAUNCH == shapes
