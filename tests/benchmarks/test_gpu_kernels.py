"""benchmarks/gpu_kernels.py under the Triton interpreter: its checks run and become records
(the full check and the timings are measured on a GPU)."""

from __future__ import annotations

import os

import pytest
import torch

from benchmarks import gpu_kernels, harness
from mdband.kernels import _common as cm

pytestmark = pytest.mark.skipif(
    not cm.TRITON_AVAILABLE or os.environ.get("TRITON_INTERPRET") != "1",
    reason="needs Triton's interpreter (TRITON_INTERPRET=1, as make test sets)",
)


def test_node_op_checks_are_recorded(tmp_path):
    out = tmp_path / "k.jsonl"
    argv = [
        "--device",
        "cpu",
        "--node-ops-only",
        "--check-edges",
        "20",
        "--check-nodes",
        "6",
        "--no-time",
        "--out",
        str(out),
    ]
    assert gpu_kernels.main(argv) == 0
    checks = harness.results.read(out, kind="check")
    assert {c["op"] for c in checks} == {"take_rows", "grid_product"}
    assert all(c["ok"] for c in checks)
    (summary,) = harness.results.read(out, kind="summary")
    assert summary["ok"] and summary["checks"] == len(checks)


def test_bench_on_the_cpu_times_one_call():
    calls = []
    t = gpu_kernels.bench(lambda: calls.append(torch.ones(3).sum()), torch.device("cpu"))
    assert len(calls) == 2 and len(t) == 3 and t[0] == t[1] == t[2] > 0  # one after one
