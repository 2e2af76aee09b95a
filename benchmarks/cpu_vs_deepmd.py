"""mdband beside deepmd-kit 3.2.0 on the CPU, as users call them (``Potential.evaluate`` against
``DeepPot.eval``, energy + forces + virial, neighbour list included in both).

Each (engine, model, cell, threads) runs in a fresh process, so its peak RSS is its own. Models:

* ``default`` and ``mini``: deepmd-kit's default DPA4 config and DPA4-Mini's descriptor on
  rattled diamond (8·n³ atoms, ``--sizes``), random-init checkpoints written by deepmd-kit in
  this run (``vs_deepmd.py checkpoints``: the same files the GPU comparison uses);
* ``water``: the trained smoke checkpoint ``dpa4-water-smoke/pretrained.pt`` on the first frame
  of ``deepmd-water/data_0`` (192 atoms).

    python benchmarks/cpu_vs_deepmd.py --deepmd-python <deepmd-kit venv>/bin/python \
        [--models default mini water] [--sizes 2 3] [--threads 1 2] [--repeat 5]

``--deepmd-python`` is an interpreter with deepmd-kit 3.2 (``../shared/tools/deepmd-reference``
builds one; ``--no-deepmd`` times mdband alone; ``--env NAME=VALUE …`` sets mdband's
environment, e.g. ``MDBAND_HOST_MEMORY=system``). Prints one JSON line per run (with minor page
faults per call), then a table of median ms and the ratio mdband / deepmd-kit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent / ".." / "shared" / "data"

WORKER = r"""
import json, resource, sys, time
import numpy as np, torch
engine, model, cell, threads, repeat, dtype = sys.argv[1:7]
torch.set_num_threads(int(threads))
if cell.startswith("diamond"):
    from ase.build import bulk
    n = int(cell[len("diamond"):])
    atoms = bulk("C", "diamond", a=3.567, cubic=True) * (n, n, n)
    atoms.rattle(0.03, seed=0)
    coord, box = atoms.positions, atoms.cell.array
    symbols = atoms.get_chemical_symbols()
else:  # a deepmd npy system: its first frame
    coord = np.load(cell + "/set.000/coord.npy")[0].reshape(-1, 3)
    box = np.load(cell + "/set.000/box.npy")[0].reshape(3, 3)
    tmap = open(cell + "/type_map.raw").read().split()
    symbols = [tmap[t] for t in np.loadtxt(cell + "/type.raw", dtype=int).reshape(-1)]
if engine == "mdband":
    import mdband
    pot = mdband.load_model(model, device="cpu", dtype=dtype)
    call = lambda: pot.evaluate(coord, box, True, symbols)
else:
    from deepmd.infer import DeepPot
    dp = DeepPot(model)
    at = np.array([dp.get_type_map().index(s) for s in symbols])
    call = lambda: dp.eval(coord.reshape(1, -1), box.reshape(1, 9), at)
t0 = time.perf_counter(); call(); first = time.perf_counter() - t0
call()
ts = []
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(int(repeat)):
    t0 = time.perf_counter(); call(); ts.append(time.perf_counter() - t0)
usage = resource.getrusage(resource.RUSAGE_SELF)
print("RESULT", json.dumps({"median_ms": 1e3 * float(np.median(ts)), "first_s": first,
      "peak_rss_mb": usage.ru_maxrss / 1024.0, "atoms": len(symbols),
      "minor_faults_per_call": (usage.ru_minflt - faults) / int(repeat)}))
"""


def run(python: str, engine: str, model: str, cell: str, threads: int, args) -> dict:
    cmd = [python, "-c", WORKER, engine, model, cell, str(threads), str(args.repeat), args.dtype]
    env = dict(os.environ)
    if engine == "mdband":
        env.update(kv.split("=", 1) for kv in args.env)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    return json.loads(lines[-1][len("RESULT ") :])


def cases(args, ckdir: Path) -> list[tuple[str, str, str]]:
    """(label, checkpoint, cell) of every model and size asked for."""
    out = []
    for name in args.models:
        if name == "water":
            out.append(("water", str(SHARED / "dpa4-water-smoke" / "pretrained.pt"),
                        str(SHARED / "deepmd-water" / "data_0")))  # fmt: skip
        else:
            out += [(name, str(ckdir / f"{name}.pt"), f"diamond{n}") for n in args.sizes]
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepmd-python", help="an interpreter with deepmd-kit 3.2")
    ap.add_argument("--no-deepmd", action="store_true", help="time mdband alone")
    ap.add_argument("--checkpoints", help="a folder with default.pt and mini.pt (else made)")
    ap.add_argument("--models", nargs="+", default=["default", "mini", "water"])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument(
        "--env", nargs="*", default=[], metavar="NAME=VALUE",
        help="environment of the mdband runs, e.g. MDBAND_HOST_MEMORY=system",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if not args.no_deepmd and not args.deepmd_python:
        ap.error("--deepmd-python is needed (or --no-deepmd)")
    engines = [("mdband", sys.executable)]
    if not args.no_deepmd:
        engines.append(("deepmd", args.deepmd_python))
    with tempfile.TemporaryDirectory() as tmp:
        ckdir = Path(args.checkpoints or tmp)
        if not args.checkpoints and set(args.models) - {"water"}:
            maker = args.deepmd_python
            if maker is None:
                ap.error("--checkpoints is needed with --no-deepmd")
            cmd = [maker, str(HERE / "vs_deepmd.py"), "checkpoints", "--out", str(ckdir)]
            subprocess.run(cmd, check=True, capture_output=True)
        rows = []
        for label, model, cell in cases(args, ckdir):
            for threads in args.threads:
                row = {"model": label, "cell": Path(cell).name, "threads": threads}
                for engine, python in engines:
                    row[engine] = run(python, engine, model, cell, threads, args)
                print(json.dumps(row), flush=True)
                rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("\n| model | cell | atoms | threads | mdband ms | deepmd-kit ms | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        m, d = r["mdband"], r.get("deepmd", {})
        ratio = m["median_ms"] / d["median_ms"] if "median_ms" in m and "median_ms" in d else None
        print(f"| {r['model']} | {r['cell']} | {m.get('atoms', '-')} | {r['threads']} | "
              f"{_ms(m)} | {_ms(d)} | {'-' if ratio is None else f'{ratio:.2f}×'} |")  # fmt: skip


def _ms(r: dict) -> str:
    return f"{r['median_ms']:,.0f}" if "median_ms" in r else r.get("error", "-")[:40]


if __name__ == "__main__":
    main()
