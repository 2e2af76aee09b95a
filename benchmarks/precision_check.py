"""Force and energy errors of each SO(2) product mode (``stack_precision``) against float64.

A trained model on a real structure, the modes on the GPU in float32 against the same model in
float64 on the same device; one JSON line per mode (kind ``precision``), last a summary line.

    python -m benchmarks.precision_check --model pretrained.pt --structure water.lmp \
        --replicate 3 --type-map O H
"""

from __future__ import annotations

import numpy as np

try:  # python -m benchmarks.precision_check, or imported
    from benchmarks import harness
except ModuleNotFoundError as exc:  # python benchmarks/precision_check.py: the harness beside it
    if exc.name != "benchmarks":
        raise
    import harness

MODES = ("tf32x3", "fp16x3", "fp16", "ieee")


def main(argv=None) -> None:
    import mdband
    from mdband.io.structure import read_structure

    ap = harness.parser("precision_check", __doc__, device="cuda")
    ap.add_argument("--model", required=True)
    ap.add_argument("--structure", required=True)
    ap.add_argument("--format", default=None, help="as mdband run --format")
    ap.add_argument("--type-map", nargs="*", default=None, help="as mdband run --type-map")
    ap.add_argument("--replicate", type=int, default=1, help="replicate the cell n×n×n")
    ap.add_argument("--rattle", type=float, default=0.05, help="Å (off equilibrium forces)")
    ap.add_argument("--modes", nargs="*", default=list(MODES))
    args = ap.parse_args(argv)
    results = harness.Results("precision_check", args.out, vars(args))
    ref_pot = mdband.load_model(args.model, device=args.device, dtype="float64")
    atoms = read_structure(
        args.structure,
        format=args.format,
        type_map=args.type_map,
        default_type_map=ref_pot.type_map,
    )  # as `mdband run` reads it
    atoms = atoms.repeat(args.replicate)
    atoms.rattle(args.rattle, seed=1)
    call = harness.evaluate_args(atoms)
    ref = ref_pot.evaluate(*call)
    fscale = float(np.abs(ref.forces).max())
    rows = {}
    for mode in args.modes:
        pot = mdband.load_model(
            args.model, device=args.device, dtype="float32", stack_precision=mode
        )
        r = pot.evaluate(*call)
        d = r.forces - ref.forces
        rows[mode] = {
            "atoms": len(atoms),
            "max_force_err": float(np.abs(d).max()),
            "rms_force_err": float(np.sqrt((d**2).mean())),
            "energy_err_per_atom": float(abs(r.energy - ref.energy)) / len(atoms),
            "max_force": fscale,
        }
        results.add("precision", mode=mode, **rows[mode])
    results.add("summary", max_force_err={m: r["max_force_err"] for m, r in rows.items()})


if __name__ == "__main__":
    main()
