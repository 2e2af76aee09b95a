"""A long `mdband run --device cuda` of a large cell, in two device calls joined by a restart.

Model: deepmd-kit's default DPA4 config (random weights, seed 0, float32, written to
``STATE/model.mdband`` identically in both phases); system: rattled diamond, 8·n³ atoms (n = 24:
110,592 atoms, chunked under the memory budget). One call cannot hold 100 steps of that cell
(about 7 s per step on an H200 against a 10-minute limit), so:

* ``--phase start``: (1) the restart check at this size, with the Python API as
  ``gpu_md.py`` does: ``--check-steps`` steps in one run == half of them + ``--resume`` (a fresh
  potential), bit for bit in positions, momenta and trajectory frames; (2) ``mdband run`` as a
  user types it, steps 0 → ``--split`` with an H5MD trajectory and a checkpoint, into
  ``STATE`` (a folder inside the repository that git ignores: its checkpoint and trajectory
  come back through ``$OUT`` and travel to the next call by ``carry``).
* ``--phase finish``: ``mdband run --resume`` from that checkpoint to ``--steps``; then the
  trajectory must hold every frame from 0 to ``--steps`` once, in order.

    python -m benchmarks.gpu_large_md --phase start  [--size 24] [--split 50] [--steps 100]
    python -m benchmarks.gpu_large_md --join DIR   (here, between the calls: DIR the first
        call's returned files, parts joined into STATE)
    python -m benchmarks.gpu_large_md --phase finish [--size 24] [--steps 100]

The checkpoint records its outputs' absolute paths: both calls must run in a checkout at the
same path (the device machine's is). Records (JSON lines): ``restart_check`` and ``run``
(start), ``run`` and ``trajectory`` (finish); when the environment sets ``OUT`` (the device
machine's output folder) the checkpoint, trajectory and log are copied there (a file above
``--part-bytes`` in parts ``NAME.partK``); exits 1 when a check fails.
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from mdband.io.h5md import H5MDReader

try:  # python -m benchmarks.gpu_large_md, or imported
    from benchmarks import gpu_md, harness
except ModuleNotFoundError as exc:  # python benchmarks/gpu_large_md.py: the modules beside it
    if exc.name != "benchmarks":
        raise
    import gpu_md
    import harness

#: the run's folder (``--state``): in the repository, ignored by git, carried to the next call
STATE = Path(__file__).resolve().parent.parent / ".large-md"
KEEP = ("run.ckpt", "run.h5", "run.log")  # what comes back and travels (no lock files)


def main_run(args, resume: bool) -> dict:
    """``mdband run`` of the big cell into STATE; its own ms/step summary, and wall time."""
    cmd = [
        sys.executable,
        "-m",
        "mdband.cli",
        "run",
        "--structure",
        str(STATE / "start.xyz"),
        "--model",
        str(STATE / "model.mdband"),
        "--device",
        args.device,
        "--ensemble",
        "nvt-langevin",
        "--temperature",
        "300",
        "--seed",
        "7",
        "--timestep",
        "0.5",
        "--steps",
        str(args.steps if resume else args.split),
        "--traj-every",
        str(args.traj_every),
        "--checkpoint-every",
        str(args.split),
        "--trajectory",
        str(STATE / "run.h5"),
        "--checkpoint",
        str(STATE / "run.ckpt"),
        "--log",
        str(STATE / "run.log"),
        "--no-progress",
        "--guard-distance",
        "0",
        "--max-temperature",
        "0",
    ]
    if resume:
        cmd.append("--resume")
    p, t = harness.once(lambda: subprocess.run(cmd, capture_output=True, text=True))
    row = {"resume": resume, "rc": p.returncode, "process_s": t.ms / 1e3}
    times = harness.commands.run_summary(p.stdout + p.stderr)
    row.update({k: times[k] for k in ("step_ms", "model_ms") if k in times})
    if p.returncode:
        row["stderr"] = p.stderr[-600:]
    return row


def frames_complete(path: Path, last: int, every: int) -> dict:
    """Whether the trajectory holds the frames 0, every, 2·every, …, last once, in order."""
    with H5MDReader(path) as r:
        steps = np.asarray(r.steps).tolist()
        finite = all(np.isfinite(f.positions).all() for f in r)
    want = list(range(0, last + 1, every))
    return {"steps": steps, "complete": steps == want, "finite": bool(finite)}


def copy_in_parts(path: Path, dest: Path, part_bytes: int) -> None:
    """Copy ``path`` into ``dest``; a file above ``part_bytes`` as ``NAME.part0``, ``.part1``,
    … (the device returns files of at most 16 MiB: the trajectory of 110,592 atoms is larger).
    :func:`join_parts` puts them together."""
    data = path.read_bytes()
    if len(data) <= part_bytes:
        shutil.copy2(path, dest / path.name)
        return
    for k in range(0, -(-len(data) // part_bytes)):
        (dest / f"{path.name}.part{k}").write_bytes(data[k * part_bytes : (k + 1) * part_bytes])


def join_parts(src: Path, state: Path) -> list[str]:
    """Copy what came back from a call (``src``) into ``state``, parts joined; the names."""
    state.mkdir(parents=True, exist_ok=True)
    names = []
    for name in KEEP:
        parts = sorted(src.glob(f"{name}.part*"), key=lambda q: int(q.suffix[5:]))
        if parts:
            (state / name).write_bytes(b"".join(q.read_bytes() for q in parts))
        elif (src / name).exists():
            shutil.copy2(src / name, state / name)
        else:
            continue
        names.append(name)
    return names


def start(args) -> dict:
    shutil.rmtree(STATE, ignore_errors=True)  # a fresh run: nothing of an earlier one
    STATE.mkdir()
    gpu_md.DEVICE = args.device
    pot = model()
    pot.save(str(STATE / "model.mdband"))
    gpu_md.structure(args.size, STATE / "start.xyz")
    out = {"atoms": 8 * args.size**3}
    with tempfile.TemporaryDirectory() as d:
        sd, xyz = pot.model.state_dict(), STATE / "start.xyz"
        row, t = harness.once(
            lambda: gpu_md.restart_check(sd, Path(d), xyz, 0.0, args.check_steps), args.device
        )
        row["seconds"] = t.ms / 1e3
    out["restart_check"] = row
    del pot
    gc.collect()  # the run's process gets the GPU: nothing of the check stays cached here
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    out["run"] = main_run(args, resume=False)
    return out


def finish(args) -> dict:
    out = {"atoms": 8 * args.size**3}
    gpu_md.structure(args.size, STATE / "start.xyz")  # same bytes as in the first call
    model().save(str(STATE / "model.mdband"))
    out["run"] = main_run(args, resume=True)
    out["trajectory"] = frames_complete(STATE / "run.h5", args.steps, args.traj_every)
    return out


def model():
    """The run's model: :data:`gpu_md.CFG`, random weights of seed 0 (the same bytes in
    both calls), on the CPU (the file is what the run loads)."""
    return harness.models.potential(gpu_md.CFG, seed=0, gain=0.5, dtype="float64")


def main(argv=None) -> int:
    global STATE
    ap = harness.parser("gpu_large_md", __doc__, device="cuda", size=24, tiny=False)
    ap.add_argument("--steps", type=int, default=100, help="the run's total length")
    ap.add_argument("--split", type=int, default=50, help="steps of the first call")
    ap.add_argument("--traj-every", type=int, default=25)
    ap.add_argument("--check-steps", type=int, default=4, help="length of the restart check")
    ap.add_argument("--state", type=Path, default=STATE, help="the run's folder")
    ap.add_argument(
        "--part-bytes",
        type=int,
        default=15 << 20,
        help="files above this come back in parts (NAME.partK)",
    )
    ap.add_argument(
        "--join",
        type=Path,
        metavar="DIR",
        help="only put DIR's returned files (parts joined) into --state",
    )
    ap.add_argument("--phase", choices=("start", "finish"))
    args = ap.parse_args(argv)
    STATE = args.state.resolve()
    if args.join:
        print("joined:", ", ".join(join_parts(args.join, STATE)))
        return 0
    if args.phase is None:
        ap.error("--phase is required (or --join)")
    if args.tiny:
        gpu_md.CFG = harness.models.config("tiny")
    if args.split % args.traj_every or args.steps % args.traj_every:
        ap.error("--split and --steps must be multiples of --traj-every")
    results = harness.Results("gpu_large_md", args.out, vars(args))
    out = start(args) if args.phase == "start" else finish(args)
    for kind, row in out.items():
        if kind != "atoms":
            results.add(kind, phase=args.phase, atoms=out["atoms"], **row)
    if args.phase == "start":
        r = out["restart_check"]
        ok = r["state_bitwise"] and r["frames_bitwise"] and out["run"]["rc"] == 0
    else:
        ok = out["run"]["rc"] == 0 and out["trajectory"]["complete"] and out["trajectory"]["finite"]
    dest = os.environ.get("OUT")
    if dest:
        for name in KEEP:
            if (STATE / name).exists():
                copy_in_parts(STATE / name, Path(dest), args.part_bytes)
    print("large MD:", "ALL CHECKS PASSED" if ok else "CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
