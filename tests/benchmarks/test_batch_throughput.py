"""benchmarks/batch_throughput.py runs and measures what it claims: every mode timed on the
frames asked for, one record per case appended to --out (the frames themselves are
tests/benchmarks/test_harness.py's)."""

from __future__ import annotations

import pytest
import torch

from benchmarks import batch_throughput as bt
from benchmarks import harness


@pytest.mark.skipif(
    not harness.models.WATER_MODEL.is_file(), reason="needs ../shared/data (water model)"
)
def test_cpu_run_without_commands(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    argv = [
        "--cases",
        "small",
        "--frames",
        "6",
        "--repeat",
        "1",
        "--no-commands",
        "--batch-atoms",
        "64",
        "1024",
        "--out",
        str(out),
    ]
    old = torch.get_num_threads()
    try:
        rows = bt.main(argv)
    finally:
        torch.set_num_threads(old)
    (row,) = harness.results.read(out, kind="case")
    assert row == rows[0] and row["frames"] == 6 and row["atoms_max"] <= 63
    assert row["batched_64_frames_per_s"] > 0 and row["batched_1024_frames_per_s"] > 0
    assert row["one_by_one_frames_per_s"] > 0 and "dp_test" not in row
    assert row["batched_64_frames_per_cpu_s"] > 0 and row["one_by_one_frames_per_cpu_s"] > 0
    assert [r["kind"] for r in harness.results.read(out)] == ["start", "setup", "case", "end"]
    assert "| small | 6 |" in capsys.readouterr().out
