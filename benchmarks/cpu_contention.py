"""``mdband run`` on the CPU with 1 and 2 torch threads, alone and while another process keeps
a core busy: how the thread count and OpenMP's wait policy hold up when the cores are shared.

Each case runs the README's quick start (``examples/builtin-emt``: 2048 Cu-Ni atoms, the
built-in model, NVT, float32, skin 0.5 Å) for a few steps in a fresh process and reads the
steady time per step from the run's summary (after its first 3 steps). Cases alternate, one
repeat of every case after the other, so a change in the machine's load spreads over all of
them; the load average is recorded beside every run.

    python benchmarks/cpu_contention.py --steps 8 --repeat 3 --output contention.json

``--policies`` lists OpenMP wait policies to compare (``default`` leaves ``OMP_WAIT_POLICY``
as mdband sets it, ``active`` and ``passive`` set it for the run); ``--busy`` the number of
busy-loop processes started beside the run in the contended cases (one per core to hold).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "builtin-emt"
STEADY = re.compile(r"after the first \d+ steps [^:]*: ([0-9.]+) ms per step")
TOTAL = re.compile(r"Time per step: ([0-9.]+) ms")


def busy_loops(n: int) -> list[subprocess.Popen]:
    """``n`` processes that each keep one core busy until killed."""
    code = "while True:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def one_run(work: Path, threads: int, policy: str, steps: int, reps: int) -> dict:
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy.upper()
    cmd = [sys.executable, "-m", "mdband.cli", "run", "--config", str(work / "run.toml"),
           "--model", "builtin:emt-cuni", "--steps", str(steps), "--threads", str(threads),
           "--no-progress", "--overwrite"]  # fmt: skip
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    steady = STEADY.search(proc.stdout)
    total = TOTAL.search(proc.stdout)
    return {
        "threads": threads,
        "policy": policy,
        "ms_per_step": float(steady.group(1)) if steady else float(total.group(1)),
        "ms_per_step_all": float(total.group(1)) if total else None,
        "wall_s": wall,
        "load_1min": load,
    }


def prepare(work: Path, reps: int) -> None:
    subprocess.run([sys.executable, str(EXAMPLE / "make_structure.py"), "--reps", str(reps)],
                   cwd=work, check=True, capture_output=True)  # fmt: skip
    (work / "run.toml").write_text((EXAMPLE / "run.toml").read_text())


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8, help="steps per run (the first 3 warm up)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of every case")
    ap.add_argument("--reps", type=int, default=8, help="cubic cells per axis (8: 2048 atoms)")
    ap.add_argument("--threads", default="1,2", help="torch thread counts to compare")
    ap.add_argument("--policies", default="default,active,passive")
    ap.add_argument("--busy", type=int, default=1, help="busy-loop processes when contended")
    ap.add_argument("--output", help="JSON file for the runs and the medians")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    policies = args.policies.split(",")
    cases = [(c, t, p) for c in (False, True) for t in threads for p in policies]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prepare(work, args.reps)
        for _ in range(args.repeat):
            for contended, t, p in cases:
                loops = busy_loops(args.busy) if contended else []
                try:
                    r = one_run(work, t, p, args.steps, args.reps)
                finally:
                    for loop in loops:
                        loop.kill()
                        loop.wait()
                r["contended"] = contended
                runs.append(r)
                print(json.dumps(r), flush=True)
    medians = []
    for contended, t, p in cases:
        sel = [r["ms_per_step"] for r in runs
               if (r["contended"], r["threads"], r["policy"]) == (contended, t, p)]  # fmt: skip
        medians.append(
            {"contended": contended, "threads": t, "policy": p,
             "median_ms_per_step": statistics.median(sel), "runs": len(sel)}
        )  # fmt: skip
    for m in medians:
        print(json.dumps(m))
    if args.output:
        Path(args.output).write_text(json.dumps({"runs": runs, "medians": medians}, indent=1))
    return medians


if __name__ == "__main__":
    main()
