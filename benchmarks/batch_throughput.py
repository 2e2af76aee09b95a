"""Structures per second of many small frames: mdband's batched ``Potential.evaluate_many``,
one-by-one ``Potential.evaluate``, and deepmd-kit's ``dp --pt test`` on the same model and frames.

Frames are water boxes at about 1 g/cm³ (molecules placed at random without clashes, random
orientations, fixed seed) of sizes drawn uniformly between ``--min-atoms`` and ``--max-atoms``
(multiples of 3). Two cases by default: ``mixed`` (1,000 frames of 9–198 atoms: the 8–200
range) and ``small`` (1,000 frames of 9–63 atoms: the issue's ≤ 64 acceptance case). The model
is the shared trained water checkpoint (``dpa4-water-smoke/pretrained.pt``) unless ``--model``.

    python -m benchmarks.batch_throughput [--device cpu|cuda] [--cases mixed small]
        [--frames 1000] [--threads 1] [--repeat 3] [--batch-atoms 1024 ...]
        [--neighbour-list vesin|cell_list]
        [--deepmd-python ${DEEPMD_REF_VENV:-<venv>}/bin/python | --no-deepmd] [--out FILE.jsonl]

Timed in this process after a warm-up (the model is loaded once; the neighbour lists are part
of every timing): ``batched`` (every ``--batch-atoms`` value), ``one_by_one``. ``dp test``
runs in a subprocess on the frames written as deepmd/npy systems (one per atom count, as it
needs), ``-n 0``; its wall time includes its start-up (imports, model load), which is measured
separately (``dp test`` of one frame) and also given subtracted. Every figure comes as wall
time and as CPU time (user + system, the commands' included; on a loaded machine the CPU time
of a one-thread run is the steadier figure; on CUDA only wall time means anything). ``mdband
test`` of the same systems is timed the same way, for a wall-clock comparison of the two
commands. One JSON line per case (kind ``case``), then a table. The ``start`` and ``end``
records give the load average before and after (a shared machine).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

try:  # python -m benchmarks.batch_throughput, or imported
    from benchmarks import harness
except ModuleNotFoundError as exc:  # python benchmarks/batch_throughput.py: the harness beside it
    if exc.name != "benchmarks":
        raise
    import harness

CASES = {"mixed": (9, 198), "small": (9, 63)}


def command_time(cmd: list[str], env: dict, repeat: int) -> dict:
    """Median wall and CPU seconds (the command's CPU time: user + system) of ``repeat`` runs
    of a command (its last lines of output on failure)."""

    def run():
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise RuntimeError(" | ".join(tail)[:300])

    try:
        t = harness.measure(run, "cpu", repeat=repeat, warmup=0)
    except RuntimeError as exc:
        return {"error": str(exc)}
    return {
        "wall_s": t.median() / 1e3,
        "walls_s": [w / 1e3 for w in t.wall],
        "cpu_s": t.median("cpu") / 1e3,
    }


def run_commands(args, model: str, systems: list[str], tmp: Path, n_frames: int) -> dict:
    """``dp --pt test`` and ``mdband test`` of the systems: wall time, start-up, net rate."""
    listing = tmp / "systems.txt"
    listing.write_text("\n".join(systems) + "\n")
    one = tmp / "one.txt"
    one.write_text(systems[0] + "\n")
    threads = str(args.threads)
    env = dict(
        os.environ,
        OMP_NUM_THREADS=threads,
        DP_INTRA_OP_PARALLELISM_THREADS=threads,
        DP_INTER_OP_PARALLELISM_THREADS="1",
    )
    out = {}
    if args.deepmd_python:
        dp = str(Path(args.deepmd_python).parent / "dp")
        base = [dp, "--pt", "test", "-m", model]
        full = command_time([*base, "-f", str(listing), "-n", "0"], env, args.repeat)
        start = command_time([*base, "-f", str(one), "-n", "1"], env, args.repeat)
        out["dp_test"] = _net(full, start, n_frames)
    mdb = [
        sys.executable,
        "-m",
        "mdband.cli",
        "-q",
        "test",
        "-m",
        model,
        "--device",
        args.device,
        "--dtype",
        args.dtype,
        "--threads",
        threads,
    ]
    full = command_time([*mdb, *systems], env, args.repeat)
    start = command_time([*mdb, systems[0], "-n", "1"], env, args.repeat)
    out["mdband_test"] = _net(full, start, n_frames)
    return out


def _net(full: dict, start: dict, n_frames: int) -> dict:
    if "error" in full or "error" in start:
        return {"error": full.get("error") or start.get("error")}
    net = max(full["wall_s"] - start["wall_s"], 1e-9)
    net_cpu = max(full["cpu_s"] - start["cpu_s"], 1e-9)
    return {
        "wall_s": full["wall_s"],
        "startup_s": start["wall_s"],
        "cpu_s": full["cpu_s"],
        "startup_cpu_s": start["cpu_s"],
        "net_frames_per_s": n_frames / net,
        "wall_frames_per_s": n_frames / full["wall_s"],
        "net_frames_per_cpu_s": n_frames / net_cpu,
    }


def _batched(pot, systems, limit):
    return lambda: pot.evaluate_many(systems, batch_atoms=limit)


def _one_by_one(pot, systems):
    def run():
        for p, c, b, s in systems:
            pot.evaluate(p, c, b, s)

    return run


def main(argv=None) -> list[dict]:
    ap = harness.parser(
        "batch_throughput", __doc__, device="cpu", dtype="float32", threads=1, repeat=3
    )
    ap.add_argument(
        "--model", default=str(harness.models.WATER_MODEL), help="deepmd-kit checkpoint (.pt)"
    )
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument(
        "--neighbour-list",
        default=None,
        choices=["auto", "vesin", "cell_list"],
        help="mdband's neighbour list (CUDA: the cell list by default)",
    )
    ap.add_argument(
        "--batch-atoms",
        type=int,
        nargs="+",
        default=[None],
        help="batched runs with these atom limits  [mdband's default]",
    )
    ap.add_argument(
        "--one-by-one-frames",
        type=int,
        default=None,
        help="time one by one on the first N frames only  [all]",
    )
    ap.add_argument("--deepmd-python", default=None, help="python of a deepmd-kit 3.2 venv")
    ap.add_argument("--no-deepmd", action="store_true", help="skip dp test")
    ap.add_argument("--no-commands", action="store_true", help="skip dp test and mdband test")
    args = ap.parse_args(argv)
    if args.no_deepmd:
        args.deepmd_python = None
    elif args.deepmd_python is None:
        venv = os.environ.get("DEEPMD_REF_VENV")
        if venv:
            args.deepmd_python = str(Path(venv) / "bin" / "python")
    import torch

    import mdband

    torch.set_num_threads(args.threads)
    pot = mdband.load_model(
        args.model, device=args.device, dtype=args.dtype, neighbour_list=args.neighbour_list
    )
    results = harness.Results("batch_throughput", args.out, vars(args))
    results.add(
        "setup",
        device=str(pot.device),
        threads=args.threads,
        model=args.model,
        neighbour_list=pot.neighbour_backend,
        cuda_graphs=pot.cuda_graphs,
    )
    clock = harness.timer.timer(pot.device)
    for case in args.cases:
        lo, hi = CASES[case]
        frames = harness.systems.water_frames(args.frames, lo, hi)
        systems = [(p, c, True, s) for p, c, s in frames]
        sizes = [len(s) for _, _, s in frames]
        row = {
            "case": case,
            "frames": len(frames),
            "atoms_min": min(sizes),
            "atoms_max": max(sizes),
            "atoms_total": sum(sizes),
        }
        pot.evaluate_many(systems[:50])  # warm-up (first calls, allocator)
        for p, c, _, s in systems[:10]:
            pot.evaluate(p, c, True, s)
        timed = [
            (f"batched_{limit or 'default'}", systems, _batched(pot, systems, limit))
            for limit in args.batch_atoms
        ]
        some = systems[: args.one_by_one_frames or len(systems)]
        timed.append(("one_by_one", some, _one_by_one(pot, some)))
        for label, done, fn in timed:
            t = clock.measure(fn, args.repeat, warmup=0)
            row[f"{label}_frames_per_s"] = len(done) / (t.min() / 1e3)
            row[f"{label}_frames_per_cpu_s"] = len(done) / (t.min("cpu") / 1e3)
            row[f"{label}_s"] = [w / 1e3 for w in t.wall]
        if not args.no_commands:
            with tempfile.TemporaryDirectory() as tmp:
                dirs = harness.systems.write_npy_systems(frames, Path(tmp), pot.type_map)
                row.update(run_commands(args, args.model, dirs, Path(tmp), len(frames)))
        results.add("case", **row)
    results.add("end", loadavg=list(os.getloadavg()))
    rows = results.of("case")
    _table(rows, args)
    return rows


def _table(rows, args) -> None:
    """Frames per second: wall time, and in brackets per CPU second."""
    print(
        "\n| case | frames | atoms | batched | one by one | speed-up | dp test, net | "
        "mdband test, net |  (frames/s wall (per CPU s))"
    )
    print("|---|---|---|---|---|---|---|---|")
    tag = args.batch_atoms[0] or "default"
    for r in rows:
        b, o = r[f"batched_{tag}_frames_per_s"], r["one_by_one_frames_per_s"]
        bc, oc = r[f"batched_{tag}_frames_per_cpu_s"], r["one_by_one_frames_per_cpu_s"]

        def cmd(x):
            if not x:
                return "-"
            if "error" in x:
                return "error"
            return f"{x['net_frames_per_s']:.1f} ({x['net_frames_per_cpu_s']:.1f})"

        print(
            f"| {r['case']} | {r['frames']} | {r['atoms_min']}-{r['atoms_max']} | "
            f"{b:.1f} ({bc:.1f}) | {o:.1f} ({oc:.1f}) | {b / o:.2f}x ({bc / oc:.2f}x) | "
            f"{cmd(r.get('dp_test'))} | {cmd(r.get('mdband_test'))} |"
        )


if __name__ == "__main__":
    main()
