"""mdband beside deepmd-kit 3.2.0 on one GPU, as users call them, in one device call.

Both engines load the same random-weight deepmd-kit checkpoints, made by deepmd-kit in this run
(its default DPA4 config and DPA4-Mini's descriptor, type map ["C"]:
:mod:`benchmarks.harness.models`), and evaluate rattled diamond cells of 8·n³ atoms in float32
with energy, forces and virial. Every engine runs in its own process (deepmd-kit switches global
torch flags such as TF32 and compiles its model).

Per config and size it reports, in ms (medians of ``--repeat`` calls after ``--warmup``):

* ``call``: one user-level call with the neighbour list built inside it —
  ``mdband.Potential.evaluate(positions, cell, pbc, species)`` (torch cell list on the GPU, CUDA
  graph replay) and ``deepmd.infer.DeepPot.eval`` (its best mode: ``DP_COMPILE_INFER=1``,
  ``DP_TRITON_INFER``, vesin-torch neighbour list on the GPU);
* mdband's ``model step``: the same call with the neighbour list built once outside the timing
  (labelled: it leaves the list out) and ``neighbour list``: the GPU list build alone;
* ``ase md``: one Langevin step through ASE (``mdband.Calculator`` / deepmd-kit's ``DP``);
* ``mdband run``: ms per step of the CLI (``mdband run --device cuda``, Langevin, trajectory and
  checkpoint files), from its own summary line;
* checks: float32 GPU forces against a float64 CPU evaluation (64 atoms), CUDA-graph replay ==
  eager call bitwise, the GPU cell list == vesin's edge set.

Usage (device; ``.whl`` from ``../shared/tools/deepmd-on-device fetch .whl``)::

    eval "$(bash .whl/deepmd-on-device install .whl)"
    python3 -m benchmarks.vs_deepmd all --sizes 4 8 12 --configs default mini

``all`` appends its records to ``--out`` (``$OUT/vs_deepmd.jsonl`` on the device) and prints a
table last. The sub-commands (``checkpoints DIR``, ``deepmd``, ``mdband``, ``neighbours``) are
what ``all`` runs in child processes, each writing its records for ``all`` to gather.
"""

# ruff: noqa: B023  (every timed lambda runs inside its own loop iteration)
from __future__ import annotations

import gc
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

try:  # python -m benchmarks.vs_deepmd, or imported
    from benchmarks import harness
except ModuleNotFoundError as exc:  # python benchmarks/vs_deepmd.py: the harness beside it
    if exc.name != "benchmarks":
        raise
    import harness

diamond = harness.diamond
args_of = harness.evaluate_args


def cmd_checkpoints(args) -> None:
    """Random-init deepmd-kit training checkpoints, written by deepmd-kit itself
    (:func:`benchmarks.harness.models.write_deepmd_checkpoints`)."""
    names = args.configs or harness.models.CONFIGS
    paths = harness.models.write_deepmd_checkpoints(Path(args.dir), names, args.mini_json)
    for path in paths:
        print(f"checkpoint {path.stem}: {path}")


# ------------------------------------------------------------------ deepmd-kit side
def cmd_deepmd(args) -> None:
    """deepmd-kit timings: DeepPot.eval per call and ASE MD steps with its DP calculator."""
    from ase import units
    from ase.md.langevin import Langevin
    from deepmd.calculator import DP
    from deepmd.infer import DeepPot

    results = harness.Results("vs_deepmd", args.out, vars(args))
    clock = harness.timer.timer(args.device)
    dp = DeepPot(args.checkpoint)
    for n in args.sizes:
        atoms = diamond(n)
        coord = atoms.positions.reshape(1, -1)
        box = atoms.cell.array.reshape(1, 9)
        atype = np.zeros(len(atoms), dtype=np.int64)
        row = {"engine": "deepmd-kit", "config": args.name, "size": n, "atoms": len(atoms)}
        try:
            row["first_call_s"] = clock.measure(lambda: dp.eval(coord, box, atype), 1, 0).ms / 1e3
            t = clock.measure(lambda: dp.eval(coord, box, atype), args.repeat, args.warmup)
            row["call_ms"] = t.ms
            e, f, v = dp.eval(coord, box, atype)[:3]
            row["energy"] = float(np.asarray(e).reshape(()))
        except Exception as exc:  # out of memory at the largest size
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        results.add("call", **row)
    if args.md_size and args.md_steps:
        atoms = diamond(args.md_size)
        atoms.calc = DP(model=args.checkpoint)
        atoms.calc.dp = dp  # the DeepPot compiled above (a new one would compile again)
        dyn = Langevin(
            atoms, 1.0 * units.fs, temperature_K=300, friction=0.01, rng=np.random.default_rng(0)
        )
        dyn.run(3)
        t = clock.measure(lambda: dyn.run(args.md_steps), 1, 0)
        results.add(
            "ase_md",
            engine="deepmd-kit",
            config=args.name,
            atoms=len(atoms),
            skin=None,
            ms_per_step=t.ms / args.md_steps,
        )


# ------------------------------------------------------------------ mdband side
def cmd_mdband(args) -> None:
    import torch
    from ase import units
    from ase.md.langevin import Langevin

    import mdband

    results = harness.Results("vs_deepmd", args.out, vars(args))
    dev = args.device
    clock = harness.timer.timer(dev)
    name = {"engine": "mdband", "config": args.name}
    pot = mdband.load_model(args.checkpoint, device=dev, dtype="float32")
    results.add(
        "settings", **name, neighbour_list=pot.neighbour_backend, cuda_graphs=pot.cuda_graphs
    )
    # checks on 64 atoms: float32 GPU vs float64 CPU, replay == eager, cell list == vesin
    small = diamond(2, seed=1)
    ref = mdband.load_model(args.checkpoint, device="cpu", dtype="float64")
    f64 = ref.evaluate(*args_of(small)).forces
    outs = [pot.evaluate(*args_of(small)) for _ in range(4)]  # eager, capture, replay, replay
    results.add(
        "checks",
        **name,
        max_force_err_vs_fp64=float(np.abs(outs[-1].forces - f64).max()),
        replay_equals_eager=bool(
            np.array_equal(outs[0].forces, outs[-1].forces) and outs[0].energy == outs[-1].energy
        ),
    )
    for n in args.sizes:
        atoms = diamond(n)
        pos, cell, sym = atoms.positions, atoms.cell.array, atoms.get_chemical_symbols()
        row = {**name, "size": n, "atoms": len(atoms)}
        try:
            with harness.PeakMemory(dev) as mem:
                t = clock.measure(
                    lambda: pot.evaluate(pos, cell, True, sym), args.repeat, args.warmup
                )
            row["call_ms"], row["peak_gb"] = t.ms, mem.peak_gb
            pos_t = torch.tensor(pos, device=dev)
            cell_t = torch.tensor(cell, device=dev)
            nl = pot.neighbour_list()
            t = clock.measure(lambda: nl.edges(pos_t, cell_t, True), args.repeat, args.warmup)
            row["neighbour_ms"] = t.ms
            graph = nl.edges(pos_t, cell_t, True)
            row["edges"] = graph.n_edges
            row["tensor_call_ms"] = clock.measure(
                lambda: pot.evaluate(pos_t, cell_t, True, sym), args.repeat, args.warmup
            ).ms
            row["model_step_ms (list prebuilt)"] = clock.measure(
                lambda: pot.evaluate(pos_t, cell_t, True, sym, graph=graph),
                args.repeat,
                args.warmup,
            ).ms
            row["energy"] = pot.evaluate(pos, cell, True, sym).energy
        except torch.OutOfMemoryError as exc:
            row["error"] = f"OutOfMemoryError: {str(exc).splitlines()[0][:120]}"
            torch.cuda.empty_cache()
        results.add("call", **row)
    if args.profile and dev != "cpu":
        atoms = diamond(args.profile)
        results.add("profile", **name, atoms=len(atoms), table=profile(pot, atoms))
    if args.md_size and args.md_steps:
        atoms = diamond(args.md_size)
        for skin in (0.0, 1.0):
            atoms.calc = mdband.Calculator(pot, skin=skin)
            dyn = Langevin(
                atoms,
                1.0 * units.fs,
                temperature_K=300,
                friction=0.01,
                rng=np.random.default_rng(0),
            )
            dyn.run(3)
            t = clock.measure(lambda: dyn.run(args.md_steps), 1, 0)
            results.add(
                "ase_md", **name, atoms=len(atoms), skin=skin, ms_per_step=t.ms / args.md_steps
            )
        del atoms
    # this process's graph pools go before the run's process and the variants start: held,
    # they would leave those a GPU too small for their cells (and so chunked, eager calls)
    pot = ref = None  # noqa: F841 (the lambdas above hold the names, not the objects)
    gc.collect()
    if dev != "cpu":
        torch.cuda.empty_cache()
    for steps in args.run_steps:
        results.add("mdband_run", **name, **mdband_run(args, steps))
    if args.variants:
        mdband_variants(args, results)


#: engine settings of the variants timed beside the default (``--variants``)
VARIANTS = {
    "tf32x3": {"stack_precision": "tf32x3"},
    "fp16x3": {"stack_precision": "fp16x3"},
    "fp16": {"stack_precision": "fp16"},
    "compile": {"compile": "on"},
    "compile-fp16x3": {"compile": "on", "stack_precision": "fp16x3"},
    # the "dot" backward of aggregate and rotate_mix everywhere (tuning-table changes, not
    # settings; float32 on tensor cores takes it by default)
    "dots": {"_tuning": {"aggregate": {"bwd": "dot"}, "rotate_mix": {"bwd": "dot"}}},
    "fp16x3-dots": {
        "stack_precision": "fp16x3",
        "_tuning": {"aggregate": {"bwd": "dot"}, "rotate_mix": {"bwd": "dot"}},
    },
    # the environment seed's edge MLPs and the radial MLP by their ops (the defaults since
    # BENCHMARKS.md "2026-12-04 (second session)")
    "seed-mlp": {"_tuning": {"seed_mlp": {"kernels": "op"}}},
    "radial-mlp": {"_tuning": {"radial_mlp": {"kernels": "op"}}},
    "edge-mlps": {"_tuning": {"seed_mlp": {"kernels": "op"}, "radial_mlp": {"kernels": "op"}}},
}


def tuned(changes: dict):
    """The kernels' tuning table with a variant's ``changes`` in force (``tuning.override``)."""
    from mdband.kernels import tuning

    return tuning.override(**changes)


def mdband_variants(args, results) -> None:
    """Each variant: forces vs a float64 evaluation of 512 atoms on the same device (max and
    RMS error, eV/Å), first call and ms per user call at every size (kind ``variant``)."""
    import torch

    import mdband

    a = args_of(diamond(4, seed=2))
    ref = mdband.load_model(args.checkpoint, device=args.device, dtype="float64").evaluate(*a)
    for name in args.variants:
        with tuned(VARIANTS[name].get("_tuning", {})):
            row = _variant(args, name, a, ref, torch, mdband)
        results.add("variant", engine="mdband", config=args.name, variant=name, **row)


def _variant(args, name, a, ref, torch, mdband) -> dict:
    """One variant's row (see :func:`mdband_variants`)."""
    # the earlier potentials (an ASE calculator cycle keeps them) and their graph pools go
    # first: a variant timed beside their memory would be planned in chunks
    gc.collect()
    if args.device != "cpu":
        torch.cuda.empty_cache()
    clock = harness.timer.timer(args.device)
    settings = {k: v for k, v in VARIANTS[name].items() if not k.startswith("_")}
    pot = mdband.load_model(args.checkpoint, device=args.device, dtype="float32", **settings)
    row = {"first_call_s": clock.measure(lambda: pot.evaluate(*a), 1, 0).ms / 1e3}
    for _ in range(2):  # capture and replay of the graph, then the checked result
        r = pot.evaluate(*a)
    d = r.forces - ref.forces
    row["max_force_err_vs_fp64"] = float(np.abs(d).max())
    row["rms_force_err_vs_fp64"] = float(np.sqrt((d**2).mean()))
    row["energy_err_vs_fp64"] = float(abs(r.energy - ref.energy))
    for n in args.variant_sizes or args.sizes:
        b = args_of(diamond(n))
        n_atoms = len(b[0])
        try:
            # one call more than --warmup untimed: a new size's first call captures its graph
            t = clock.measure(lambda: pot.evaluate(*b), args.repeat, args.warmup + 1)
            row[f"call_ms_{n_atoms}"] = t.ms
            row[f"chunks_{n_atoms}"] = pot.evaluate(*b).chunks
        except torch.OutOfMemoryError:
            row[f"call_ms_{n_atoms}"] = "out of memory"
    return row


def profile(pot, atoms, rows: int = 25) -> str:
    """Self CUDA time per kernel of one eager call (graphs off), neighbour list included."""
    with harness.profiling.eager(pot):
        prof = harness.profiling.profile(lambda: pot.evaluate(*args_of(atoms)), pot.device)
    table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=rows)
    print(table, flush=True)
    return table


def mdband_run(args, steps: int) -> dict:
    """``mdband run`` as a user types it; ms/step from its summary line."""
    from ase.io import write

    with tempfile.TemporaryDirectory() as tmp:
        xyz = Path(tmp, "start.extxyz")
        write(xyz, diamond(args.md_size), format="extxyz")
        cmd = [
            sys.executable,
            "-m",
            "mdband.cli",
            "run",
            "--structure",
            str(xyz),
            "--model",
            args.checkpoint,
            "--device",
            args.device,
            "--ensemble",
            "nvt-langevin",
            "--temperature",
            "300",
            "--steps",
            str(steps),
            "--traj-every",
            "100",
            "--checkpoint-every",
            "500",
            "--trajectory",
            str(Path(tmp, "t.h5")),
            "--checkpoint",
            str(Path(tmp, "c.ckpt")),
            "--log",
            str(Path(tmp, "run.log")),
            "--no-progress",
            "--seed",
            "1",
            # random weights: no physics, only cost; the runaway guards would stop it
            "--guard-distance",
            "0",
            "--max-temperature",
            "0",
        ]
        if args.skin:
            toml = Path(tmp, "run.toml")
            toml.write_text(f"skin = {args.skin}\n")
            cmd += ["--config", str(toml)]
        p, t = harness.once(lambda: subprocess.run(cmd, capture_output=True, text=True))
        log = Path(tmp, "run.log").read_text() if Path(tmp, "run.log").exists() else ""
    # the run's own times: every step (model and the rest of the loop), after the first steps
    # (kernel compilation, graph capture), steps/s of the whole run
    out = {"steps": steps, "rc": p.returncode, "process_s": t.ms / 1e3, "skin": args.skin}
    out.update(harness.commands.run_summary(log + p.stdout + p.stderr))
    if "ms_per_step" not in out:
        out["stderr"] = p.stderr[-400:]
    return out


def cmd_neighbours(args) -> None:
    """GPU neighbour lists at large sizes: mdband's torch cell list against vesin-torch (CUDA)
    and vesin on the CPU; edge sets compared."""
    import torch

    from mdband.cell_list import cell_list_edges
    from mdband.graph import build_edge_graph

    results = harness.Results("vs_deepmd", args.out, vars(args))
    neighbour_cases(results)
    clock = harness.timer.timer("cuda")

    def ms(fn):
        return clock.measure(fn, args.repeat, args.warmup).ms

    for n in args.sizes:
        atoms = diamond(n)
        pos = torch.tensor(atoms.positions, device="cuda")
        cell = torch.tensor(atoms.cell.array, device="cuda")
        row = {"size": n, "atoms": len(atoms)}
        row["cell_list_ms"] = ms(lambda: cell_list_edges(pos, cell, True, 6.0))
        src, dst, sh = cell_list_edges(pos, cell, True, 6.0)
        # the torch path the pair kernels replaced, and its result
        with tuned({"cell_pairs": {"kernels": "torch"}}):
            row["cell_list_torch_ms"] = ms(lambda: cell_list_edges(pos, cell, True, 6.0))
            ref = cell_list_edges(pos, cell, True, 6.0)
        row["kernels_equal_torch"] = all(torch.equal(a, b) for a, b in zip((src, dst, sh), ref))
        for launch in args.launches:  # "BWxWARPS": the pair kernels' launch, timed
            bw, warps = (int(v) for v in launch.split("x"))
            with pair_launch(bw, warps):
                t = ms(lambda: cell_list_edges(pos, cell, True, 6.0))
                got = cell_list_edges(pos, cell, True, 6.0)
            same = all(torch.equal(a, b) for a, b in zip(got, ref))
            row[f"cell_list_ms_{launch}"] = t if same else f"{t:.3f} (differs)"
        row["edges"] = int(src.shape[0])
        g, t = harness.once(lambda: build_edge_graph(atoms.positions, atoms.cell.array, True, 6.0))
        row["vesin_cpu_ms"] = t.ms
        key = lambda s, d, k: np.lexsort((k[:, 2], k[:, 1], k[:, 0], s, d))  # noqa: E731
        a = np.c_[g.dst, g.src, g.shifts][key(g.src, g.dst, g.shifts)]
        s_, d_, k_ = src.cpu().numpy(), dst.cpu().numpy(), sh.cpu().numpy()
        b = np.c_[d_, s_, k_][key(s_, d_, k_)]
        row["same_as_vesin"] = bool(a.shape == b.shape and np.array_equal(a, b))
        try:
            from vesin_torch import NeighborList

            vt = NeighborList(cutoff=6.0, full_list=True)
            row["vesin_torch_cuda_ms"] = ms(
                lambda: vt.compute(points=pos, box=cell, periodic=True, quantities="ijS")
            )
        except Exception as exc:  # not installed, or no CUDA path
            row["vesin_torch_cuda"] = f"{type(exc).__name__}: {str(exc)[:100]}"
        results.add("neighbours", **row)


def pair_launch(bw: int, warps: int):
    """The cell list's pair-kernel launch (candidates per slot and step, warps) in the block."""
    return tuned({"cell_pairs": {"width": bw, "warps": warps}})


def neighbour_cases(results) -> None:
    """Edge sets on the GPU (mdband's cell list, vesin-torch) against vesin on the CPU for the
    boundary cases: cubic, triclinic, a cell thinner than the cutoff, mixed and open (kind
    ``neighbour_case``)."""
    import torch

    from mdband.cell_list import cell_list_edges
    from mdband.graph import build_edge_graph

    tri = np.array([[4.0, 0, 0], [1.3, 3.8, 0], [0.7, -0.9, 4.4]])
    cases = {
        "cubic": (np.eye(3) * 9.0, [True] * 3),
        "triclinic": (tri * 2, [True] * 3),
        "thin": (tri * 0.6, [True] * 3),
        "mixed": (tri * 2, [True, False, True]),
        "open": (np.zeros((3, 3)), [False] * 3),
    }
    rng = np.random.default_rng(0)

    def key(s, d, k):
        a = np.c_[np.asarray(d), np.asarray(s), np.asarray(k)]
        return a[np.lexsort(a.T[::-1])]

    for name, (cell, pbc) in cases.items():
        pos = rng.random((60, 3)) @ cell if any(pbc) else rng.random((60, 3)) * 9.0
        ref = build_edge_graph(pos, cell, pbc, 4.0)
        want = key(ref.src, ref.dst, ref.shifts)
        pt, ct = torch.tensor(pos, device="cuda"), torch.tensor(cell, device="cuda")
        got = cell_list_edges(pt, ct, pbc, 4.0)
        s, d, k = (t.cpu().numpy() for t in got)
        row = {"case": name, "cell_list": bool(np.array_equal(key(s, d, k), want))}
        with tuned({"cell_pairs": {"kernels": "torch"}}):
            ref = cell_list_edges(pt, ct, pbc, 4.0)
        row["kernels_equal_torch"] = all(torch.equal(a, b) for a, b in zip(got, ref))
        try:
            from vesin_torch import NeighborList

            nl = NeighborList(cutoff=4.0, full_list=True)
            per = torch.tensor(pbc, device="cuda")
            i, j, sh = nl.compute(points=pt, box=ct, periodic=per, quantities="ijS")
            r = (pt[j] + sh.to(pt.dtype) @ ct - pt[i]).norm(dim=1)
            keep = (r > 1e-5).cpu().numpy()
            got = key(j.cpu().numpy()[keep], i.cpu().numpy()[keep], sh.cpu().numpy()[keep])
            row["vesin_torch"] = bool(np.array_equal(got, want))
        except Exception as exc:
            row["vesin_torch"] = f"{type(exc).__name__}: {str(exc)[:120]}"
        results.add("neighbour_case", **row)


# ------------------------------------------------------------------ orchestration
def sub(argv: list, out: Path, results, env: dict | None = None, timeout: int = 400) -> int:
    """This module's sub-command ``argv`` in a child process writing its records to ``out``;
    those records (its ``start`` aside) join ``results``."""
    cmd = harness.commands.module("vs_deepmd", *argv, "--out", out)
    print("+", " ".join(map(str, argv)), flush=True)
    try:
        rc = subprocess.run(cmd, env=harness.commands.environment(env), timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"timed out: {argv[0]}", flush=True)
        rc = 124
    if out.exists():
        for rec in harness.results.read(out):
            if rec["kind"] != "start":
                fields = {k: v for k, v in rec.items() if k not in ("bench", "run", "kind")}
                results.add(rec["kind"], **fields)
    return rc


def cmd_all(args) -> None:
    results = harness.Results("vs_deepmd", args.out, vars(args))
    work = Path(tempfile.mkdtemp(prefix="vs-deepmd-"))
    models = Path(args.checkpoints) if args.checkpoints else work
    if not args.checkpoints:
        ck_args = ["checkpoints", work, "--mini-json", args.mini_json, "--configs", *args.configs]
        sub(ck_args, work / "ck.jsonl", results)
    sizes = [str(s) for s in args.sizes]
    md = ["--md-size", args.md_size, "--md-steps", args.md_steps]
    timing = ["--repeat", args.repeat, "--warmup", args.warmup]
    if args.neighbours:
        sub(["neighbours", "--sizes", *args.neighbours, *timing], work / "nl.jsonl", results)
    for name in args.configs:
        ck = models / f"{name}.pt"
        sub(
            [
                "mdband",
                "--name",
                name,
                "--checkpoint",
                ck,
                "--sizes",
                *sizes,
                *md,
                *timing,
                "--skin",
                args.skin,
                "--profile",
                args.profile,
                "--device",
                args.device,
                "--run-steps",
                *args.run_steps,
                "--variants",
                *args.variants,
                "--variant-sizes",
                *args.variant_sizes,
            ],
            work / f"mdband-{name}.jsonl",
            results,
            timeout=560,
        )
        if not args.no_deepmd:
            level = "3" if max(args.sizes) <= 4 else "2"
            env = {"DP_COMPILE_INFER": "1", "DP_TRITON_INFER": level}
            sub(
                ["deepmd", "--name", name, "--checkpoint", ck, "--sizes", *sizes, *md, *timing],
                work / f"deepmd-{name}.jsonl",
                results,
                env=env,
                timeout=args.deepmd_timeout,
            )
    table(results.records, args)


def table(records: list[dict], args) -> None:
    """The comparison per config and size, from the records of :func:`cmd_all`."""

    def one(kind, **match):
        rows = [
            r for r in records if r["kind"] == kind and all(r.get(k) == v for k, v in match.items())
        ]
        return rows[-1] if rows else {}

    print("\n== mdband vs deepmd-kit (ms; float32; energy + forces + virial) ==")
    for name in args.configs:
        m = {"engine": "mdband", "config": name}
        d = {"engine": "deepmd-kit", "config": name}
        checks = {k: v for k, v in one("checks", **m).items() if k.endswith(("fp64", "eager"))}
        settings = one("settings", **m)
        print(
            f"-- {name}: checks {checks} settings "
            f"{ {k: settings.get(k) for k in ('neighbour_list', 'cuda_graphs')} }"
        )
        for n in args.sizes:
            mr, dr = one("call", **m, size=n), one("call", **d, size=n)
            call, dcall = mr.get("call_ms"), dr.get("call_ms")
            ratio = f"{call / dcall:.2f}x" if call and dcall else "-"
            print(
                f"  {mr.get('atoms', '?'):>7} atoms: mdband call {fmt(call)} "
                f"(model step {fmt(mr.get('model_step_ms (list prebuilt)'))}, list "
                f"{fmt(mr.get('neighbour_ms'))}, {fmt(mr.get('peak_gb'), '.1f')} GB) | deepmd "
                f"{fmt(dcall)} {dr.get('error', '')} | ratio {ratio}"
            )
        md = one("ase_md", **m, skin=0.0), one("ase_md", **m, skin=1.0), one("ase_md", **d)
        print(
            f"  ASE MD step ({md[0].get('atoms')} atoms): mdband skin 0 "
            f"{fmt(md[0].get('ms_per_step'))}, skin 1 {fmt(md[1].get('ms_per_step'))} | "
            f"deepmd {fmt(md[2].get('ms_per_step'))}"
        )
        for r in (r for r in records if r["kind"] == "mdband_run" and r.get("config") == name):
            print(
                f"  mdband run {r['steps']} steps: {fmt(r.get('ms_per_step'))} ms/step, after "
                f"the warm-up {fmt(r.get('steady_step_ms'))} (rc {r['rc']})"
            )
        for r in (r for r in records if r["kind"] == "variant" and r.get("config") == name):
            calls = ", ".join(
                f"{k[8:]} atoms {fmt(t) if isinstance(t, float) else t}"
                for k, t in r.items()
                if k.startswith("call_ms_")
            )
            print(
                f"  variant {r['variant']}: max force err {r['max_force_err_vs_fp64']:.2e} "
                f"eV/A (rms {r['rms_force_err_vs_fp64']:.1e}); first call "
                f"{r['first_call_s']:.1f} s; call ms: {calls}"
            )
    for r in records:
        if r["kind"] == "neighbours":
            print(f"  neighbours { ({k: v for k, v in r.items() if k not in ('bench', 'run')}) }")


def fmt(x, spec=".1f") -> str:
    return "-" if x is None else format(x, spec)


def main(argv=None) -> None:
    ap = harness.parser("vs_deepmd", __doc__, out=False)
    sp = ap.add_subparsers(dest="cmd", required=True)
    common = {"repeat": 5, "warmup": 2}
    a = sp.add_parser(
        "all",
        parents=[
            harness.flags.shared(
                "vs_deepmd", device="cuda", sizes=[4, 8, 12], configs=["default", "mini"], **common
            )
        ],
    )
    a.add_argument("--md-size", type=int, default=8)
    a.add_argument("--md-steps", type=int, default=20)
    a.add_argument("--run-steps", type=int, nargs="*", default=[200])
    a.add_argument("--skin", type=float, default=0.0)
    a.add_argument("--neighbours", type=int, nargs="*", default=[])
    a.add_argument("--no-deepmd", action="store_true")
    a.add_argument("--profile", type=int, default=0)
    a.add_argument(
        "--variants",
        nargs="*",
        default=[],
        choices=sorted(VARIANTS),
        help="mdband settings also timed (precision modes, compile=on)",
    )
    a.add_argument("--variant-sizes", type=int, nargs="*", default=[], help="default: --sizes")
    a.add_argument("--deepmd-timeout", type=int, default=400)
    a.add_argument("--mini-json", default=str(harness.models.MINI_JSON))
    a.add_argument("--checkpoints", help="a folder with NAME.pt of every config (else made)")
    c = sp.add_parser(
        "checkpoints", parents=[harness.flags.shared("vs_deepmd", configs=["default", "mini"])]
    )
    c.add_argument("dir", help="the folder the checkpoints are written to")
    c.add_argument("--mini-json", default=str(harness.models.MINI_JSON))
    for name, device in (("deepmd", "auto"), ("mdband", "cuda")):
        s = sp.add_parser(
            name, parents=[harness.flags.shared("vs_deepmd", device=device, sizes=[4], **common)]
        )
        s.add_argument("--name", required=True, help="the config's name (default, mini)")
        s.add_argument("--checkpoint", required=True)
        s.add_argument("--md-size", type=int, default=0)
        s.add_argument("--md-steps", type=int, default=0)
        s.add_argument("--skin", type=float, default=0.0)
        s.add_argument("--run-steps", type=int, nargs="*", default=[])
        s.add_argument("--profile", type=int, default=0, help="profile one call at this size")
        s.add_argument("--variants", nargs="*", default=[], choices=sorted(VARIANTS))
        s.add_argument("--variant-sizes", type=int, nargs="*", default=[])
    n = sp.add_parser(
        "neighbours", parents=[harness.flags.shared("vs_deepmd", sizes=[8], **common)]
    )
    n.add_argument("--launches", nargs="*", default=[], help="pair-kernel launches BWxWARPS")
    args = ap.parse_args(argv)
    {
        "all": cmd_all,
        "checkpoints": cmd_checkpoints,
        "deepmd": cmd_deepmd,
        "mdband": cmd_mdband,
        "neighbours": cmd_neighbours,
    }[args.cmd](args)


if __name__ == "__main__":
    main()
