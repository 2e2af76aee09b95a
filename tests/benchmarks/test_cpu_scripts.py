"""The CPU benchmark scripts run and check what they claim: both forms of the block maps agree
(benchmarks/one_product.py), and the CPU comparison times mdband with the environment it is
given (benchmarks/cpu_vs_deepmd.py, mdband alone)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WATER = ROOT / ".." / "shared" / "data" / "deepmd-water" / "data_0"
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_one_product_script_compares_both_forms(capsys):
    import one_product

    from mdband.so3 import storage as st

    before = st.ONE_PRODUCT_DEVICES
    one_product.main(["--device", "cpu", "--edges", "40", "--repeat", "1"])
    assert st.ONE_PRODUCT_DEVICES == before  # the switch is put back
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {(r["map"], r["shape"]) for r in rows} == {
        (m, s) for m in ("rotate_to_local", "rotate_back", "mixer") for s in ("default", "mini")
    }
    for r in rows:
        assert r["max_abs_difference"] < 1e-4, r
        assert r["one_product_fwd_bwd_ms"] > 0 and r["per_block_fwd_bwd_ms"] > 0


@pytest.mark.skipif(not WATER.is_dir(), reason="needs ../shared/data/deepmd-water")
def test_cpu_comparison_without_deepmd(tmp_path, capsys):
    import cpu_vs_deepmd

    out = tmp_path / "r.json"
    cpu_vs_deepmd.main(["--no-deepmd", "--models", "water", "--threads", "1", "--repeat", "1",
                        "--env", "MDBAND_HOST_MEMORY=system", "--json", str(out)])  # fmt: skip
    (row,) = json.loads(out.read_text())
    assert row["model"] == "water" and row["threads"] == 1 and "deepmd" not in row
    r = row["mdband"]
    assert r["atoms"] == 192 and r["median_ms"] > 0 and r["minor_faults_per_call"] >= 0
    assert "| water | data_0 | 192 | 1 |" in capsys.readouterr().out


def test_contention_script_times_every_case(tmp_path):
    """benchmarks/cpu_contention.py: one run per case (alone, beside a busy loop), the steady
    time per step read from the run's summary, medians per case."""
    import cpu_contention

    out = tmp_path / "c.json"
    medians = cpu_contention.main(["--steps", "7", "--repeat", "1", "--reps", "2",
                                   "--threads", "1", "--policies", "default",
                                   "--output", str(out)])  # fmt: skip
    assert [(m["contended"], m["threads"]) for m in medians] == [(False, 1), (True, 1)]
    runs = json.loads(out.read_text())["runs"]
    assert len(runs) == 2 and all(r["ms_per_step"] > 0 and r["load_1min"] >= 0 for r in runs)
    assert all(r["ms_per_step"] != r["ms_per_step_all"] for r in runs)  # the steady figure
