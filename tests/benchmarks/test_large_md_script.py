"""benchmarks/gpu_large_md.py on the CPU (tiny model, 8 atoms): the first call's restart check
and run, then, as on a fresh machine, only the checkpoint, trajectory and log carried over and
the run resumed to its end."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_large_md.py"
ARGS = ["--tiny", "--device", "cpu", "--size", "1", "--steps", "4", "--split", "2",
        "--traj-every", "2", "--check-steps", "4"]  # fmt: skip


def phase(name: str, state: Path, out: Path, *extra: str) -> dict:
    env = dict(os.environ, OUT=str(out))
    p = subprocess.run([sys.executable, str(SCRIPT), "--phase", name, "--state", str(state),
                        *ARGS, *extra], capture_output=True, text=True, env=env,
                       timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "ALL CHECKS PASSED" in p.stdout
    return json.loads((out / f"gpu_large_md-{name}.json").read_text())


def test_two_calls_joined_by_a_restart(tmp_path):
    state, out1, out2 = tmp_path / "state", tmp_path / "out1", tmp_path / "out2"
    out1.mkdir(), out2.mkdir()
    kept = {f: (state / f) for f in ("run.ckpt", "run.h5", "run.log")}
    first = phase("start", state, out1, "--part-bytes", "20000")  # the trajectory in parts
    assert first["restart_check"]["state_bitwise"] and first["restart_check"]["frames_bitwise"]
    names = sorted(p.name for p in out1.iterdir() if p.suffix != ".json")
    assert "run.h5.part0" in names and "run.h5.part1" in names and "run.h5" not in names
    assert all(p.stat().st_size <= 20000 for p in out1.iterdir() if ".part" in p.name)
    sums = {f: hashlib.sha256(p.read_bytes()).hexdigest() for f, p in kept.items()}
    shutil.rmtree(state)  # the next machine has only what came back, joined here
    p = subprocess.run([sys.executable, str(SCRIPT), "--join", str(out1), "--state", str(state)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert {f: hashlib.sha256(q.read_bytes()).hexdigest() for f, q in kept.items()} == sums
    second = phase("finish", state, out2)
    assert second["run"]["rc"] == 0 and second["run"]["resume"]
    assert second["trajectory"] == {"steps": [0, 2, 4], "complete": True, "finite": True}
