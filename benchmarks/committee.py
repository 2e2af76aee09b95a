"""A committee of models against separate evaluations (issue 16).

Model: deepmd-kit's default DPA4 config, ``--models`` copies with different random weights
(float32); system: rattled diamond, 8·n³ atoms (``--size 8``: 4,096 atoms). Per frame:

* ``single``: the first model alone (``Potential.evaluate``, its own neighbour list);
* ``separate``: every model by ``Potential.evaluate`` (one neighbour list each), plus the
  deviation math on their results;
* ``committee``: ``Committee.evaluate`` (one neighbour list for all models, deviations);
* ``calculator``: ``CommitteeCalculator`` (skin 1 Å, deviations in every call), what an MD step
  with ``model_devi_every = 1`` costs.

Frames are slightly moved copies of one cell (MD-like, so CUDA graphs replay). The committee's
deviations are checked against those of the separate evaluations (bitwise: the same lists).

    python benchmarks/committee.py [--size 8] [--models 4] [--repeat 20] [--device cuda]
    python benchmarks/committee.py --tiny --device cpu --size 2 --repeat 3     # CPU smoke test

Writes ``$OUT/committee.json`` when ``OUT`` is set; exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch
from ase.build import bulk

from mdband.committee import Committee, CommitteeCalculator, model_deviation
from mdband.config import SeZMConfig
from mdband.testing.sezm import random_potential

CFG = SeZMConfig(type_map=("C",)).to_dict()
#: ``--tiny``: a small model to smoke-test this script on a CPU
TINY = SeZMConfig(type_map=("C",), channels=8, n_radial=4, l_schedule=(1,), mixing_layers=1,
                  rcut=3.0).to_dict()  # fmt: skip


def frames(n: int, count: int):
    base = bulk("C", "diamond", a=3.567, cubic=True) * (n, n, n)
    base.rattle(0.03, seed=0)
    rng = np.random.default_rng(1)
    out = []
    for _ in range(count):
        a = base.copy()
        a.positions += rng.normal(scale=0.005, size=a.positions.shape)
        out.append(a)
    return out


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, atoms_list, device: str) -> list[float]:
    out = []
    for atoms in atoms_list:
        sync(device)
        t = time.perf_counter()
        fn(atoms)
        sync(device)
        out.append(1e3 * (time.perf_counter() - t))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=8, help="8·n³ atoms")
    ap.add_argument("--models", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=20, help="timed frames per variant")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="small model (CPU smoke test)")
    args = ap.parse_args()
    cfg = TINY if args.tiny else CFG
    pots = [
        random_potential(cfg, seed=s, gain=0.5, device=args.device, dtype="float32")
        for s in range(args.models)
    ]
    committee = Committee(pots)
    calc = CommitteeCalculator(pots, skin=1.0)
    work = frames(args.size, args.warmup + args.repeat)
    n_atoms = len(work[0])

    def args_of(a):
        return a.positions, a.cell.array, True, a.numbers

    def single(a):
        return pots[0].evaluate(*args_of(a))

    def separate(a):
        res = [p.evaluate(*args_of(a)) for p in pots]
        return model_deviation(
            np.stack([r.forces for r in res]), np.stack([r.virial for r in res]),
            np.array([r.energy for r in res]),
        )  # fmt: skip

    def joint(a):
        return committee.evaluate(*args_of(a)).deviation

    def calculator(a):
        a = a.copy()
        a.calc = calc
        a.get_forces()
        return calc.results["max_devi_f"]

    variants = {"single": single, "separate": separate, "committee": joint,
                "calculator": calculator}  # fmt: skip
    report = {"n_atoms": n_atoms, "models": args.models, "device": args.device,
              "tiny": args.tiny, "repeat": args.repeat, "ms": {}}  # fmt: skip
    for name, fn in variants.items():
        for a in work[: args.warmup]:
            fn(a)
        ms = timed(fn, work[args.warmup :], args.device)
        report["ms"][name] = {"median": statistics.median(ms), "min": min(ms)}
        print(f"{name:>10}: {statistics.median(ms):9.2f} ms/frame (min {min(ms):.2f})", flush=True)
    a = work[-1]
    d_sep, d_joint = separate(a), joint(a)
    checks = {
        "deviation_rows_equal": d_sep.row() == d_joint.row(),
        "per_atom_equal": bool(np.array_equal(d_sep.devi_f, d_joint.devi_f)),
        "models_disagree": d_joint.max_devi_f > 0,
    }
    ms = report["ms"]
    report["checks"] = checks
    report["committee_over_separate"] = ms["committee"]["median"] / ms["separate"]["median"]
    report["committee_over_single"] = ms["committee"]["median"] / ms["single"]["median"]
    print(f"committee / separate {report['committee_over_separate']:.3f}, "
          f"committee / single {report['committee_over_single']:.2f}; checks {checks}")  # fmt: skip
    if torch.cuda.is_available() and args.device.startswith("cuda"):
        report["cuda_graphs"] = pots[0].cuda_graphs
        report["peak_gb"] = torch.cuda.max_memory_allocated() / 1e9
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "committee.json"), "w") as fh:
            json.dump(report, fh, indent=1)
    ok = all(checks.values())
    print("ALL CHECKS PASSED" if ok else "CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
