"""MD driver on the GPU: exact restarts with CUDA graphs, and ms per MD step.

Model: deepmd-kit's default DPA4 config (random weights, float32); system: rattled diamond.

* Restart check (64 atoms): 20 steps in one run == 10 steps + resume to 20 (a fresh potential,
  as a new process would have), bit for bit in positions, momenta and trajectory frames, for
  ``nvt-langevin`` without and with a Verlet skin. With graphs the whole run replays step 10 from
  a graph while the resumed run computes it eagerly, so this also checks replay == eager.
* Timing (512 atoms by default): ``mdband.md.run`` wall time per step (integrator, neighbour list,
  trajectory every 50 steps included), CUDA graphs on and off, skin 0 and 1 Å.

    python -m benchmarks.gpu_md [--size 4] [--steps 200]

Records (JSON lines): ``restart`` per skin, ``timing`` per (skin, graphs); exits 1 if a restart
check fails.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from ase.io import write

from mdband.io.h5md import H5MDReader
from mdband.md import RunConfig, run

try:  # python -m benchmarks.gpu_md, or imported (benchmarks.gpu_large_md)
    from benchmarks import harness
except ModuleNotFoundError as exc:  # python benchmarks/gpu_md.py: the harness beside it
    if exc.name != "benchmarks":
        raise
    import harness

#: the model's config (``--tiny``: the tiny one) and the device of every run
CFG = harness.models.config("default")
DEVICE = "cuda"


def structure(n: int, path: Path) -> Path:
    """:func:`benchmarks.harness.systems.diamond` of ``n`` written to ``path`` (extxyz)."""
    write(path, harness.diamond(n), format="extxyz")
    return path


def potential(sd, **options):
    """The model of :data:`CFG` with weights ``sd`` on :data:`DEVICE`, float32."""
    return harness.models.potential(CFG, sd, device=DEVICE, dtype="float32", **options)


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
    counts = harness.profiling.graph_counts(whole_pot) or {}
    return {
        "skin": skin,
        "state_bitwise": state,
        "frames_bitwise": same_frames(tmp / f"whole-{tag}.h5", tmp / f"split-{tag}.h5"),
        "graphs": whole_pot.cuda_graphs,
        "captures": counts.get("captures"),
        "replays": counts.get("replays"),
    }


def timing(sd, tmp: Path, xyz: Path, steps: int, skin: float, graphs: str) -> dict:
    """ms per step of one ``mdband.md.run`` of ``steps`` steps (wall clock, synchronised)."""
    pot = potential(sd, cuda_graphs=graphs)
    name = f"t-{graphs}-{skin:g}"
    cfg = config(tmp, xyz, name, steps, skin=skin, traj_every=50, checkpoint_every=steps)
    _, t = harness.once(lambda: run(cfg, potential=pot), DEVICE)
    counts = harness.profiling.graph_counts(pot) or {}
    return {
        "cuda_graphs": graphs,
        "skin": skin,
        "steps": steps,
        "ms_per_step": t.ms / steps,
        "captures": counts.get("captures"),
        "replays": counts.get("replays"),
    }


def main(argv=None) -> int:
    global CFG, DEVICE
    ap = harness.parser("gpu_md", __doc__, device="cuda", size=4, tiny=False)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args(argv)
    results = harness.Results("gpu_md", args.out, vars(args))
    DEVICE = args.device
    if args.tiny:
        CFG = harness.models.config("tiny")
    sd = harness.models.random_weights(CFG, seed=0, gain=0.5)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        small = structure(2, tmp / "small.xyz")
        for skin in (0.0, 1.0):
            results.add("restart", **restart_check(sd, tmp, small, skin))
        xyz = structure(args.size, tmp / "timing.xyz")
        for skin in (0.0, 1.0):
            for graphs in ("auto", "off"):
                row = timing(sd, tmp, xyz, args.steps, skin, graphs)
                results.add("timing", atoms=8 * args.size**3, **row)
    ok = all(
        r["state_bitwise"] and r["frames_bitwise"] and (DEVICE == "cpu" or r["graphs"] == "on")
        for r in results.of("restart")
    )
    print("restart checks:", "ALL CHECKS PASSED" if ok else "CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
