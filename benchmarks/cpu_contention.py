"""``mdband run`` on the CPU with 1 and 2 torch threads, alone and while another process keeps
a core busy: how the thread count and OpenMP's wait policy hold up when the cores are shared.

Each case runs the README's quick start (``examples/builtin-emt``: 2048 Cu-Ni atoms, the
built-in model, NVT, float32, skin 0.5 Å) for a few steps in a fresh process and reads the
steady time per step from the run's summary (after its first 3 steps). Cases alternate, one
repeat of every case after the other, so a change in the machine's load spreads over all of
them; the load average is recorded beside every run.

    python -m benchmarks.cpu_contention --steps 8 --repeat 3 --out contention.jsonl

``--policies`` lists OpenMP wait policies to compare (``default`` leaves ``OMP_WAIT_POLICY``
as mdband sets it, ``active`` and ``passive`` set it for the run); ``--busy`` the number of
busy-loop processes started beside the run in the contended cases (one per core to hold).
One JSON line per run (kind ``run``), then one per case with the median (kind ``median``).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

try:  # python -m benchmarks.cpu_contention, or imported
    from benchmarks import harness
except ModuleNotFoundError as exc:  # python benchmarks/cpu_contention.py: the harness beside it
    if exc.name != "benchmarks":
        raise
    import harness

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "builtin-emt"


def busy_loops(n: int) -> list[subprocess.Popen]:
    """``n`` processes that each keep one core busy until killed."""
    code = "while True:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def one_run(work: Path, threads: int, policy: str, steps: int, reps: int) -> dict:
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy.upper()
    cmd = [
        sys.executable,
        "-m",
        "mdband.cli",
        "run",
        "--config",
        str(work / "run.toml"),
        "--model",
        "builtin:emt-cuni",
        "--steps",
        str(steps),
        "--threads",
        str(threads),
        "--no-progress",
        "--overwrite",
    ]
    load = os.getloadavg()[0]
    proc, t = harness.once(
        lambda: subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=3600)
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    times = harness.commands.run_summary(proc.stdout)
    return {
        "threads": threads,
        "policy": policy,
        "ms_per_step": times.get("steady_step_ms", times.get("step_ms")),
        "ms_per_step_all": times.get("step_ms"),
        "wall_s": t.ms / 1e3,
        "cpu_s": t.median("cpu") / 1e3,
        "load_1min": load,
    }


def prepare(work: Path, reps: int) -> None:
    subprocess.run(
        [sys.executable, str(EXAMPLE / "make_structure.py"), "--reps", str(reps)],
        cwd=work,
        check=True,
        capture_output=True,
    )
    (work / "run.toml").write_text((EXAMPLE / "run.toml").read_text())


def main(argv=None) -> list[dict]:
    ap = harness.parser("cpu_contention", __doc__, threads=[1, 2], repeat=3)
    ap.add_argument("--steps", type=int, default=8, help="steps per run (the first 3 warm up)")
    ap.add_argument("--reps", type=int, default=8, help="cubic cells per axis (8: 2048 atoms)")
    ap.add_argument(
        "--policies",
        nargs="+",
        default=["default", "active", "passive"],
        choices=["default", "active", "passive"],
        help="OpenMP wait policies to compare",
    )
    ap.add_argument("--busy", type=int, default=1, help="busy-loop processes when contended")
    args = ap.parse_args(argv)
    results = harness.Results("cpu_contention", args.out, vars(args))
    cases = [(c, t, p) for c in (False, True) for t in args.threads for p in args.policies]
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
                runs.append(results.add("run", **r))
    for contended, t, p in cases:
        sel = [
            r["ms_per_step"]
            for r in runs
            if (r["contended"], r["threads"], r["policy"]) == (contended, t, p)
        ]
        results.add(
            "median",
            contended=contended,
            threads=t,
            policy=p,
            median_ms_per_step=statistics.median(sel),
            runs=len(sel),
        )
    return results.of("median")


if __name__ == "__main__":
    main()
