"""MD driver on the GPU: exact restarts with CUDA graphs, and ms per MD step.

Model: deepmd-kit's default DPA4 config (random weights, float32); system: rattled diamond.

* Restart check (64 atoms): 20 steps in one run == 10 steps + resume to 20 (a fresh potential,
  as a new process would have), bit for bit in positions, momenta and trajectory frames, for
  ``nvt-langevin`` without and with a Verlet skin. With graphs the whole run replays step 10 from
  a graph while the resumed run computes it eagerly, so this also checks replay == eager.
* Timing (512 atoms by default): ``mdband.md.run`` wall time per step (integrator, neighbour list,
  trajectory every 50 steps included), CUDA graphs on and off, skin 0 and 1 Å.

    python benchmarks/gpu_md.py [--size 4] [--steps 200]

Writes ``$OUT/gpu_md.json`` when ``OUT`` is set; exits 1 if a restart check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from ase.build import bulk
from ase.io import write

from mdband.config import SeZMConfig
from mdband.io.h5md import H5MDReader
from mdband.md import RunConfig, run
from mdband.model.factory import build_sezm
from mdband.potential import Potential
from mdband.testing.sezm import random_potential

CFG = SeZMConfig(type_map=("C",)).to_dict()
#: ``--tiny``: a small model to smoke-test this script on a CPU
TINY = SeZMConfig(type_map=("C",), channels=8, n_radial=4, l_schedule=(1,), mixing_layers=1,
                  rcut=3.0).to_dict()  # fmt: skip
DEVICE = "cuda"


def structure(n: int, path: Path) -> Path:
    a = bulk("C", "diamond", a=3.567, cubic=True) * (n, n, n)
    a.rattle(0.03, seed=0)
    write(path, a, format="extxyz")
    return path


def potential(sd, **options) -> Potential:
    model = build_sezm(CFG, sd, options)
    return Potential(model, kind="sezm", type_map=["C"], cutoff=CFG["rcut"], config=CFG,
                     device=DEVICE, dtype="float32")  # fmt: skip


def config(tmp: Path, xyz: Path, name: str, steps: int, **kw) -> RunConfig:
    settings = dict(
        structure=str(xyz),
        model="random",
        ensemble="nvt-langevin",
        temperature=1500.0,
        friction=0.01,
        timestep=0.5,
        seed=3,
        traj_every=5,
        checkpoint_every=5,
        trajectory=str(tmp / f"{name}.h5"),
        checkpoint=str(tmp / f"{name}.ckpt"),
        device=DEVICE,
        dtype="float32",
        progress=False,
        steps=steps,
    )
    settings.update(kw)
    return RunConfig(**settings)


def same_frames(a: Path, b: Path) -> bool:
    with H5MDReader(a) as ra, H5MDReader(b) as rb:
        if not np.array_equal(ra.steps, rb.steps):
            return False
        for fa, fb in zip(ra, rb):
            for name in ("positions", "velocities", "forces"):
                if getattr(fa, name).tobytes() != getattr(fb, name).tobytes():
                    return False
    return True


def restart_check(sd, tmp: Path, xyz: Path, skin: float, steps: int = 20) -> dict:
    """``steps`` steps in one run against half of them + ``--resume`` (frames and checkpoints
    every 5 steps, or every step for a length that is not a multiple of 10)."""
    tag = f"skin{skin:g}"
    every = 5 if steps % 10 == 0 else 1
    kw = dict(skin=skin, traj_every=every, checkpoint_every=every)
    whole_pot = potential(sd)
    whole = run(config(tmp, xyz, f"whole-{tag}", steps, **kw), potential=whole_pot)
    run(config(tmp, xyz, f"split-{tag}", steps // 2, **kw), potential=potential(sd))
    second = run(
        config(tmp, xyz, f"split-{tag}", steps, resume=True, **kw), potential=potential(sd)
    )
    state = all(
        getattr(whole.atoms, g)().tobytes() == getattr(second.atoms, g)().tobytes()
        for g in ("get_positions", "get_momenta")
    )
    steps = whole_pot._steps
    return {
        "skin": skin,
        "state_bitwise": state,
        "frames_bitwise": same_frames(tmp / f"whole-{tag}.h5", tmp / f"split-{tag}.h5"),
        "graphs": whole_pot.cuda_graphs,
        "captures": None if steps is None else steps.n_captures,
        "replays": None if steps is None else steps.n_replays,
    }


def timing(sd, tmp: Path, xyz: Path, steps: int, skin: float, graphs: str) -> dict:
    pot = potential(sd, cuda_graphs=graphs)
    name = f"t-{graphs}-{skin:g}"
    cfg = config(tmp, xyz, name, steps, skin=skin, traj_every=50, checkpoint_every=steps)
    t0 = time.perf_counter()
    run(cfg, potential=pot)
    total = time.perf_counter() - t0
    s = pot._steps
    return {
        "cuda_graphs": graphs,
        "skin": skin,
        "steps": steps,
        "ms_per_step": 1e3 * total / steps,
        "captures": None if s is None else s.n_captures,
        "replays": None if s is None else s.n_replays,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4, help="timing cell: 8·n³ atoms")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="small model (CPU smoke test)")
    args = ap.parse_args()
    global CFG, DEVICE
    DEVICE = args.device
    if args.tiny:
        CFG = TINY
    sd = random_potential(CFG, seed=0, gain=0.5).model.state_dict()
    out = {"restart": [], "timing": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        small = structure(2, tmp / "small.xyz")
        for skin in (0.0, 1.0):
            row = restart_check(sd, tmp, small, skin)
            out["restart"].append(row)
            print("restart", row, flush=True)
        xyz = structure(args.size, tmp / "timing.xyz")
        for skin in (0.0, 1.0):
            for graphs in ("auto", "off"):
                row = timing(sd, tmp, xyz, args.steps, skin, graphs)
                row["n_atoms"] = 8 * args.size**3
                out["timing"].append(row)
                print("timing", row, flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_md.json"), "w") as fh:
            json.dump(out, fh, indent=1)
    ok = all(
        r["state_bitwise"] and r["frames_bitwise"] and (DEVICE == "cpu" or r["graphs"] == "on")
        for r in out["restart"]
    )
    print("restart checks:", "ALL CHECKS PASSED" if ok else "CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
