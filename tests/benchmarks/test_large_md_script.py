"""benchmarks/gpu_large_md.py on the CPU (tiny model, 8 atoms): the first call's restart check
and run, then, as on a fresh machine, only the checkpoint, trajectory and log carried over and
the run resumed to its end."""

from __future__ import annotations

import hashlib
import shutil

from benchmarks import gpu_large_md, gpu_md, harness

ARGS = [
    "--tiny",
    "--device",
    "cpu",
    "--size",
    "1",
    "--steps",
    "4",
    "--split",
    "2",
    "--traj-every",
    "2",
    "--check-steps",
    "4",
]


def phase(name: str, state, returned, results, monkeypatch, *extra: str) -> dict:
    """One call of the script (``returned``: the device's output folder, ``OUT``); its
    records of the phase by kind."""
    monkeypatch.setenv("OUT", str(returned))
    argv = ["--phase", name, "--state", str(state), "--out", str(results), *ARGS, *extra]
    assert gpu_large_md.main(argv) == 0
    recs = harness.results.read(results)
    return {r["kind"]: r for r in recs if r.get("phase") == name}


def test_two_calls_joined_by_a_restart(tmp_path, monkeypatch):
    for name in ("CFG", "DEVICE"):  # the script sets them: put back after the test
        monkeypatch.setattr(gpu_md, name, getattr(gpu_md, name))
    monkeypatch.setattr(gpu_large_md, "STATE", gpu_large_md.STATE)
    state, out1, out2 = tmp_path / "state", tmp_path / "out1", tmp_path / "out2"
    results = tmp_path / "r.jsonl"
    out1.mkdir(), out2.mkdir()
    kept = {f: (state / f) for f in ("run.ckpt", "run.h5", "run.log")}
    first = phase("start", state, out1, results, monkeypatch, "--part-bytes", "20000")
    assert first["restart_check"]["state_bitwise"] and first["restart_check"]["frames_bitwise"]
    assert first["run"]["rc"] == 0 and not first["run"]["resume"]
    names = sorted(p.name for p in out1.iterdir())
    assert "run.h5.part0" in names and "run.h5.part1" in names and "run.h5" not in names
    assert all(p.stat().st_size <= 20000 for p in out1.iterdir() if ".part" in p.name)
    sums = {f: hashlib.sha256(p.read_bytes()).hexdigest() for f, p in kept.items()}
    shutil.rmtree(state)  # the next machine has only what came back, joined here
    assert gpu_large_md.main(["--join", str(out1), "--state", str(state)]) == 0
    assert {f: hashlib.sha256(q.read_bytes()).hexdigest() for f, q in kept.items()} == sums
    second = phase("finish", state, out2, results, monkeypatch)
    assert second["run"]["rc"] == 0 and second["run"]["resume"]
    traj = {k: second["trajectory"][k] for k in ("steps", "complete", "finite")}
    assert traj == {"steps": [0, 2, 4], "complete": True, "finite": True}
