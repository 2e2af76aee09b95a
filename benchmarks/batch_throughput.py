"""Structures per second of many small frames: mdband's batched ``Potential.evaluate_many``,
one-by-one ``Potential.evaluate``, and deepmd-kit's ``dp --pt test`` on the same model and frames.

Frames are water boxes at about 1 g/cm³ (molecules placed at random without clashes, random
orientations, fixed seed) of sizes drawn uniformly between ``--min-atoms`` and ``--max-atoms``
(multiples of 3). Two cases by default: ``mixed`` (1,000 frames of 9–198 atoms: the 8–200
range) and ``small`` (1,000 frames of 9–63 atoms: the issue's ≤ 64 acceptance case). The model
is the shared trained water checkpoint (``dpa4-water-smoke/pretrained.pt``) unless ``--model``.

    python3 benchmarks/batch_throughput.py [--device cpu|cuda] [--cases mixed small]
        [--frames 1000] [--threads 1] [--repeat 3] [--batch-atoms 1024 ...]
        [--neighbour-list vesin|cell_list]
        [--deepmd-python ${DEEPMD_REF_VENV:-<venv>}/bin/python | --no-deepmd] [--json FILE]

Timed in this process after a warm-up (the model is loaded once; the neighbour lists are part
of every timing): ``batched`` (every ``--batch-atoms`` value), ``one_by_one``. ``dp test``
runs in a subprocess on the frames written as deepmd/npy systems (one per atom count, as it
needs), ``-n 0``; its wall time includes its start-up (imports, model load), which is measured
separately (``dp test`` of one frame) and also given subtracted. Every figure comes as wall
time and as CPU time (user + system; on a loaded machine the CPU time of a one-thread run is
the steadier figure; on CUDA only wall time means anything). ``mdband test`` of the same
systems is timed the same way, for a wall-clock comparison of the two commands. One JSON line
per measurement, then a table. Prints the load average before and after (a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent / ".." / "shared" / "data"
WATER_MODEL = SHARED / "dpa4-water-smoke" / "pretrained.pt"
CASES = {"mixed": (9, 198), "small": (9, 63)}
OH = 0.9572  # Å
HOH = np.deg2rad(104.52)
VOLUME_PER_MOLECULE = 29.9  # Å³ at 1 g/cm³
MIN_APART = 1.6  # Å between atoms of different molecules (an H-bond's H…O is ~1.8)


def water_box(n_molecules: int, rng: np.random.Generator):
    """(positions, cell, species) of ``n_molecules`` waters in a periodic cube at ~1 g/cm³:
    molecules placed one by one at random (random orientations), each kept when its atoms are
    at least :data:`MIN_APART` from every other molecule's (minimum image)."""
    length = (n_molecules * VOLUME_PER_MOLECULE) ** (1.0 / 3.0)
    local = np.array([[0.0, 0.0, 0.0], [OH, 0.0, 0.0], [OH * np.cos(HOH), OH * np.sin(HOH), 0.0]])
    placed = np.zeros((0, 3))
    while len(placed) < 3 * n_molecules:
        q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        mol = rng.uniform(0.0, length, 3) + local @ q.T
        d = mol[:, None, :] - placed[None, :, :]
        d -= length * np.round(d / length)
        if len(placed) == 0 or np.sqrt((d * d).sum(-1)).min() >= MIN_APART:
            placed = np.concatenate([placed, mol])
    return placed, np.eye(3) * length, ["O", "H", "H"] * n_molecules


def make_frames(n_frames: int, min_atoms: int, max_atoms: int, seed: int = 7):
    rng = np.random.default_rng(seed)
    lo, hi = max(1, min_atoms // 3), max(1, max_atoms // 3)
    return [water_box(int(m), rng) for m in rng.integers(lo, hi + 1, n_frames)]


def write_systems(frames, root: Path, type_map) -> list[str]:
    """The frames as deepmd/npy systems, one per atom count (zero labels); their paths."""
    by_size: dict[int, list] = {}
    for pos, cell, species in frames:
        by_size.setdefault(len(species), []).append((pos, cell, species))
    out = []
    for n, group in sorted(by_size.items()):
        d = root / f"n{n:04d}"
        (d / "set.000").mkdir(parents=True)
        types = [type_map.index(s) for s in group[0][2]]
        (d / "type.raw").write_text("\n".join(map(str, types)) + "\n")
        (d / "type_map.raw").write_text("\n".join(type_map) + "\n")
        np.save(d / "set.000" / "coord.npy", np.stack([g[0].reshape(-1) for g in group]))
        np.save(d / "set.000" / "box.npy", np.stack([g[1].reshape(-1) for g in group]))
        np.save(d / "set.000" / "energy.npy", np.zeros(len(group)))
        np.save(d / "set.000" / "force.npy", np.zeros((len(group), 3 * n)))
        out.append(str(d))
    return out


def timed(fn, repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (this process, all threads) of ``repeat`` calls: on a loaded
    machine the CPU time of a one-thread run is the steadier figure."""
    walls, cpus = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return walls, cpus


def command_wall(cmd: list[str], env: dict, repeat: int) -> dict:
    """Median wall and CPU seconds (user + system of the child) of a command (its last lines of
    output on failure)."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if proc.returncode:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {"error": " | ".join(tail)[:300]}
    return {"wall_s": statistics.median(walls), "walls_s": walls, "cpu_s": statistics.median(cpus)}


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
        full = command_wall([*base, "-f", str(listing), "-n", "0"], env, args.repeat)
        start = command_wall([*base, "-f", str(one), "-n", "1"], env, args.repeat)
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
    full = command_wall([*mdb, *systems], env, args.repeat)
    start = command_wall([*mdb, systems[0], "-n", "1"], env, args.repeat)
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


def _sync(pot) -> None:
    if pot.device.type == "cuda":
        import torch

        torch.cuda.synchronize(pot.device)


def _batched(pot, systems, limit):
    def run():
        pot.evaluate_many(systems, batch_atoms=limit)
        _sync(pot)

    return run


def _one_by_one(pot, systems):
    def run():
        for p, c, b, s in systems:
            pot.evaluate(p, c, b, s)
        _sync(pot)

    return run


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda (mdband and dp test alike)")
    ap.add_argument("--model", default=str(WATER_MODEL), help="deepmd-kit checkpoint (.pt)")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
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
    ap.add_argument("--json", help="also write the results here")
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
    rows = []
    print(
        json.dumps(
            {
                "loadavg_start": os.getloadavg(),
                "device": str(pot.device),
                "threads": args.threads,
                "model": args.model,
                "neighbour_list": pot.neighbour_backend,
                "cuda_graphs": pot.cuda_graphs,
            }
        ),
        flush=True,
    )
    for case in args.cases:
        lo, hi = CASES[case]
        frames = make_frames(args.frames, lo, hi)
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
        for limit in args.batch_atoms:
            ts, cpu = timed(_batched(pot, systems, limit), args.repeat)
            row[f"batched_{limit or 'default'}_frames_per_s"] = len(frames) / min(ts)
            row[f"batched_{limit or 'default'}_frames_per_cpu_s"] = len(frames) / min(cpu)
            row[f"batched_{limit or 'default'}_s"] = ts
        some = systems[: args.one_by_one_frames or len(systems)]
        ts, cpu = timed(_one_by_one(pot, some), args.repeat)
        row["one_by_one_frames_per_s"] = len(some) / min(ts)
        row["one_by_one_frames_per_cpu_s"] = len(some) / min(cpu)
        row["one_by_one_s"] = ts
        if not args.no_commands:
            with tempfile.TemporaryDirectory() as tmp:
                dirs = write_systems(frames, Path(tmp), pot.type_map)
                row.update(run_commands(args, args.model, dirs, Path(tmp), len(frames)))
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"loadavg_end": os.getloadavg()}), flush=True)
    _table(rows, args)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
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
