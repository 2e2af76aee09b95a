"""mdband beside deepmd-kit 3.2.0 on the CPU, as users call them (``Potential.evaluate`` against
``DeepPot.eval``, energy + forces + virial, neighbour list included in both).

Each (engine, model, cell, threads) runs in a fresh process, so its peak RSS is its own. Models:

* ``default`` and ``mini``: deepmd-kit's default DPA4 config and DPA4-Mini's descriptor on
  rattled diamond (8·n³ atoms, ``--sizes``), random-init checkpoints written by deepmd-kit in
  this run (``vs_deepmd checkpoints``: the same files the GPU comparison uses);
* ``water``: the trained smoke checkpoint ``dpa4-water-smoke/pretrained.pt`` on the first frame
  of ``deepmd-water/data_0`` (192 atoms).

    python -m benchmarks.cpu_vs_deepmd --deepmd-python <deepmd-kit venv>/bin/python \
        [--models default mini water] [--sizes 2 3] [--threads 1 2] [--repeat 5]

``--deepmd-python`` is an interpreter with deepmd-kit 3.2 (``../shared/tools/deepmd-reference``
builds one; ``--no-deepmd`` times mdband alone; ``--env NAME=VALUE …`` sets mdband's
environment, e.g. ``MDBAND_HOST_MEMORY=system``). Each run is this module's ``--worker`` in
that interpreter (the repository root on its ``PYTHONPATH``). One JSON line per run (kind
``run``, with minor page faults per call), then a table of median ms and the ratio mdband /
deepmd-kit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

try:  # python -m benchmarks.cpu_vs_deepmd, or imported
    from benchmarks import harness
except ModuleNotFoundError as exc:  # python benchmarks/cpu_vs_deepmd.py: the harness beside it
    if exc.name != "benchmarks":
        raise
    import harness


def worker(engine: str, model: str, cell: str, threads: int, repeat: int, dtype: str) -> dict:
    """One run, in this process: the first call, then ``repeat`` timed calls after one more
    (median ms), peak RSS and minor page faults per timed call."""
    import resource

    import torch

    torch.set_num_threads(threads)
    if cell.startswith("diamond"):
        atoms = harness.diamond(int(cell[len("diamond") :]))
        coord, box, symbols = atoms.positions, atoms.cell.array, atoms.get_chemical_symbols()
    else:  # a deepmd npy system: its first frame
        coord, box, symbols = harness.systems.npy_frame(Path(cell))
    if engine == "mdband":
        import mdband

        pot = mdband.load_model(model, device="cpu", dtype=dtype)

        def call():
            return pot.evaluate(coord, box, True, symbols)
    else:
        import numpy as np
        from deepmd.infer import DeepPot

        dp = DeepPot(model)
        at = np.array([dp.get_type_map().index(s) for s in symbols])

        def call():
            return dp.eval(coord.reshape(1, -1), box.reshape(1, 9), at)

    _, first = harness.once(call)
    call()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = harness.measure(call, "cpu", repeat=repeat, warmup=0)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "median_ms": t.ms,
        "first_s": first.ms / 1e3,
        "peak_rss_mb": usage.ru_maxrss / 1024.0,
        "atoms": len(symbols),
        "minor_faults_per_call": (usage.ru_minflt - faults) / repeat,
    }


def run(python: str, engine: str, model: str, cell: str, threads: int, args) -> dict:
    """:func:`worker` in a fresh process of ``python``; its result, or the error."""
    cmd = harness.commands.module(
        "cpu_vs_deepmd",
        "--worker",
        engine,
        model,
        cell,
        threads,
        args.repeat,
        args.dtype,
        python=python,
    )
    env = harness.commands.environment()
    if engine == "mdband":
        env.update(kv.split("=", 1) for kv in args.env)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    return json.loads(lines[-1])


def cases(args, ckdir: Path) -> list[tuple[str, str, str]]:
    """(label, checkpoint, cell) of every model and size asked for."""
    out = []
    for name in args.models:
        if name == "water":
            out.append(
                (
                    "water",
                    str(harness.models.WATER_MODEL),
                    str(harness.models.WATER_DATA / "data_0"),
                )
            )
        else:
            out += [(name, str(ckdir / f"{name}.pt"), f"diamond{n}") for n in args.sizes]
    return out


def main(argv=None) -> list[dict]:
    ap = harness.parser(
        "cpu_vs_deepmd", __doc__, dtype="float32", sizes=[2, 3], threads=[1, 2], repeat=5
    )
    ap.add_argument("--deepmd-python", help="an interpreter with deepmd-kit 3.2")
    ap.add_argument("--no-deepmd", action="store_true", help="time mdband alone")
    ap.add_argument("--checkpoints", help="a folder with default.pt and mini.pt (else made)")
    ap.add_argument(
        "--models",
        nargs="+",
        default=["default", "mini", "water"],
        choices=["default", "mini", "water"],
    )
    ap.add_argument(
        "--env",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="environment of the mdband runs, e.g. MDBAND_HOST_MEMORY=system",
    )
    ap.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:  # ENGINE MODEL CELL THREADS REPEAT DTYPE: one run, its result on stdout
        engine, model, cell, threads, repeat, dtype = args.worker
        print(json.dumps(worker(engine, model, cell, int(threads), int(repeat), dtype)))
        return []
    if not args.no_deepmd and not args.deepmd_python:
        ap.error("--deepmd-python is needed (or --no-deepmd)")
    engines = [("mdband", sys.executable)]
    if not args.no_deepmd:
        engines.append(("deepmd", args.deepmd_python))
    results = harness.Results("cpu_vs_deepmd", args.out, vars(args))
    with tempfile.TemporaryDirectory() as tmp:
        ckdir = Path(args.checkpoints or tmp)
        if not args.checkpoints and set(args.models) - {"water"}:
            maker = args.deepmd_python
            if maker is None:
                ap.error("--checkpoints is needed with --no-deepmd")
            cmd = harness.commands.module("vs_deepmd", "checkpoints", ckdir, python=maker)
            subprocess.run(cmd, check=True, capture_output=True, env=harness.commands.environment())
        for label, model, cell in cases(args, ckdir):
            for threads in args.threads:
                row = {"model": label, "cell": Path(cell).name, "threads": threads}
                for engine, python in engines:
                    row[engine] = run(python, engine, model, cell, threads, args)
                results.add("run", **row)
    rows = results.of("run")
    print("\n| model | cell | atoms | threads | mdband ms | deepmd-kit ms | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        m, d = r["mdband"], r.get("deepmd", {})
        ratio = m["median_ms"] / d["median_ms"] if "median_ms" in m and "median_ms" in d else None
        print(
            f"| {r['model']} | {r['cell']} | {m.get('atoms', '-')} | {r['threads']} | "
            f"{_ms(m)} | {_ms(d)} | {'-' if ratio is None else f'{ratio:.2f}×'} |"
        )
    return rows


def _ms(r: dict) -> str:
    return f"{r['median_ms']:,.0f}" if "median_ms" in r else r.get("error", "-")[:40]


if __name__ == "__main__":
    main()
