"""The CPU benchmark scripts run and check what they claim: both forms of the block maps agree
(benchmarks/one_product.py), the CPU comparison times mdband with the environment it is given
(benchmarks/cpu_vs_deepmd.py, mdband alone), the contention runs read the steady time per step
(benchmarks/cpu_contention.py) and a committee's deviations equal separate evaluations'
(benchmarks/committee.py, tiny model)."""

from __future__ import annotations

import pytest

from benchmarks import harness

WATER = harness.models.WATER_DATA / "data_0"


def test_one_product_script_compares_both_forms(tmp_path):
    from benchmarks import one_product
    from mdband.so3 import storage as st

    before = st.ONE_PRODUCT_DEVICES
    out = tmp_path / "p.jsonl"
    rows = one_product.main(
        ["--device", "cpu", "--edges", "40", "--repeat", "1", "--warmup", "0", "--out", str(out)]
    )
    assert st.ONE_PRODUCT_DEVICES == before  # the switch is put back
    assert rows == harness.results.read(out, kind="product")
    assert {(r["map"], r["shape"]) for r in rows} == {
        (m, s) for m in ("rotate_to_local", "rotate_back", "mixer") for s in ("default", "mini")
    }
    for r in rows:
        assert r["max_abs_difference"] < 1e-4, r
        assert r["one_product_fwd_bwd_ms"] > 0 and r["per_block_fwd_bwd_ms"] > 0


@pytest.mark.skipif(not WATER.is_dir(), reason="needs ../shared/data/deepmd-water")
def test_cpu_comparison_without_deepmd(tmp_path, capsys):
    from benchmarks import cpu_vs_deepmd

    out = tmp_path / "r.jsonl"
    cpu_vs_deepmd.main(
        [
            "--no-deepmd",
            "--models",
            "water",
            "--threads",
            "1",
            "--repeat",
            "1",
            "--env",
            "MDBAND_HOST_MEMORY=system",
            "--out",
            str(out),
        ]
    )
    (row,) = harness.results.read(out, kind="run")
    assert row["model"] == "water" and row["threads"] == 1 and "deepmd" not in row
    r = row["mdband"]
    assert r["atoms"] == 192 and r["median_ms"] > 0 and r["minor_faults_per_call"] >= 0
    assert "| water | data_0 | 192 | 1 |" in capsys.readouterr().out


def test_contention_script_times_every_case(tmp_path):
    """One run per case (alone, beside a busy loop), the steady time per step read from the
    run's summary, medians per case."""
    from benchmarks import cpu_contention

    out = tmp_path / "c.jsonl"
    medians = cpu_contention.main(
        [
            "--steps",
            "7",
            "--repeat",
            "1",
            "--reps",
            "2",
            "--threads",
            "1",
            "--policies",
            "default",
            "--out",
            str(out),
        ]
    )
    assert [(m["contended"], m["threads"]) for m in medians] == [(False, 1), (True, 1)]
    runs = harness.results.read(out, kind="run")
    assert len(runs) == 2 and all(r["ms_per_step"] > 0 and r["load_1min"] >= 0 for r in runs)
    assert all(r["ms_per_step"] != r["ms_per_step_all"] for r in runs)  # the steady figure
    assert all(r["cpu_s"] > 0 for r in runs)  # the run's process, a child, is charged


def test_committee_script_checks_the_deviations(tmp_path):
    from benchmarks import committee

    out = tmp_path / "c.jsonl"
    rc = committee.main(
        [
            "--tiny",
            "--device",
            "cpu",
            "--size",
            "1",
            "--models",
            "2",
            "--repeat",
            "2",
            "--warmup",
            "1",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    (summary,) = harness.results.read(out, kind="summary")
    assert all(summary["checks"].values()) and summary["atoms"] == 8
    variants = harness.results.read(out, kind="variant")
    assert [v["variant"] for v in variants] == ["single", "separate", "committee", "calculator"]
    assert all(v["ms_per_frame"] >= v["min_ms_per_frame"] > 0 for v in variants)
