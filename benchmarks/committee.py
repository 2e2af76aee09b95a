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

    python -m benchmarks.committee [--size 8] [--models 4] [--repeat 20] [--device cuda]
    python -m benchmarks.committee --tiny --device cpu --size 2 --repeat 3     # CPU smoke test

One JSON line per variant (kind ``variant``: median and fastest ms per frame), then the checks
and ratios (kind ``summary``); exits 1 if a check fails.
"""

from __future__ import annotations

import numpy as np

from mdband.committee import Committee, CommitteeCalculator, model_deviation

try:  # python -m benchmarks.committee, or imported
    from benchmarks import harness
except ModuleNotFoundError as exc:  # python benchmarks/committee.py: the harness beside it
    if exc.name != "benchmarks":
        raise
    import harness


def main(argv=None) -> int:
    ap = harness.parser(
        "committee", __doc__, device="cuda", size=8, repeat=20, warmup=3, tiny=False
    )
    ap.add_argument("--models", type=int, default=4)
    args = ap.parse_args(argv)
    results = harness.Results("committee", args.out, vars(args))
    cfg = harness.models.config("tiny" if args.tiny else "default")
    pots = [
        harness.models.potential(cfg, seed=s, device=args.device, dtype="float32")
        for s in range(args.models)
    ]
    committee = Committee(pots)
    calc = CommitteeCalculator(pots, skin=1.0)
    base = harness.diamond(args.size)
    work = harness.systems.moved_copies(base, args.warmup + args.repeat)
    n_atoms = len(base)
    clock = harness.timer.timer(args.device)
    args_of = harness.evaluate_args

    def single(a):
        return pots[0].evaluate(*args_of(a))

    def separate(a):
        res = [p.evaluate(*args_of(a)) for p in pots]
        return model_deviation(
            np.stack([r.forces for r in res]),
            np.stack([r.virial for r in res]),
            np.array([r.energy for r in res]),
        )

    def joint(a):
        return committee.evaluate(*args_of(a)).deviation

    def calculator(a):
        a = a.copy()
        a.calc = calc
        a.get_forces()
        return calc.results["max_devi_f"]

    variants = {
        "single": single,
        "separate": separate,
        "committee": joint,
        "calculator": calculator,
    }
    ms = {}
    with harness.PeakMemory(args.device) as mem:
        for name, fn in variants.items():
            frames = iter(work)  # each call a new frame: warm-up frames first
            t = clock.measure(
                lambda fn=fn, frames=frames: fn(next(frames)), args.repeat, args.warmup
            )
            ms[name] = t.ms
            results.add(
                "variant",
                variant=name,
                atoms=n_atoms,
                models=args.models,
                ms_per_frame=t.ms,
                min_ms_per_frame=t.min(),
            )
    a = work[-1]
    d_sep, d_joint = separate(a), joint(a)
    checks = {
        "deviation_rows_equal": d_sep.row() == d_joint.row(),
        "per_atom_equal": bool(np.array_equal(d_sep.devi_f, d_joint.devi_f)),
        "models_disagree": d_joint.max_devi_f > 0,
    }
    summary = results.add(
        "summary",
        atoms=n_atoms,
        checks=checks,
        committee_over_separate=ms["committee"] / ms["separate"],
        committee_over_single=ms["committee"] / ms["single"],
        cuda_graphs=pots[0].cuda_graphs,
        peak_gb=mem.peak_gb,
    )
    for name, t in ms.items():
        print(f"{name:>10}: {t:9.2f} ms/frame", flush=True)
    print(
        f"committee / separate {summary['committee_over_separate']:.3f}, "
        f"committee / single {summary['committee_over_single']:.2f}; checks {checks}"
    )
    ok = all(checks.values())
    print("ALL CHECKS PASSED" if ok else "CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
