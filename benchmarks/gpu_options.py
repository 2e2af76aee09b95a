"""The model options on the GPU: float32 forces against float64, CUDA against the CPU, band
against dense, for one checkpoint of each option (issue 45, item 1).

For every model it loads the checkpoint four times (CPU float64 as the reference; CUDA float64,
CUDA float32 band and CUDA float32 dense) and evaluates the same frames through
:class:`mdband.Calculator` (so a charge/spin model reads ``atoms.info["charge"]`` and
``["spin"]`` as users give them). Per model it reports:

* ``f32_force_maxabs`` (eV/Å) and ``f32_force_rel``: the largest |F32 − F64| over the frames, and
  that over the largest |F64| (the force scale); ``f32_energy_rel``: |E32 − E64| / |E64|;
* ``cuda64_force_maxabs``: CUDA float64 against CPU float64 (the kernels in float64), and
  ``cuda64_torch_force_maxabs`` the same with the kernels off (``kernels="torch"``);
* ``band_dense_bitwise``: energy, forces and virial of the band and dense layouts identical.

A model passes when ``f32_force_rel`` ≤ ``--f32-tol`` (default 2e-3), ``cuda64_force_maxabs``
≤ 1e-8 eV/Å and band == dense bitwise. The default models are the repository's option
fixtures (ZBL bridging, ``lebedev_quadrature`` false, charge/spin, the 2026-09 preset options,
the DPA-4.0-Pro-like options) on their fixture frames; ``--checkpoints NAME=PATH ...`` adds
deepmd-kit checkpoints of type map ["C"] or larger (diamond cells of 64 atoms), e.g. the default
config and DPA4-Mini written by ``vs_deepmd.py checkpoints``.

    python3 -m benchmarks.gpu_options [--checkpoints default=ck/default.pt mini=ck/mini.pt]
        [--device cpu] [--out $OUT/gpu_options.jsonl]

Exit status 1 when a model fails or errors (every model is still tried).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

try:
    from benchmarks import harness
except ModuleNotFoundError as exc:  # python benchmarks/gpu_options.py: the harness beside it
    if exc.name != "benchmarks":
        raise
    import harness

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "deepmd"

#: name -> (checkpoint, frames file, frame indices, atoms.info to set)
FIXTURES = {
    "zbl": ("zbl.pt", "zbl_structures.extxyz", [0, 1, 2], {}),
    "lebedev_false": ("s2ffn_e3nn.pt", "structures.extxyz", [0, 1], {}),
    "charge_spin": ("chgspin.pt", "structures.extxyz", [0, 1], {"charge": 1, "spin": 2}),
    "preset_0911": ("preset_0911.pt", "structures.extxyz", [0, 1], {}),
    "pro_like": ("pro_like.pt", "structures.extxyz", [0, 1], {}),
}


def models(extra: list[str]) -> dict[str, tuple[Path, list, dict]]:
    """name -> (checkpoint, frames, atoms.info) of every model to check."""
    import ase.io

    out = {}
    for name, (ck, frames, idx, info) in FIXTURES.items():
        path = FIX / ck
        if not path.exists():
            print(f"{name}: {path.name} not in this checkout, left out", flush=True)
            continue
        images = ase.io.read(FIX / frames, index=":")
        out[name] = (path, [images[i] for i in idx], info)
    for item in extra:
        name, _, ck = item.partition("=")
        out[name] = (Path(ck), [harness.diamond(2, seed=0), harness.diamond(2, seed=1)], {})
    return out


def evaluate(pot, frames, info) -> list[dict]:
    """Energy, forces, virial of every frame through the ASE calculator."""
    from mdband import Calculator

    rows = []
    for atoms in frames:
        a = atoms.copy()
        a.info.update(info)
        a.calc = Calculator(pot)
        row = {"energy": a.get_potential_energy(), "forces": a.get_forces()}
        row["virial"] = -a.get_stress(voigt=False) * a.get_volume() if a.pbc.all() else None
        rows.append(row)
    return rows


def check(name, path, frames, info, f32_tol, device="cuda") -> dict:
    import mdband

    ref = evaluate(mdband.load_model(path, device="cpu", dtype="float64"), frames, info)
    c64 = evaluate(mdband.load_model(path, device=device, dtype="float64"), frames, info)
    c64t = evaluate(
        mdband.load_model(path, device=device, dtype="float64", kernels="torch"), frames, info
    )
    band = evaluate(
        mdband.load_model(path, device=device, dtype="float32", rotation_layout="band"),
        frames,
        info,
    )
    dense = evaluate(
        mdband.load_model(path, device=device, dtype="float32", rotation_layout="dense"),
        frames,
        info,
    )
    scale = max(float(np.abs(r["forces"]).max()) for r in ref)
    f32 = max(float(np.abs(b["forces"] - r["forces"]).max()) for b, r in zip(band, ref))
    e32 = max(
        abs(b["energy"] - r["energy"]) / max(abs(r["energy"]), 1e-12) for b, r in zip(band, ref)
    )
    f64 = max(float(np.abs(c["forces"] - r["forces"]).max()) for c, r in zip(c64, ref))
    f64t = max(float(np.abs(c["forces"] - r["forces"]).max()) for c, r in zip(c64t, ref))

    def same(x, y) -> bool:
        return (
            x["energy"] == y["energy"]
            and np.array_equal(x["forces"], y["forces"])
            and (x["virial"] is None or np.array_equal(x["virial"], y["virial"]))
        )

    row = {
        "model": name,
        "atoms": [len(a) for a in frames],
        "force_scale": scale,
        "f32_force_maxabs": f32,
        "f32_force_rel": f32 / max(scale, 1e-12),
        "f32_energy_rel": e32,
        "cuda64_force_maxabs": f64,
        "cuda64_torch_force_maxabs": f64t,
        "band_dense_bitwise": all(same(b, d) for b, d in zip(band, dense)),
    }
    row["passed"] = bool(
        row["f32_force_rel"] <= f32_tol and f64 <= 1e-8 and row["band_dense_bitwise"]
    )
    return row


def main(argv=None) -> int:
    ap = harness.parser("gpu_options", __doc__, device="cuda")
    ap.add_argument("--checkpoints", nargs="*", default=[], metavar="NAME=PATH")
    ap.add_argument("--f32-tol", type=float, default=2e-3)
    args = ap.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_options needs a CUDA device (or --device cpu for a dry run)", file=sys.stderr)
        return 2
    results = harness.Results("gpu_options", args.out, vars(args))
    rows, status = [], 0
    for name, (path, frames, info) in models(args.checkpoints).items():
        t0 = time.perf_counter()  # the wall time of the model's checks, not a benchmark figure
        try:
            row = check(name, path, frames, info, args.f32_tol, args.device)
        except Exception as exc:  # noqa: BLE001 - report and go on to the next model
            row = {"model": name, "passed": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
        row["seconds"] = round(time.perf_counter() - t0, 1)
        status |= not row["passed"]
        rows.append(row)
        results.add("options", **row)
    print("\n== model options on the GPU (float32 vs float64 forces, band vs dense) ==")
    for r in rows:
        if "error" in r:
            print(f"  {r['model']:>14}: ERROR {r['error']}")
            continue
        print(
            f"  {r['model']:>14}: f32 forces {r['f32_force_maxabs']:.2e} eV/Å "
            f"({r['f32_force_rel']:.1e} of {r['force_scale']:.3g}), energy rel "
            f"{r['f32_energy_rel']:.1e}; cuda f64 {r['cuda64_force_maxabs']:.1e} (torch "
            f"{r['cuda64_torch_force_maxabs']:.1e}); band == dense "
            f"{r['band_dense_bitwise']} -> {'PASSED' if r['passed'] else 'FAILED'}"
        )
    print("options: all passed" if not status else "options: FAILED")
    return status


if __name__ == "__main__":
    sys.exit(main())
