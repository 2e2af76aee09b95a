"""End-to-end GPU check and benchmark of the SeZM engine (energy + forces + virial per call).

Model: deepmd-kit's default DPA4 config (channels 64, lmax 3, 3 blocks, 4 mixing layers, rcut 6 Å,
random weights); system: a rattled diamond cell of 8·n³ atoms. For every variant (rotation layout
band/dense, kernels auto/torch, recompute on/off) it reports median ms per call (neighbour list
prebuilt, timed separately) and peak GPU memory, checks float32 GPU forces against a float64 CPU
reference, band against dense and CUDA-graph replays against eager calls, finds the largest cell
that fits, and profiles one eager call.

    python -m benchmarks.gpu_model [--sizes 4 8] [--largest 12 14 16 18 20 22 24] [--quick]

Records (JSON lines): ``checks``, one ``timing`` per (size, variant), ``md_like``,
``bucket_switch``, ``largest``, ``profile``; prints a table last, exits 1 if a check fails.
"""

# ruff: noqa: B023  (every timed lambda runs inside its own loop iteration)
from __future__ import annotations

import contextlib
import statistics

import numpy as np
import torch

from mdband.graph import build_edge_graph

try:  # python -m benchmarks.gpu_model, or imported
    from benchmarks import harness
except ModuleNotFoundError as exc:  # python benchmarks/gpu_model.py: the harness beside it
    if exc.name != "benchmarks":
        raise
    import harness

CFG = harness.models.config("default")
#: float32 GPU forces against the float64 CPU reference (eV/Å), the issue's acceptance bound
FORCE_TOL = 1e-5
diamond = harness.diamond


def make(sd, device, dtype, **options):
    return harness.models.potential(CFG, sd, device=device, dtype=dtype, **options)


def call(pot, atoms, graph):
    return pot.evaluate(*harness.evaluate_args(atoms), graph=graph)


def timed(pot, atoms, graph, repeat):
    """Median ms per call after two warm-up calls (with CUDA graphs: the eager first call and
    the capture), peak allocated GB over all calls (the capture's pool included) and the GB
    reserved at the end."""
    with harness.PeakMemory("cuda") as mem:
        t = harness.measure(lambda: call(pot, atoms, graph), "cuda", repeat, warmup=2)
    return t.ms, mem.peak_gb, torch.cuda.memory_reserved() / 1e9


def use_stack_launches(path) -> None:
    """The whole run with the linear launches of ``experiments.gpu_stack``'s last ``best``
    record in ``path`` (``tuning.override``, left when the script ends)."""
    from mdband.kernels import tuning

    best = harness.results.read(path, kind="best")[-1]["linear"]
    linear = dict(tuning.current().so2_stack.linear)
    linear.update(
        {
            p: tuning.LinearLaunch(edges=b["BE"], warps=b["warps"], stages=b["stages"])
            for p, b in best.items()
            if p in tuning.SPLIT_MODES
        }
    )
    contextlib.ExitStack().enter_context(tuning.override(so2_stack={"linear": linear}))
    print("so2_mix_layer launches:", linear, flush=True)


VARIANTS = {
    "band": dict(rotation_layout="band"),
    "band-eager": dict(rotation_layout="band", cuda_graphs="off"),
    "dense": dict(rotation_layout="dense"),
    "dense-eager": dict(rotation_layout="dense", cuda_graphs="off"),
    "band-torch": dict(rotation_layout="band", kernels="torch"),
    "dense-torch": dict(rotation_layout="dense", kernels="torch"),
    "band-recompute": dict(rotation_layout="band", recompute="all"),
    "band-recompute-stack": dict(rotation_layout="band", recompute="stack"),
    "band-ieee": dict(rotation_layout="band", stack_precision="ieee"),
}


def main(argv=None) -> int:
    ap = harness.parser("gpu_model", __doc__, sizes=[4, 8], repeat=5)
    ap.add_argument("--largest", type=int, nargs="*", default=[10, 12, 14, 16, 18, 20, 22, 24])
    ap.add_argument("--largest-variants", nargs="*", default=["band-recompute", "band", "dense"])
    ap.add_argument("--quick", action="store_true", help="leave the kernels=torch variants out")
    ap.add_argument("--stack-config", help="gpu_stack.jsonl whose best launches to use")
    ap.add_argument("--variants", nargs="*", help="subset of the variants to time")
    ap.add_argument("--profile-size", type=int, default=8, help="cell of the profile (n)")
    ap.add_argument("--md-variants", nargs="*", default=["band", "band-eager"])
    ap.add_argument("--md-size", type=int, default=4, help="cell of the MD-like sequence (n)")
    ap.add_argument("--md-steps", type=int, default=40)
    ap.add_argument("--switch-size", type=int, default=0, help="bucket-switch check cell (n)")
    args = ap.parse_args(argv)
    if args.stack_config:
        use_stack_launches(args.stack_config)
    results = harness.Results("gpu_model", args.out, vars(args))
    out = {"checks": {}, "largest": {}}
    sd = harness.models.random_weights(CFG, seed=0, gain=0.5)
    ref = make(sd, "cpu", "float64")

    # ---- correctness: fp32 GPU vs fp64 CPU, band vs dense, kernels vs torch
    small = diamond(2)
    g = build_edge_graph(small.positions, small.cell.array, True, 6.0)
    r64 = call(ref, small, g)
    res = {}
    for name, opt in VARIANTS.items():
        if args.variants and name not in args.variants:
            continue
        try:
            res[name] = call(make(sd, "cuda", "float32", **opt), small, g)
        except Exception as exc:  # keep going: report what failed
            out["checks"][f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:300]
            print(name, "FAILED", exc, flush=True)
            continue
        out["checks"][f"{name}_vs_fp64_force_maxabs"] = float(
            np.abs(res[name].forces - r64.forces).max()
        )
        out["checks"][f"{name}_vs_fp64_energy_rel"] = abs(res[name].energy - r64.energy) / abs(
            r64.energy
        )
    if "band" in res:  # run-to-run floor (atomics in torch's index_add_ on CUDA)
        again = call(make(sd, "cuda", "float32", **VARIANTS["band"]), small, g)
        out["checks"]["band_repeat_force_maxabs"] = float(
            np.abs(again.forces - res["band"].forces).max()
        )
        out["checks"]["band_repeat_bitwise"] = bool(
            np.array_equal(again.forces, res["band"].forces)
        )
    if "band" in res:  # CUDA graphs: eager first call, capture on the second, replays after
        pot = make(sd, "cuda", "float32", **VARIANTS["band"])
        runs = [call(pot, small, g) for _ in range(3)]
        out["checks"]["graphs_status"] = pot.cuda_graphs
        counts = harness.profiling.graph_counts(pot) or {}
        out["checks"]["graphs_captures_replays"] = [counts.get("captures"), counts.get("replays")]
        out["checks"]["graphs_replay_vs_eager_bitwise"] = all(
            np.array_equal(r.forces, runs[0].forces) and r.energy == runs[0].energy
            for r in runs[1:]
        )
        moved = small.copy()  # a new frame replayed in the old bucket vs a fresh eager call
        moved.rattle(0.01, seed=5)
        gm = build_edge_graph(moved.positions, moved.cell.array, True, 6.0)
        replay = call(pot, moved, gm)
        fresh = call(make(sd, "cuda", "float32", **VARIANTS["band"]), moved, gm)
        out["checks"]["graphs_new_frame_same_bucket"] = bool(
            pot._steps.steps and gm.n_edges <= next(reversed(pot._steps.steps))[2]
        )
        out["checks"]["graphs_new_frame_replay_vs_fresh_bitwise"] = bool(
            np.array_equal(replay.forces, fresh.forces) and replay.energy == fresh.energy
        )
    fscale = float(np.abs(r64.forces).max())
    out["checks"]["force_scale"] = fscale
    pairs = (
        ("band", "dense"),
        ("band-eager", "dense-eager"),
        ("band", "band-eager"),
        ("band-torch", "dense-torch"),
        ("band", "band-torch"),
    )
    for a, b in pairs:
        if a not in res or b not in res:
            continue
        out["checks"][f"{a}_vs_{b}_force_maxabs"] = float(
            np.abs(res[a].forces - res[b].forces).max()
        )
        out["checks"][f"{a}_vs_{b}_bitwise"] = bool(
            np.array_equal(res[a].forces, res[b].forces) and res[a].energy == res[b].energy
        )
        out["checks"][f"{a}_vs_{b}_virial_maxabs"] = float(
            np.abs(res[a].virial - res[b].virial).max()
        )
    results.add("checks", **out["checks"])

    # ---- timing at fixed sizes
    for n in args.sizes:
        atoms = diamond(n)
        graph, t = harness.once(
            lambda: build_edge_graph(atoms.positions, atoms.cell.array, True, 6.0)
        )
        nl_ms = t.ms
        for name, opt in VARIANTS.items():
            if args.quick and name.endswith("torch"):
                continue
            if args.variants and name not in args.variants:
                continue
            graphs = "n/a"
            try:
                pot = make(sd, "cuda", "float32", **opt)
                ms, gb, reserved = timed(pot, atoms, graph, args.repeat)
                graphs = pot.cuda_graphs
            except torch.OutOfMemoryError:
                ms, gb, reserved = float("nan"), float("nan"), float("nan")
            except Exception as exc:
                print(name, "FAILED", exc, flush=True)
                ms, gb, reserved = float("nan"), float("nan"), float("nan")
            pot = None
            torch.cuda.empty_cache()
            row = {
                "n_atoms": len(atoms),
                "n_edges": graph.n_edges,
                "variant": name,
                "ms_per_call": ms,
                "peak_gb": gb,
                "reserved_gb": reserved,
                "neighbour_list_ms": nl_ms,
                "cuda_graphs": graphs,
            }
            results.add("timing", **row)

    # ---- MD-like sequence: atoms move, the neighbour list is rebuilt every call (new edge
    # counts, so several capacity buckets are captured); evaluation time only
    for name in args.md_variants:
        rng = np.random.default_rng(7)
        atoms = diamond(args.md_size)
        pot = make(sd, "cuda", "float32", **VARIANTS[name])
        steps = []  # every step's atoms and list, built outside the timing
        for _ in range(args.md_steps):
            atoms.positions += rng.normal(scale=0.01, size=atoms.positions.shape)
            steps.append(
                (atoms.copy(), build_edge_graph(atoms.positions, atoms.cell.array, True, 6.0))
            )
        edges = [g.n_edges for _, g in steps]
        frames = iter(steps)
        t = harness.measure(lambda: call(pot, *next(frames)), "cuda", args.md_steps, 0)
        results.add(
            "md_like",
            variant=name,
            n_atoms=len(atoms),
            calls=args.md_steps,
            edges_min_max=[min(edges), max(edges)],
            median_ms=t.ms,
            mean_ms=statistics.fmean(t.wall),
            **(harness.profiling.graph_counts(pot) or {}),
        )
        pot = None  # the step graphs hold their memory pool
        torch.cuda.empty_cache()

    # ---- bucket switches near the memory limit: the graphs' pool holds about one step, so a
    # new bucket's eager first call runs out of memory, drops the graphs and runs again
    if args.switch_size:
        base = diamond(args.switch_size)
        with harness.PeakMemory("cuda") as mem:
            pot = make(sd, "cuda", "float32", **VARIANTS["band"])
            seq = []
            for scale in (1.0, 1.0, 0.97, 0.97, 1.0, 1.0):
                atoms = base.copy()
                atoms.set_cell(base.cell.array * scale, scale_atoms=True)
                graph = build_edge_graph(atoms.positions, atoms.cell.array, True, 6.0)
                try:
                    r = call(pot, atoms, graph)
                    seq.append(
                        {
                            "scale": scale,
                            "edges": graph.n_edges,
                            "energy": r.energy,
                            "forces": r.forces,
                        }
                    )
                except torch.OutOfMemoryError:
                    seq.append({"scale": scale, "edges": graph.n_edges, "error": "out of memory"})
                    break
        switch = {
            "n_atoms": len(base),
            "edges": [x["edges"] for x in seq],
            "errors": [x.get("error") for x in seq],
            "peak_gb": mem.peak_gb,
            **(harness.profiling.graph_counts(pot) or {}),
        }
        if len(seq) == 6 and "error" not in seq[-1]:
            switch["bucket_switch_ok"] = True
            switch["bucket_switch_repeat_bitwise"] = bool(
                np.array_equal(seq[0]["forces"], seq[5]["forces"])
                and np.array_equal(seq[2]["forces"], seq[3]["forces"])
            )
        else:
            switch["bucket_switch_error"] = "out of memory"
        out["checks"].update({k: v for k, v in switch.items() if k.startswith("bucket_")})
        results.add("bucket_switch", **switch)
        pot = seq = None  # the step graphs hold their memory pool
        torch.cuda.empty_cache()

    # ---- largest cell that fits (band, with and without recompute)
    for name in args.largest_variants:
        best, first_oom = None, None
        for n in args.largest:
            atoms = diamond(n)
            graph = build_edge_graph(atoms.positions, atoms.cell.array, True, 6.0)
            try:
                pot = make(sd, "cuda", "float32", **VARIANTS[name])
                ms, gb, reserved = timed(pot, atoms, graph, 1)
                best = {
                    "n_atoms": len(atoms),
                    "ms_per_call": ms,
                    "peak_gb": gb,
                    "reserved_gb": reserved,
                }
                print(name, best, flush=True)
            except torch.OutOfMemoryError:
                first_oom = len(atoms)
                break
            except Exception as exc:
                print(name, "FAILED", exc, flush=True)
                break
            finally:
                pot = None
                torch.cuda.empty_cache()
        out["largest"][name] = best
        results.add("largest", variant=name, largest=best, first_oom_atoms=first_oom)

    # ---- where the time goes (band, launched eagerly so the profiler sees every kernel)
    atoms = diamond(args.profile_size)
    graph = build_edge_graph(atoms.positions, atoms.cell.array, True, 6.0)
    pot = make(sd, "cuda", "float32", **VARIANTS["band-eager"])
    events = harness.profiling.profile(lambda: call(pot, atoms, graph), "cuda").key_averages()
    # self time: each kernel once (operator totals overlap the kernels they launch)
    profile = harness.profiling.top(events, 40)
    total = sum(harness.profiling.self_ms(e) for e in events)
    results.add("profile", atoms=len(atoms), total_ms=total, top=profile)

    print("\n== checks ==")
    for k, v in out["checks"].items():
        print(f"{k:45s} {v}")
    print("== timing ==")
    for r in results.of("timing"):
        print(
            f"{r['n_atoms']:6d} atoms {r['n_edges']:8d} edges {r['variant']:15s} "
            f"{r['ms_per_call']:9.1f} ms {r['peak_gb']:7.2f} GB ({r['reserved_gb']:.2f} reserved) "
            f"(NL {r['neighbour_list_ms']:.0f} ms; graphs {r['cuda_graphs']})"
        )
    print("== largest ==", out["largest"])
    print(f"== profile (band, self CUDA time, {total:.1f} ms in all) ==")
    for name, ms, calls in profile:
        print(f"{ms:9.2f} ms {calls:5d}  {name}")
    errs = [v for k, v in out["checks"].items() if k.endswith("_vs_fp64_force_maxabs")]
    ok = (
        bool(errs)
        and max(errs) <= FORCE_TOL
        and not any(k.endswith("_error") for k in out["checks"])
        and out["checks"].get("graphs_status", "on") == "on"
    )
    print(
        f"float32 forces within {FORCE_TOL} eV/Å of float64:",
        "ALL CHECKS PASSED" if ok else "CHECKS FAILED",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
