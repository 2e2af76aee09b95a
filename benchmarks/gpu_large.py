"""Large cells on one GPU: chunked (memory-bounded) evaluation of the default DPA4 config.

Model: deepmd-kit's default DPA4 config (C 64, lmax 3, 3 blocks, 4 mixing layers, rcut 6 Å),
random weights, float32; system: rattled diamond of 8·n³ atoms. As a user calls it
(``Potential.evaluate`` with numpy in and out, GPU neighbour list included):

* checks (n = 8, 4,096 atoms, a cell both paths fit): forces of a chunked call (a budget that
  forces several chunks) against the unchunked float32 call and an unchunked float64 call on
  the GPU; the memory estimate against the measured peak of the unchunked call;
* cost (``--cost``): at the check size, ms per call unchunked and with 1 and ``--cost-chunks``
  chunks, the chunked last stage done in one pass (its backward in the forward, the default)
  and recomputed like the other stages: what chunking costs over the unchunked call;
* sizes: ms per call, peak GB, chunks and the estimate for every ``--sizes`` n (memory_budget
  "auto": unchunked when the estimate fits; CUDA graphs off), stopping at the first error.

    python -m benchmarks.gpu_large [--sizes 12 16 24 32] [--repeat 2] [--budget-check 8GB]
        [--cost] [--device cpu --check-size 2 --sizes]   (the last: the cost on a CPU)

Records (JSON lines): ``checks``, ``cost``, one ``size`` per cell; exits 1 if a check fails.
"""

# ruff: noqa: B023  (every timed lambda runs inside its own loop iteration)
from __future__ import annotations

import gc

import numpy as np
import torch

from mdband.model import chunked
from mdband.model.chunking import plan_chunks, row_pointer

try:  # python -m benchmarks.gpu_large, or imported
    from benchmarks import harness
except ModuleNotFoundError as exc:  # python benchmarks/gpu_large.py: the harness beside it
    if exc.name != "benchmarks":
        raise
    import harness

FORCE_TOL = 1e-5  # eV/Å, float32 against float64
make = harness.models.potential


def call(pot, atoms):
    return pot.evaluate(*harness.evaluate_args(atoms))


def estimate(pot, atoms) -> tuple[float, int]:
    """(estimated unchunked peak in GB, edge count) of ``pot`` on ``atoms``."""
    g = pot.edges(atoms.positions, atoms.cell.array, True)
    like = torch.empty(0, dtype=pot.dtype, device=pot.device)
    est = pot.model.descriptor.memory_estimate(pot.dtype, like)
    return est.unchunked(len(atoms), g.n_edges) / 1e9, g.n_edges


def chunk_cost(cfg, sd, dev, atoms, n_chunks: int, repeat: int, profile_rows: int = 0) -> dict:
    """ms per energy + forces call of one edge list: unchunked, and chunked (1 and
    ``n_chunks`` chunks) with the last stage in one pass and recomputed; with
    ``profile_rows``, a profile of one unchunked call and one of each plan."""
    pot = make(cfg, sd, device=dev, dtype="float32", memory_budget="off", cuda_graphs="off")
    clock = harness.timer.timer(dev)
    g = pot.edges(atoms.positions, atoms.cell.array, True)
    t = torch.as_tensor(pot.types_of(atoms.get_chemical_symbols()), device=pot.device)
    src = torch.as_tensor(g.src, device=pot.device)
    dst = torch.as_tensor(g.dst, device=pot.device)
    pos = torch.as_tensor(atoms.positions, device=pot.device)
    ev = g.edge_vectors(pos, torch.as_tensor(atoms.cell.array, device=pot.device))
    ptr, is_sorted = row_pointer(dst, len(atoms))
    plans = {1: plan_chunks(ptr, g.n_edges, is_sorted)}
    plans[n_chunks] = plan_chunks(ptr, -(-g.n_edges // n_chunks), is_sorted)
    row = {"atoms": len(atoms), "edges": g.n_edges}

    def evaluate(plan=None):
        return pot.evaluate_edges(t, src, dst, ev, plan=plan)

    def time_plans(label: str, key: str) -> None:
        for plan in plans.values():
            t = clock.measure(lambda plan=plan: evaluate(plan), repeat, 1)
            row[f"{plan.n_chunks}_chunks_{label}_ms"] = t.ms
            got = evaluate(plan).edge_grad
            row[f"max_dgrad_{plan.n_chunks}_{key}"] = float((got - ref).abs().max())

    row["unchunked_ms"] = clock.measure(evaluate, repeat, 1).ms
    ref = evaluate().edge_grad
    cached = chunked.CACHE_GEOMETRY
    try:
        for eager in (True, False):
            chunked.EAGER_FINAL_STAGE = eager
            time_plans("one_pass" if eager else "recomputed", str(int(eager)))
        chunked.EAGER_FINAL_STAGE = True
        chunked.CACHE_GEOMETRY = True  # the edge geometry built once per chunk, kept
        time_plans("geometry_cached", "cached")
        if profile_rows:
            row["profile_1_chunk_geometry_cached"] = profile_call(
                dev, lambda: evaluate(plans[1]), profile_rows
            )
    finally:
        chunked.EAGER_FINAL_STAGE, chunked.CACHE_GEOMETRY = True, cached
    if profile_rows:
        many = plans[n_chunks]
        calls = {"unchunked": None, "1_chunk": plans[1], f"{many.n_chunks}_chunks": many}
        row["profile"] = {
            name: profile_call(dev, lambda plan=plan: evaluate(plan), profile_rows)
            for name, plan in calls.items()
        }
    return row


def profile_call(dev, fn, rows: int) -> dict:
    """One profiled call (after a warm-up): the ``rows`` kernels and ops of most self device
    time, and the chunked stages' ranges (``chunked: ...``, device time under each), in ms."""
    prof = harness.profiling
    events = prof.profile(fn, dev).key_averages()
    ranges = sorted(
        (e for e in events if e.key.startswith("chunked: ")), key=prof.total_ms, reverse=True
    )
    return {
        "total_ms": sum(prof.self_ms(e) for e in events),
        "top": [[k[:60], ms, n] for k, ms, n in prof.top(events, rows)],
        "stages": [[e.key, round(prof.total_ms(e), 3), e.count] for e in ranges],
    }


def main(argv=None) -> int:
    ap = harness.parser(
        "gpu_large", __doc__, device="cuda", sizes=[12, 16, 24], repeat=2, tiny=False
    )
    ap.add_argument("--check-size", type=int, default=8)
    ap.add_argument("--budget-check", default="4GB", help="budget of the chunked check call")
    ap.add_argument("--cost", action="store_true", help="time chunked against unchunked")
    ap.add_argument("--cost-chunks", type=int, default=4)
    ap.add_argument(
        "--cache-geometry", action="store_true", help="the sizes with chunked.CACHE_GEOMETRY on"
    )
    ap.add_argument(
        "--cost-profile",
        type=int,
        default=0,
        metavar="ROWS",
        help="with --cost: profile one unchunked call and one of each plan (top ROWS)",
    )
    args = ap.parse_args(argv)
    results = harness.Results("gpu_large", args.out, vars(args))
    cfg = harness.models.config("tiny" if args.tiny else "default")
    dev = args.device
    sd = harness.models.random_weights(cfg, seed=0, gain=0.5)
    clock = harness.timer.timer(dev)
    ok = True

    # ---- checks on a cell every path fits
    atoms = harness.diamond(args.check_size, seed=1)
    p32 = make(cfg, sd, device=dev, dtype="float32", memory_budget="off")
    with harness.PeakMemory(dev) as mem:
        r32 = call(p32, atoms)
    est, edges = estimate(p32, atoms)
    del p32
    pch = make(cfg, sd, device=dev, dtype="float32", memory_budget=args.budget_check)
    rch = call(pch, atoms)
    del pch
    p64 = make(cfg, sd, device=dev, dtype="float64", memory_budget="off", cuda_graphs="off")
    r64 = call(p64, atoms)
    del p64
    empty_cache(dev)
    c = {"atoms": len(atoms), "edges": edges}
    c["chunks"] = rch.chunks
    c["chunked_vs_unchunked_fp32_max_dF"] = float(np.abs(rch.forces - r32.forces).max())
    c["chunked_fp32_vs_fp64_max_dF"] = float(np.abs(rch.forces - r64.forces).max())
    c["unchunked_fp32_vs_fp64_max_dF"] = float(np.abs(r32.forces - r64.forces).max())
    c["energy_rel_chunked_vs_fp64"] = abs(rch.energy - r64.energy) / abs(r64.energy)
    c["unchunked_peak_gb"], c["estimate_gb"] = mem.peak_gb, est
    ok &= rch.chunks > 1 and c["chunked_fp32_vs_fp64_max_dF"] < FORCE_TOL
    checks = results.add("checks", **c)

    # ---- what chunking costs (same edge list, plans fixed, no neighbour list in the timing)
    cost = None
    if args.cost:
        cost = chunk_cost(cfg, sd, dev, atoms, args.cost_chunks, args.repeat, args.cost_profile)
        results.add("cost", **cost)

    # ---- sizes, memory_budget auto (a fresh potential each: no graph pool of the last size)
    chunked.CACHE_GEOMETRY = args.cache_geometry
    for n in args.sizes:
        atoms = harness.diamond(n)
        row = {"size": n, "atoms": len(atoms), "cache_geometry": args.cache_geometry}
        # eager: at these sizes launches cost nothing, and a CUDA-graph capture of a cell near
        # the memory limit only adds a second pool (StepGraphs would drop it and retry)
        pot = make(cfg, sd, device=dev, dtype="float32", cuda_graphs="off")
        try:
            row["estimate_unchunked_gb"], row["edges"] = estimate(pot, atoms)
            reps = args.repeat if len(atoms) < 500_000 else 1  # about 90 s per call at 10⁶
            done = []
            with harness.PeakMemory(dev) as mem:
                # the first call (warm-up, kernel compilation) timed on its own
                first = clock.measure(lambda: call(pot, atoms), 1, 0)
                t = clock.measure(lambda: done.append(call(pot, atoms)), reps, 0)
            res = done[-1]
            row["first_s"], row["s_per_call"] = first.ms / 1e3, t.ms / 1e3
            row["call_s"] = [w / 1e3 for w in first.wall + t.wall]
            row["us_per_atom"] = 1e6 * row["s_per_call"] / len(atoms)
            row["chunks"] = res.chunks
            row["peak_gb"] = mem.peak_gb
            row["finite"] = bool(np.isfinite(res.forces).all())
            ok &= row["finite"]
        except torch.OutOfMemoryError as exc:
            row["error"] = f"OutOfMemoryError: {str(exc).splitlines()[0][:100]}"
        except Exception as exc:  # report and stop: larger cells fail the same way
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        results.add("size", **row)
        pot = None  # its memory goes before the next size's potential
        gc.collect()
        empty_cache(dev)
        if "error" in row:
            break
    print("\n== large cells ==")
    print("checks:", {k: v for k, v in checks.items() if k not in ("bench", "run", "kind")})
    if cost is not None:
        prof = cost.pop("profile", {})
        if "profile_1_chunk_geometry_cached" in cost:
            prof["1_chunk_geometry_cached"] = cost.pop("profile_1_chunk_geometry_cached")
        print("cost:", cost)
        for name, p in prof.items():  # where a call's device time goes, chunked or not
            print(f"profile {name}: {p['total_ms']:.1f} ms of device time")
            for key, ms, count in p["stages"] + p["top"][:12]:
                print(f"  {key:<62} {ms:9.2f} ms  x{count}")
    for row in results.of("size"):
        print({k: v for k, v in row.items() if k not in ("bench", "run", "kind")})
    print("CHECKS", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


def empty_cache(dev) -> None:
    """Give the CUDA allocator's cached blocks back (nothing on a CPU)."""
    if str(dev).startswith("cuda"):
        torch.cuda.empty_cache()


if __name__ == "__main__":
    raise SystemExit(main())
