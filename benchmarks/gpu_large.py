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

    python benchmarks/gpu_large.py [--sizes 12 16 24 32] [--repeat 2] [--budget-check 8GB]
        [--cost] [--device cpu --check-size 2 --sizes]   (the last: the cost on a CPU)

Writes ``$OUT/gpu_large.json`` when ``OUT`` is set; exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time

import numpy as np
import torch
from ase.build import bulk

from mdband.config import SeZMConfig
from mdband.model import chunked
from mdband.model.chunking import plan_chunks, row_pointer
from mdband.model.factory import build_sezm
from mdband.potential import Potential
from mdband.testing.sezm import random_potential

CFG = SeZMConfig(type_map=("C",)).to_dict()
TINY = SeZMConfig(type_map=("C",), channels=8, n_radial=4, l_schedule=(1,), mixing_layers=1,
                  rcut=3.0).to_dict()  # fmt: skip
FORCE_TOL = 1e-5  # eV/Å, float32 against float64


def diamond(n: int, seed: int = 0):
    a = bulk("C", "diamond", a=3.567, cubic=True) * (n, n, n)
    a.rattle(0.03, seed=seed)
    return a


def make(cfg, sd, device, dtype, **options) -> Potential:
    model = build_sezm(cfg, sd, options)
    return Potential(model, kind="sezm", type_map=["C"], cutoff=cfg["rcut"], config=cfg,
                     device=device, dtype=dtype)  # fmt: skip


def sync(dev):
    if str(dev).startswith("cuda"):
        torch.cuda.synchronize()


def call(pot, atoms):
    return pot.evaluate(atoms.positions, atoms.cell.array, True, atoms.get_chemical_symbols())


def estimate(pot, atoms) -> tuple[float, int]:
    """(estimated unchunked peak in GB, edge count) of ``pot`` on ``atoms``."""
    g = pot.edges(atoms.positions, atoms.cell.array, True)
    like = torch.empty(0, dtype=pot.dtype, device=pot.device)
    est = pot.model.descriptor.memory_estimate(pot.dtype, like)
    return est.unchunked(len(atoms), g.n_edges) / 1e9, g.n_edges


def timed(dev, fn, repeat: int) -> float:
    """Median seconds of ``fn()`` over ``repeat`` calls after one warm-up."""
    ts = []
    for _ in range(1 + repeat):
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[1:])


def chunk_cost(cfg, sd, dev, atoms, n_chunks: int, repeat: int, profile_rows: int = 0) -> dict:
    """ms per energy + forces call of one edge list: unchunked, and chunked (1 and
    ``n_chunks`` chunks) with the last stage in one pass and recomputed; with
    ``profile_rows``, a profile of one unchunked call and one of each plan."""
    pot = make(cfg, sd, dev, "float32", memory_budget="off", cuda_graphs="off")
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
            row[f"{plan.n_chunks}_chunks_{label}_ms"] = 1e3 * timed(
                dev, lambda plan=plan: evaluate(plan), repeat
            )
            got = evaluate(plan).edge_grad
            row[f"max_dgrad_{plan.n_chunks}_{key}"] = float((got - ref).abs().max())

    row["unchunked_ms"] = 1e3 * timed(dev, evaluate, repeat)
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


def profiled(dev, fn):
    """torch.profiler's key averages of one call of ``fn`` after a warm-up call (CPU, and
    CUDA on a GPU)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.startswith("cuda") else [])
    fn()
    sync(dev)
    with profile(activities=acts) as prof:
        fn()
        sync(dev)
    return prof.key_averages()


def profile_call(dev, fn, rows: int) -> dict:
    """One profiled call (after a warm-up): the ``rows`` kernels and ops of most self device
    time, and the chunked stages' ranges (``chunked: ...``, device time under each), in ms."""
    events = profiled(dev, fn)

    def own(e):  # self time on the device (CPU time on a CPU run)
        return getattr(e, "self_device_time_total", 0) or e.self_cpu_time_total

    def under(e):
        return getattr(e, "device_time_total", 0) or e.cpu_time_total

    top = sorted(events, key=own, reverse=True)[:rows]
    ranges = sorted((e for e in events if e.key.startswith("chunked: ")), key=under, reverse=True)
    return {
        "total_ms": sum(own(e) for e in events) / 1e3,
        "top": [[e.key[:60], round(own(e) / 1e3, 3), e.count] for e in top],
        "stages": [[e.key, round(under(e) / 1e3, 3), e.count] for e in ranges],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[12, 16, 24])
    ap.add_argument("--check-size", type=int, default=8)
    ap.add_argument("--budget-check", default="4GB", help="budget of the chunked check call")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="small model (CPU smoke test)")
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
    args = ap.parse_args()
    cfg = TINY if args.tiny else CFG
    dev = args.device
    cuda = dev.startswith("cuda")
    ref = random_potential(cfg, seed=0, gain=0.5, device="cpu", dtype="float64")
    sd = {k: v.clone() for k, v in ref.model.state_dict().items()}
    out = {"checks": {}, "sizes": {}}
    if cuda:
        out["gpu"] = torch.cuda.get_device_name()
    ok = True

    # ---- checks on a cell every path fits
    atoms = diamond(args.check_size, seed=1)
    p32 = make(cfg, sd, dev, "float32", memory_budget="off")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    r32 = call(p32, atoms)
    peak = torch.cuda.max_memory_allocated() / 1e9 if cuda else float("nan")
    est, edges = estimate(p32, atoms)
    del p32
    pch = make(cfg, sd, dev, "float32", memory_budget=args.budget_check)
    rch = call(pch, atoms)
    del pch
    p64 = make(cfg, sd, dev, "float64", memory_budget="off", cuda_graphs="off")
    r64 = call(p64, atoms)
    del p64
    if cuda:
        torch.cuda.empty_cache()
    c = out["checks"]
    c["atoms"], c["edges"] = len(atoms), edges
    c["chunks"] = rch.chunks
    c["chunked_vs_unchunked_fp32_max_dF"] = float(np.abs(rch.forces - r32.forces).max())
    c["chunked_fp32_vs_fp64_max_dF"] = float(np.abs(rch.forces - r64.forces).max())
    c["unchunked_fp32_vs_fp64_max_dF"] = float(np.abs(r32.forces - r64.forces).max())
    c["energy_rel_chunked_vs_fp64"] = abs(rch.energy - r64.energy) / abs(r64.energy)
    c["unchunked_peak_gb"], c["estimate_gb"] = peak, est
    ok &= rch.chunks > 1 and c["chunked_fp32_vs_fp64_max_dF"] < FORCE_TOL
    print(json.dumps({"checks": c}), flush=True)

    # ---- what chunking costs (same edge list, plans fixed, no neighbour list in the timing)
    if args.cost:
        out["cost"] = chunk_cost(cfg, sd, dev, atoms, args.cost_chunks, args.repeat,
                                 args.cost_profile)  # fmt: skip
        print(json.dumps({"cost": out["cost"]}), flush=True)

    # ---- sizes, memory_budget auto (a fresh potential each: no graph pool of the last size)
    chunked.CACHE_GEOMETRY = args.cache_geometry
    out["cache_geometry"] = args.cache_geometry
    for n in args.sizes:
        atoms = diamond(n)
        row = {"atoms": len(atoms)}
        # eager: at these sizes launches cost nothing, and a CUDA-graph capture of a cell near
        # the memory limit only adds a second pool (StepGraphs would drop it and retry)
        pot = make(cfg, sd, dev, "float32", cuda_graphs="off")
        try:
            row["estimate_unchunked_gb"], row["edges"] = estimate(pot, atoms)
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            ts = []
            reps = args.repeat if len(atoms) < 500_000 else 1  # about 90 s per call at 10⁶
            for _ in range(1 + reps):  # the first call includes the capture or warm-up
                sync(dev)
                t0 = time.perf_counter()
                res = call(pot, atoms)
                sync(dev)
                ts.append(time.perf_counter() - t0)
            row["first_s"], row["s_per_call"] = ts[0], statistics.median(ts[1:])
            row["call_s"] = ts
            row["us_per_atom"] = 1e6 * row["s_per_call"] / len(atoms)
            row["chunks"] = res.chunks
            row["peak_gb"] = torch.cuda.max_memory_allocated() / 1e9 if cuda else None
            row["finite"] = bool(np.isfinite(res.forces).all())
            ok &= row["finite"]
        except torch.OutOfMemoryError as exc:
            row["error"] = f"OutOfMemoryError: {str(exc).splitlines()[0][:100]}"
        except Exception as exc:  # report and stop: larger cells fail the same way
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        out["sizes"][str(n)] = row
        print(json.dumps({"size": row}), flush=True)
        del pot
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        if "error" in row:
            break
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_large.json"), "w") as fh:
            json.dump(out, fh, indent=1)
    print("\n== large cells ==")
    print("checks:", json.dumps(out["checks"]))
    if "cost" in out:
        cost = dict(out["cost"])
        prof = cost.pop("profile", {})
        if "profile_1_chunk_geometry_cached" in cost:
            prof["1_chunk_geometry_cached"] = cost.pop("profile_1_chunk_geometry_cached")
        print("cost:", json.dumps(cost))
        for name, p in prof.items():  # where a call's device time goes, chunked or not
            print(f"profile {name}: {p['total_ms']:.1f} ms of device time")
            for key, ms, count in p["stages"] + p["top"][:12]:
                print(f"  {key:<62} {ms:9.2f} ms  x{count}")
    for row in out["sizes"].values():
        print(json.dumps(row))
    print("CHECKS", "PASSED" if ok else "FAILED")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
