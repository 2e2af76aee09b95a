"""benchmarks/vs_deepmd.py's ``all`` on the CPU without deepmd-kit (a tiny model written as a
deepmd-kit checkpoint): its sub-command runs in a child process, whose records join the run's
file, and the table is read from them."""

from __future__ import annotations

from benchmarks import harness, vs_deepmd


def test_all_gathers_the_child_records(tmp_path, capsys):
    models = tmp_path / "checkpoints"
    models.mkdir()
    pot = harness.models.potential(harness.models.config("tiny"), dtype="float64")
    pot.save_deepmd(str(models / "mini.pt"))
    out = tmp_path / "vs.jsonl"
    vs_deepmd.main(
        [
            "all",
            "--device",
            "cpu",
            "--no-deepmd",
            "--checkpoints",
            str(models),
            "--configs",
            "mini",
            "--sizes",
            "1",
            "--md-size",
            "1",
            "--md-steps",
            "1",
            "--run-steps",
            "--repeat",
            "1",
            "--warmup",
            "0",
            "--out",
            str(out),
        ]
    )
    recs = harness.results.read(out, bench="vs_deepmd")
    assert len({r["run"] for r in recs}) == 1  # one run: the child's records re-stamped
    kinds = [r["kind"] for r in recs]
    assert kinds[0] == "start" and kinds.count("start") == 1
    assert {"settings", "checks", "call", "ase_md"} <= set(kinds)
    (checks,) = harness.results.read(out, kind="checks")
    assert checks["max_force_err_vs_fp64"] < 1e-5 and checks["replay_equals_eager"]
    (call,) = harness.results.read(out, kind="call")
    assert call["engine"] == "mdband" and call["atoms"] == 8 and call["call_ms"] > 0
    assert call["model_step_ms (list prebuilt)"] > 0 and call["edges"] > 0
    assert sorted(r["skin"] for r in harness.results.read(out, kind="ase_md")) == [0.0, 1.0]
    text = capsys.readouterr().out
    assert "== mdband vs deepmd-kit" in text and "8 atoms: mdband call" in text
