"""Where a user-level call spends its time outside the model step (host work, syncs, the list).

Models: deepmd-kit's default DPA4 config and DPA4-Mini (:mod:`benchmarks.harness.models`),
random weights, float32, CUDA graphs as by default; system: rattled diamond of 8·n³ atoms. Per
config and size:

* ``call_ms``: ``Potential.evaluate`` with numpy in and out (the neighbour list built inside);
* ``model_step_ms``: the same call with device tensors and a list built once outside (labelled:
  it leaves the list out);
* ``list_ms`` / ``list_device_cell_ms``: the GPU cell list alone, with the host cell given
  (what ``evaluate`` does) and with only the device cell (one more synchronisation);
* ``list_ops``: one profiled list build, the torch ops of most host time (count, µs);
* ``call_python``: cProfile of ``--calls`` user calls, the functions of most own host time (µs
  per call; blocking copies and synchronisations show up in the op that waits).

    python -m benchmarks.experiments.gpu_overhead [--configs default mini] [--sizes 4 8]

One record per config and size (kind ``overhead``).
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats

import torch

from benchmarks import harness


def list_ops(dev, fn, rows: int) -> list:
    """The torch ops of most host time in one call of ``fn``: (name, count, µs)."""
    events = harness.profiling.profile(fn, dev).key_averages()
    ev = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)
    return [[e.key[:50], e.count, round(e.self_cpu_time_total, 1)] for e in ev[:rows]]


def call_python(fn, calls: int, rows: int) -> list:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    st = pstats.Stats(prof)
    items = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:rows]
    out = []
    for (path, line, name), (_, ncalls, tottime, cumtime, _) in items:
        where = f"{os.path.basename(path)}:{line}({name})"
        out.append(
            [
                where[:70],
                ncalls / calls,
                round(1e6 * tottime / calls, 1),
                round(1e6 * cumtime / calls, 1),
            ]
        )
    return out


def measure(pot, dev, n: int, args) -> dict:
    """The row of one size (see the module docstring)."""
    atoms = harness.diamond(n)
    pos, cell, sym = atoms.positions, atoms.cell.array, atoms.get_chemical_symbols()
    pos_t, cell_t = torch.tensor(pos, device=dev), torch.tensor(cell, device=dev)
    nl = pot.neighbour_list()
    row = {"atoms": len(atoms)}
    clock = harness.timer.timer(dev)

    row["call_ms"] = clock.measure(
        lambda: pot.evaluate(pos, cell, True, sym), args.repeat, args.warmup
    ).ms
    graph = nl.edges(pos_t, cell_t, True, host_cell=cell)
    row["edges"] = graph.n_edges
    row["model_step_ms (list prebuilt)"] = clock.measure(
        lambda: pot.evaluate(pos_t, cell_t, True, sym, graph=graph), args.repeat, args.warmup
    ).ms
    row["list_ms"] = clock.measure(
        lambda: nl.edges(pos_t, cell_t, True, host_cell=cell), args.repeat, args.warmup
    ).ms
    row["list_device_cell_ms"] = clock.measure(
        lambda: nl.edges(pos_t, cell_t, True), args.repeat, args.warmup
    ).ms
    row["list_ops"] = list_ops(
        dev, lambda: nl.edges(pos_t, cell_t, True, host_cell=cell), args.rows
    )
    row["call_python"] = call_python(
        lambda: pot.evaluate(pos, cell, True, sym), args.calls, args.rows
    )
    return row


def main(argv=None) -> None:
    ap = harness.parser(
        "experiments.gpu_overhead",
        __doc__,
        device="cuda",
        configs=["default", "mini"],
        sizes=[4, 8],
        repeat=20,
        warmup=2,
        tiny=False,
    )
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--rows", type=int, default=25)
    args = ap.parse_args(argv)
    dev = args.device
    results = harness.Results("experiments.gpu_overhead", args.out, vars(args), echo=False)
    for name in args.configs:
        cfg = harness.models.config("tiny" if args.tiny else name)
        pot = harness.models.potential(cfg, seed=0, gain=0.5, device=dev, dtype="float32")
        pot.neighbour_backend = "cell_list"  # CUDA's default; on a CPU run the same code path
        for n in args.sizes:
            row = measure(pot, dev, n, args)
            results.add("overhead", config=name, size=n, **row)
            head = {k: v for k, v in row.items() if not isinstance(v, list)}
            print(json.dumps({f"overhead {name}": head}), flush=True)
            print("  list ops (name, count, host µs):")
            for r in row["list_ops"]:
                print(f"    {r[0]:50s} {r[1]:4d} {r[2]:9.1f}")
            print("  call, python (function, calls/call, own µs, cumulative µs):")
            for r in row["call_python"]:
                print(f"    {r[0]:70s} {r[1]:6.1f} {r[2]:9.1f} {r[3]:9.1f}")
        del pot


if __name__ == "__main__":
    main()
