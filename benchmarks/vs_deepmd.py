"""mdband beside deepmd-kit 3.2.0 on one GPU, as users call them, in one device call.

Both engines load the same random-weight deepmd-kit checkpoints, made by deepmd-kit in this run
(its default DPA4 config and DPA4-Mini's descriptor, type map ["C"]), and evaluate rattled diamond
cells of 8·n³ atoms in float32 with energy, forces and virial. Every engine runs in its own
process (deepmd-kit switches global torch flags such as TF32 and compiles its model).

Per config and size it reports, in ms (medians):

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
    python3 benchmarks/vs_deepmd.py all --sizes 4 8 12 --configs default mini

``all`` writes ``$OUT/vs_deepmd.json`` and prints a table last. The sub-commands
(``checkpoints``, ``deepmd``, ``mdband``, ``neighbours``) are what ``all`` runs in subprocesses.
"""

# ruff: noqa: B023  (every timed lambda runs inside its own loop iteration)
from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MINI_JSON = HERE.parent / ".." / "shared" / "data" / "dpa4-water-smoke" / "input-mini.json"


def diamond(n: int, seed: int = 0):
    from ase.build import bulk

    a = bulk("C", "diamond", a=3.567, cubic=True) * (n, n, n)
    a.rattle(0.03, seed=seed)
    return a


def sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def median_ms(fn, repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


# ------------------------------------------------------------------ deepmd-kit side
#: DPA4-Mini: the model section of deepmd-kit's water example (``input-mini.json`` in
#: ../shared/data/dpa4-water-smoke, which does not travel to the device), type map ["C"]
MINI = {
    "type": "dpa4",
    "type_map": ["C"],
    "descriptor": {
        "rcut": 6.0, "channels": 32, "n_radial": 16, "edge_norm": False, "use_env_seed": True,
        "lmax": 2, "mmax": 1, "n_blocks": 2, "mixing_layers": 3,
        "radial_so2_mode": "degree_channel", "radial_so2_rank": 1, "n_focus": 1, "focus_dim": 0,
        "n_atten_head": 1, "message_node_so3": True, "ffn_neurons": 0, "ffn_so3_grid": True,
        "grid_mlp": False, "grid_branch": [0, 0, 1], "ffn_blocks": 1, "so3_readout": "mlp",
        "use_amp": True, "precision": "float32", "seed": 42,
    },
    "fitting_net": {"neuron": [0], "precision": "float32", "seed": 42},
    "use_compile": False,
    "enable_tf32": True,
}  # fmt: skip


def model_sections(mini_json: Path) -> dict[str, dict]:
    default = {"type": "dpa4", "type_map": ["C"], "descriptor": {"rcut": 6.0}, "fitting_net": {}}
    mini = copy.deepcopy(MINI)
    if Path(mini_json).is_file():  # the example's own file, when present, must agree
        shipped = json.loads(Path(mini_json).read_text())["model"]
        shipped["type_map"] = ["C"]
        shipped.pop("_comment", None)
        if shipped != mini:
            raise SystemExit(f"MINI differs from {mini_json}: update it")
    return {"default": default, "mini": mini}


def cmd_checkpoints(args) -> None:
    """Random-init deepmd-kit training checkpoints (zero-initialised parameters filled with
    N(0, 0.05) so that forces do not vanish), written by deepmd-kit itself."""
    import torch
    from deepmd.pt.model.model import get_model
    from deepmd.pt.train.wrapper import ModelWrapper
    from deepmd.utils.argcheck import model_args

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, cfg in model_sections(args.mini_json).items():
        margs = model_args()
        params = margs.normalize_value(copy.deepcopy(cfg), trim_pattern="_*")
        margs.check_value(params, strict=True)
        torch.manual_seed(1)
        model = get_model(copy.deepcopy(params))
        gen = torch.Generator().manual_seed(2)
        with torch.no_grad():
            for _, p in model.named_parameters():
                if p.is_floating_point() and p.numel() and float(p.abs().max()) == 0.0:
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.05)
        wrapper = ModelWrapper(model, model_params=params)
        torch.save({"model": wrapper.state_dict()}, out / f"{name}.pt")
        print(f"checkpoint {name}: {out / (name + '.pt')}")


def cmd_deepmd(args) -> None:
    """deepmd-kit timings: DeepPot.eval per call and ASE MD steps with its DP calculator."""
    from ase import units
    from ase.md.langevin import Langevin
    from deepmd.calculator import DP
    from deepmd.infer import DeepPot

    res = {"engine": "deepmd-kit", "config": args.name, "sizes": {}}
    dp = DeepPot(args.checkpoint)
    for n in args.sizes:
        atoms = diamond(n)
        coord = atoms.positions.reshape(1, -1)
        box = atoms.cell.array.reshape(1, 9)
        atype = np.zeros(len(atoms), dtype=np.int64)
        row = {"atoms": len(atoms)}
        try:
            t0 = time.perf_counter()
            dp.eval(coord, box, atype)
            row["first_call_s"] = time.perf_counter() - t0
            row["call_ms"] = median_ms(lambda: dp.eval(coord, box, atype), args.repeat)
            e, f, v = dp.eval(coord, box, atype)[:3]
            row["energy"] = float(np.asarray(e).reshape(()))
        except Exception as exc:  # out of memory at the largest size
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        res["sizes"][str(n)] = row
        print(json.dumps({args.name: row}), flush=True)
    if args.md_size and args.md_steps:
        atoms = diamond(args.md_size)
        atoms.calc = DP(model=args.checkpoint)
        atoms.calc.dp = dp  # the DeepPot compiled above (a new one would compile again)
        dyn = Langevin(
            atoms, 1.0 * units.fs, temperature_K=300, friction=0.01, rng=np.random.default_rng(0)
        )
        dyn.run(3)
        t0 = time.perf_counter()
        dyn.run(args.md_steps)
        res["ase_md_ms"] = 1e3 * (time.perf_counter() - t0) / args.md_steps
        res["ase_md_atoms"] = len(atoms)
    Path(args.json).write_text(json.dumps(res))


# ------------------------------------------------------------------ mdband side
def cmd_mdband(args) -> None:
    import torch
    from ase import units
    from ase.md.langevin import Langevin

    import mdband

    res = {"engine": "mdband", "config": args.name, "sizes": {}, "checks": {}}
    dev = args.device
    pot = mdband.load_model(args.checkpoint, device=dev, dtype="float32")
    res["settings"] = {"neighbour_list": pot.neighbour_backend, "cuda_graphs": pot.cuda_graphs}
    # checks on 64 atoms: float32 GPU vs float64 CPU, replay == eager, cell list == vesin
    small = diamond(2, seed=1)
    ref = mdband.load_model(args.checkpoint, device="cpu", dtype="float64")
    args64 = (small.positions, small.cell.array, True, small.get_chemical_symbols())
    f64 = ref.evaluate(*args64).forces
    outs = [pot.evaluate(*args64) for _ in range(4)]  # eager, capture, replay, replay
    res["checks"]["max_force_err_vs_fp64"] = float(np.abs(outs[-1].forces - f64).max())
    res["checks"]["replay_equals_eager"] = bool(
        np.array_equal(outs[0].forces, outs[-1].forces) and outs[0].energy == outs[-1].energy
    )
    for n in args.sizes:
        atoms = diamond(n)
        pos, cell, sym = atoms.positions, atoms.cell.array, atoms.get_chemical_symbols()
        row = {"atoms": len(atoms)}
        try:
            if dev == "cuda":
                torch.cuda.reset_peak_memory_stats()
            row["call_ms"] = median_ms(lambda: pot.evaluate(pos, cell, True, sym), args.repeat)
            if dev == "cuda":
                row["peak_gb"] = torch.cuda.max_memory_allocated() / 2**30
            pos_t = torch.tensor(pos, device=dev)
            cell_t = torch.tensor(cell, device=dev)
            nl = pot.neighbour_list()
            row["neighbour_ms"] = median_ms(lambda: nl.edges(pos_t, cell_t, True), args.repeat)
            graph = nl.edges(pos_t, cell_t, True)
            row["edges"] = graph.n_edges
            row["tensor_call_ms"] = median_ms(
                lambda: pot.evaluate(pos_t, cell_t, True, sym), args.repeat
            )
            row["model_step_ms (list prebuilt)"] = median_ms(
                lambda: pot.evaluate(pos_t, cell_t, True, sym, graph=graph), args.repeat
            )
            row["energy"] = pot.evaluate(pos, cell, True, sym).energy
        except torch.OutOfMemoryError as exc:
            row["error"] = f"OutOfMemoryError: {str(exc).splitlines()[0][:120]}"
            torch.cuda.empty_cache()
        res["sizes"][str(n)] = row
        print(json.dumps({args.name: row}), flush=True)
    if args.profile and dev == "cuda":
        res["profile"] = profile(pot, diamond(args.profile))
    if args.md_size and args.md_steps:
        atoms = diamond(args.md_size)
        for skin in (0.0, 1.0):
            atoms.calc = mdband.Calculator(pot, skin=skin)
            dyn = Langevin(atoms, 1.0 * units.fs, temperature_K=300, friction=0.01,
                           rng=np.random.default_rng(0))  # fmt: skip
            dyn.run(3)
            sync()
            t0 = time.perf_counter()
            dyn.run(args.md_steps)
            sync()
            res[f"ase_md_ms_skin{skin:g}"] = 1e3 * (time.perf_counter() - t0) / args.md_steps
        res["ase_md_atoms"] = len(atoms)
        del atoms
    # this process's graph pools go before the run's process and the variants start: held,
    # they would leave those a GPU too small for their cells (and so chunked, eager calls)
    pot = ref = None  # noqa: F841 (the lambdas above hold the names, not the objects)
    gc.collect()
    if dev == "cuda":
        torch.cuda.empty_cache()
    if args.run_steps:
        res["mdband_run"] = {}
        for steps in args.run_steps:
            res["mdband_run"][str(steps)] = mdband_run(args, steps)
    if args.variants:
        res["variants"] = mdband_variants(args)
    Path(args.json).write_text(json.dumps(res))


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


def mdband_variants(args) -> dict:
    """Each variant: forces vs a float64 evaluation of 512 atoms on the same device (max and
    RMS error, eV/Å), first call and ms per user call at every size."""
    import torch

    import mdband

    check = diamond(4, seed=2)
    a = (check.positions, check.cell.array, True, check.get_chemical_symbols())
    ref = mdband.load_model(args.checkpoint, device=args.device, dtype="float64").evaluate(*a)
    out = {}
    for name in args.variants:
        with tuned(VARIANTS[name].get("_tuning", {})):
            out[name] = _variant(args, name, a, ref, torch, mdband)
    return out


def _variant(args, name, a, ref, torch, mdband) -> dict:
    """One variant's row (see :func:`mdband_variants`)."""
    # the earlier potentials (an ASE calculator cycle keeps them) and their graph pools go
    # first: a variant timed beside their memory would be planned in chunks
    gc.collect()
    if args.device == "cuda":
        torch.cuda.empty_cache()
    settings = {k: v for k, v in VARIANTS[name].items() if not k.startswith("_")}
    pot = mdband.load_model(args.checkpoint, device=args.device, dtype="float32",
                            **settings)  # fmt: skip
    t0 = time.perf_counter()
    r = pot.evaluate(*a)
    row = {"first_call_s": time.perf_counter() - t0}
    for _ in range(2):  # capture and replay of the graph, then the checked result
        r = pot.evaluate(*a)
    d = r.forces - ref.forces
    row["max_force_err_vs_fp64"] = float(np.abs(d).max())
    row["rms_force_err_vs_fp64"] = float(np.sqrt((d**2).mean()))
    row["energy_err_vs_fp64"] = float(abs(r.energy - ref.energy))
    for n in args.variant_sizes or args.sizes:
        atoms = diamond(n)
        b = (atoms.positions, atoms.cell.array, True, atoms.get_chemical_symbols())
        try:
            pot.evaluate(*b)
            row[f"call_ms_{len(atoms)}"] = median_ms(lambda: pot.evaluate(*b), args.repeat)
            row[f"chunks_{len(atoms)}"] = pot.evaluate(*b).chunks
        except torch.OutOfMemoryError:
            row[f"call_ms_{len(atoms)}"] = "out of memory"
    print(json.dumps({"variant": {args.name: {name: row}}}), flush=True)
    return row


def profile(pot, atoms, rows: int = 25) -> str:
    """Self CUDA time per kernel of one eager call (graphs off), neighbour list included."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    steps, pot._steps = pot._steps, None  # eager: the profiler sees every kernel
    try:
        a = (atoms.positions, atoms.cell.array, True, atoms.get_chemical_symbols())
        pot.evaluate(*a)
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            pot.evaluate(*a)
            torch.cuda.synchronize()
    finally:
        pot._steps = steps
    table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=rows)
    print(table, flush=True)
    return table


def mdband_run(args, steps: int) -> dict:
    """``mdband run`` as a user types it; ms/step from its summary line."""
    from ase.io import write

    with tempfile.TemporaryDirectory() as tmp:
        xyz = Path(tmp, "start.extxyz")
        write(xyz, diamond(args.md_size), format="extxyz")
        cmd = [sys.executable, "-m", "mdband.cli", "run", "--structure", str(xyz),
               "--model", args.checkpoint, "--device", args.device, "--ensemble", "nvt-langevin",
               "--temperature", "300", "--steps", str(steps), "--traj-every", "100",
               "--checkpoint-every", "500", "--trajectory", str(Path(tmp, "t.h5")),
               "--checkpoint", str(Path(tmp, "c.ckpt")), "--log", str(Path(tmp, "run.log")),
               "--no-progress", "--seed", "1",
               # random weights: no physics, only cost; the runaway guards would stop it
               "--guard-distance", "0", "--max-temperature", "0"]  # fmt: skip
        if args.skin:
            toml = Path(tmp, "run.toml")
            toml.write_text(f"skin = {args.skin}\n")
            cmd += ["--config", str(toml)]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        log = Path(tmp, "run.log").read_text() if Path(tmp, "run.log").exists() else ""
    m = re.search(r"in ([0-9.]+) s, ([0-9,.]+) steps/s", log)
    out = {"steps": steps, "rc": p.returncode, "process_s": wall, "skin": args.skin}
    split = re.search(
        r"Time per step: ([0-9.]+) ms, of which ([0-9.]+) ms in the model",
        log + p.stdout + p.stderr,
    )
    if split:  # the run's own split of a step: model (forces, virial) and the rest of the loop
        out["step_ms"], out["model_ms"] = float(split.group(1)), float(split.group(2))
    steady = re.search(r"after the first \d+ steps [^:]*: ([0-9.]+) ms per step, ([0-9.]+) ms in",
                       log + p.stdout + p.stderr)  # fmt: skip
    if steady:  # without the first calls (kernel compilation, graph capture)
        out["steady_step_ms"], out["steady_model_ms"] = map(float, steady.groups())
    if m:
        out["ms_per_step"] = 1e3 / float(m.group(2).replace(",", ""))
    else:
        out["stderr"] = p.stderr[-400:]
    print(json.dumps({"mdband_run": out}), flush=True)
    return out


def cmd_neighbours(args) -> None:
    """GPU neighbour lists at large sizes: mdband's torch cell list against vesin-torch (CUDA)
    and vesin on the CPU; edge sets compared."""
    import torch

    from mdband.cell_list import cell_list_edges
    from mdband.graph import build_edge_graph

    res = {"cases": neighbour_cases()}
    for n in args.sizes:
        atoms = diamond(n)
        pos = torch.tensor(atoms.positions, device="cuda")
        cell = torch.tensor(atoms.cell.array, device="cuda")
        row = {"atoms": len(atoms)}
        row["cell_list_ms"] = median_ms(lambda: cell_list_edges(pos, cell, True, 6.0), 5)
        src, dst, sh = cell_list_edges(pos, cell, True, 6.0)
        # the torch path the pair kernels replaced, and its result
        with tuned({"cell_pairs": {"kernels": "torch"}}):
            row["cell_list_torch_ms"] = median_ms(lambda: cell_list_edges(pos, cell, True, 6.0), 5)
            ref = cell_list_edges(pos, cell, True, 6.0)
        row["kernels_equal_torch"] = all(torch.equal(a, b) for a, b in zip((src, dst, sh), ref))
        for launch in args.launches:  # "BWxWARPS": the pair kernels' launch, timed
            bw, warps = (int(v) for v in launch.split("x"))
            with pair_launch(bw, warps):
                ms = median_ms(lambda: cell_list_edges(pos, cell, True, 6.0), 5)
                got = cell_list_edges(pos, cell, True, 6.0)
            same = all(torch.equal(a, b) for a, b in zip(got, ref))
            row[f"cell_list_ms_{launch}"] = ms if same else f"{ms:.3f} (differs)"
        row["edges"] = int(src.shape[0])
        t0 = time.perf_counter()
        g = build_edge_graph(atoms.positions, atoms.cell.array, True, 6.0)
        row["vesin_cpu_ms"] = 1e3 * (time.perf_counter() - t0)
        key = lambda s, d, k: np.lexsort((k[:, 2], k[:, 1], k[:, 0], s, d))  # noqa: E731
        a = np.c_[g.dst, g.src, g.shifts][key(g.src, g.dst, g.shifts)]
        s_, d_, k_ = src.cpu().numpy(), dst.cpu().numpy(), sh.cpu().numpy()
        b = np.c_[d_, s_, k_][key(s_, d_, k_)]
        row["same_as_vesin"] = bool(a.shape == b.shape and np.array_equal(a, b))
        try:
            from vesin_torch import NeighborList

            vt = NeighborList(cutoff=6.0, full_list=True)
            row["vesin_torch_cuda_ms"] = median_ms(
                lambda: vt.compute(points=pos, box=cell, periodic=True, quantities="ijS"), 5
            )
        except Exception as exc:  # not installed, or no CUDA path
            row["vesin_torch_cuda"] = f"{type(exc).__name__}: {str(exc)[:100]}"
        res[str(n)] = row
        print(json.dumps(row), flush=True)
    Path(args.json).write_text(json.dumps(res))


def pair_launch(bw: int, warps: int):
    """The cell list's pair-kernel launch (candidates per slot and step, warps) in the block."""
    return tuned({"cell_pairs": {"width": bw, "warps": warps}})


def neighbour_cases() -> dict:
    """Edge sets on the GPU (mdband's cell list, vesin-torch) against vesin on the CPU for the
    boundary cases: cubic, triclinic, a cell thinner than the cutoff, mixed and open."""
    import torch

    from mdband.cell_list import cell_list_edges
    from mdband.graph import build_edge_graph

    tri = np.array([[4.0, 0, 0], [1.3, 3.8, 0], [0.7, -0.9, 4.4]])
    cases = {"cubic": (np.eye(3) * 9.0, [True] * 3), "triclinic": (tri * 2, [True] * 3),
             "thin": (tri * 0.6, [True] * 3), "mixed": (tri * 2, [True, False, True]),
             "open": (np.zeros((3, 3)), [False] * 3)}  # fmt: skip
    rng = np.random.default_rng(0)
    out = {}

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
        row = {"cell_list": bool(np.array_equal(key(s, d, k), want))}
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
        out[name] = row
    print(json.dumps({"cases": out}), flush=True)
    return out


# ------------------------------------------------------------------ orchestration
def sub(argv: list[str], env: dict | None = None, timeout: int = 400) -> int:
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv]
    print("+", " ".join(argv), flush=True)
    try:
        return subprocess.run(cmd, env={**os.environ, **(env or {})}, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"timed out: {argv[0]}", flush=True)
        return 124


def cmd_all(args) -> None:
    out = Path(os.environ.get("OUT", "benchmarks/out"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vs-deepmd-"))
    sub(["checkpoints", "--out", str(work), "--mini-json", str(args.mini_json)])
    sizes = [str(s) for s in args.sizes]
    md = ["--md-size", str(args.md_size), "--md-steps", str(args.md_steps)]
    results = {"sizes": args.sizes}
    if args.neighbours:
        sub(["neighbours", "--sizes", *map(str, args.neighbours), "--json", str(work / "nl.json")])
        if (work / "nl.json").exists():
            results["neighbours"] = json.loads((work / "nl.json").read_text())
    for name in args.configs:
        ck = str(work / f"{name}.pt")
        js = work / f"mdband-{name}.json"
        run_steps = [str(s) for s in args.run_steps]
        vsizes = [str(s) for s in args.variant_sizes]
        sub(["mdband", "--name", name, "--checkpoint", ck, "--sizes", *sizes, *md,
             "--json", str(js), "--repeat", str(args.repeat), "--skin", str(args.skin),
             "--profile", str(args.profile),
             *(["--run-steps", *run_steps] if run_steps else []),
             *(["--variants", *args.variants] if args.variants else []),
             *(["--variant-sizes", *vsizes] if vsizes else [])], timeout=560)  # fmt: skip
        if js.exists():
            results[f"mdband-{name}"] = json.loads(js.read_text())
        if not args.no_deepmd:
            js = work / f"deepmd-{name}.json"
            level = "3" if max(args.sizes) <= 4 else "2"
            env = {"DP_COMPILE_INFER": "1", "DP_TRITON_INFER": level}
            sub(["deepmd", "--name", name, "--checkpoint", ck, "--sizes", *sizes, *md,
                 "--json", str(js), "--repeat", str(args.repeat)], env=env,
                timeout=args.deepmd_timeout)  # fmt: skip
            if js.exists():
                results[f"deepmd-{name}"] = json.loads(js.read_text())
    (out / "vs_deepmd.json").write_text(json.dumps(results, indent=1))
    table(results, args)


def table(results: dict, args) -> None:
    print("\n== mdband vs deepmd-kit (ms; float32; energy + forces + virial) ==")
    for name in args.configs:
        m = results.get(f"mdband-{name}", {})
        d = results.get(f"deepmd-{name}", {})
        print(f"-- {name}: checks {m.get('checks')} settings {m.get('settings')}")
        for n in map(str, args.sizes):
            mr, dr = m.get("sizes", {}).get(n, {}), d.get("sizes", {}).get(n, {})
            call, dcall = mr.get("call_ms"), dr.get("call_ms")
            ratio = f"{call / dcall:.2f}x" if call and dcall else "-"
            print(f"  {mr.get('atoms', '?'):>7} atoms: mdband call {fmt(call)} "
                  f"(model step {fmt(mr.get('model_step_ms (list prebuilt)'))}, list "
                  f"{fmt(mr.get('neighbour_ms'))}, {fmt(mr.get('peak_gb'), '.1f')} GB) | deepmd "
                  f"{fmt(dcall)} {dr.get('error', '')} | ratio {ratio}")  # fmt: skip
        print(f"  ASE MD step ({m.get('ase_md_atoms')} atoms): mdband skin 0 "
              f"{fmt(m.get('ase_md_ms_skin0'))}, skin 1 {fmt(m.get('ase_md_ms_skin1'))} | "
              f"deepmd {fmt(d.get('ase_md_ms'))}")  # fmt: skip
        for steps, r in (m.get("mdband_run") or {}).items():
            print(f"  mdband run {steps} steps: {fmt(r.get('ms_per_step'))} ms/step, after the "
                  f"warm-up {fmt(r.get('steady_step_ms'))} (rc {r['rc']})")  # fmt: skip
        for v, r in (m.get("variants") or {}).items():
            calls = ", ".join(f"{k[8:]} atoms {fmt(t) if isinstance(t, float) else t}"
                              for k, t in r.items() if k.startswith("call_ms_"))  # fmt: skip
            print(f"  variant {v}: max force err {r['max_force_err_vs_fp64']:.2e} eV/A "
                  f"(rms {r['rms_force_err_vs_fp64']:.1e}); first call "
                  f"{r['first_call_s']:.1f} s; call ms: {calls}")  # fmt: skip
    for r in (results.get("neighbours") or {}).values():
        print(f"  neighbours {r}")


def fmt(x, spec=".1f") -> str:
    return "-" if x is None else format(x, spec)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sp = ap.add_subparsers(dest="cmd", required=True)
    a = sp.add_parser("all")
    a.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 12])
    a.add_argument("--configs", nargs="+", default=["default", "mini"])
    a.add_argument("--md-size", type=int, default=8)
    a.add_argument("--md-steps", type=int, default=20)
    a.add_argument("--run-steps", type=int, nargs="*", default=[200])
    a.add_argument("--skin", type=float, default=0.0)
    a.add_argument("--repeat", type=int, default=5)
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
    a.add_argument("--mini-json", default=str(MINI_JSON))
    c = sp.add_parser("checkpoints")
    c.add_argument("--out", required=True)
    c.add_argument("--mini-json", default=str(MINI_JSON))
    for name in ("deepmd", "mdband"):
        s = sp.add_parser(name)
        s.add_argument("--name", required=True)
        s.add_argument("--checkpoint", required=True)
        s.add_argument("--sizes", type=int, nargs="+", required=True)
        s.add_argument("--md-size", type=int, default=0)
        s.add_argument("--md-steps", type=int, default=0)
        s.add_argument("--json", required=True)
        s.add_argument("--repeat", type=int, default=5)
        s.add_argument("--skin", type=float, default=0.0)
        s.add_argument("--run-steps", type=int, nargs="*", default=[])
        s.add_argument("--device", default="cuda")
        s.add_argument("--profile", type=int, default=0, help="profile one call at this size")
        s.add_argument("--variants", nargs="*", default=[], choices=sorted(VARIANTS))
        s.add_argument("--variant-sizes", type=int, nargs="*", default=[])
    n = sp.add_parser("neighbours")
    n.add_argument("--sizes", type=int, nargs="+", required=True)
    n.add_argument("--json", required=True)
    n.add_argument("--launches", nargs="*", default=[], help="pair-kernel launches BWxWARPS")
    args = ap.parse_args(argv)
    {"all": cmd_all, "checkpoints": cmd_checkpoints, "deepmd": cmd_deepmd,
     "mdband": cmd_mdband, "neighbours": cmd_neighbours}[args.cmd](args)  # fmt: skip


if __name__ == "__main__":
    main()
