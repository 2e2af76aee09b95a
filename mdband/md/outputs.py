"""The output files of a run: checks before anything is written, locks, and checkpoint records.

A checkpoint records the outputs so that ``--resume`` continues the same files and nothing
else.

The outputs are the trajectory, checkpoint, log, final structure (also the default one) and
a committee's model-deviation file. Before a run writes anything: each output's directory
exists, no output is a directory, the outputs differ from each other and from the inputs
(structure, models, config file) as files, not names (:func:`mdband.io.files.check_outputs`:
links followed, hard links by inode), each output is locked (:mod:`mdband.io.locks`; a second
writer is refused with the first one's PID) and, under the lock, an existing output (or a
link at its path) needs ``overwrite`` or ``resume``. A resumed run ignores ``overwrite``.

A checkpoint records the run id, the absolute path of each output, the trajectory's frame
count and last step, and the log's size. ``--resume`` then refuses a trajectory of another
run (run id, model, atoms, ensemble), a missing one, or one that ends before the checkpoint's
last frame, and cuts the log back to the checkpoint (no repeated steps); the committee's own
recorder continues the model-deviation file.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mdband.io.atomic import clean_stale_temps
from mdband.io.checkpoint import Checkpoint
from mdband.io.files import check_outputs, exists, same_file
from mdband.io.h5md import H5MDReader, TrajectoryError, check_series
from mdband.io.locks import OutputLocks
from mdband.io.run_files import default_final
from mdband.md.config import PATH_FIELDS, RunConfig
from mdband.md.errors import ConfigError, OutputExistsError

OUTPUTS = ("trajectory", "checkpoint", "log", "final", "model_devi")


def new_run_id() -> str:
    """Return a new random run id (32 hexadecimal digits)."""
    return uuid.uuid4().hex


def output_paths(c: RunConfig) -> dict[str, Path]:
    """Return the files the run writes (the final structure also where it is the default one)."""
    out = {name: Path(getattr(c, name)) for name in OUTPUTS if getattr(c, name)}
    final = default_final(c.trajectory, c.log)
    if not c.final and final:
        out["final"] = Path(final)
    return {name: out[name] for name in OUTPUTS if name in out}


def input_paths(c: RunConfig, extra: dict | None = None) -> dict[str, Path]:
    """Return the files a run reads: structure, model (a file, not ``builtin:``) and ``extra``.

    ``extra`` is ``{what: path}``, e.g. the config file; the checkpoint of a resumed run is both
    an input and an output.
    """
    out = {}
    if c.structure:
        out["structure"] = Path(c.structure)
    models = [c.model, *c.committee] if c.model else list(c.committee)
    for k, model in enumerate(models):
        if not str(model).startswith("builtin:"):
            out["model" if k == 0 else f"committee model {k + 1}"] = Path(model)
    out.update({what: Path(p) for what, p in (extra or {}).items() if p})
    return out


_same = same_file  # one file, whatever names reach it (mdband.io.files)


def check_output_paths(c: RunConfig, extra_inputs: dict | None = None) -> None:
    """Raise :class:`ConfigError` for an output that cannot or must not be written."""
    check_outputs(output_paths(c), input_paths(c, extra_inputs), error=ConfigError, verb="the run")


def claim_outputs(c: RunConfig, extra_inputs: dict | None = None) -> OutputLocks:
    """Check the outputs, lock them and refuse existing ones unless ``overwrite`` or ``resume``.

    Existing outputs are looked for under the locks. The caller releases the returned locks.
    """
    check_output_paths(c, extra_inputs)
    locks = OutputLocks.acquire({name: str(p) for name, p in output_paths(c).items()})
    try:
        if not (c.resume or c.overwrite):
            for name, path in output_paths(c).items():
                if exists(path):
                    raise OutputExistsError(
                        f"{name} file {path} exists; use --overwrite to replace it or --resume "
                        "to continue"
                    )
    except BaseException:
        locks.release()
        raise
    return locks


def clean_temps(c: RunConfig) -> None:
    """Remove temporary files killed writers left beside the outputs (hold the locks)."""
    for path in output_paths(c).values():
        clean_stale_temps(path)


def recorded_config(c: RunConfig) -> dict:
    """Return ``c`` as a checkpoint records it: paths absolute.

    Absolute paths let a resume from another working directory find the same files.
    """
    out = c.to_dict()
    for name in PATH_FIELDS:
        value = out.get(name)
        if value and not (name == "model" and str(value).startswith("builtin:")):
            out[name] = str(Path(value).resolve())
    out["committee"] = [
        m if str(m).startswith("builtin:") else str(Path(m).resolve()) for m in c.committee
    ]
    return out


def record(c: RunConfig, run_id: str, trajectory: tuple[int, int | None] | None) -> dict:
    """Return ``Checkpoint.outputs`` of a run at this moment.

    ``trajectory`` is the trajectory's (frames, last step) on disk.
    """
    out: dict = {"run_id": run_id}
    if c.trajectory and trajectory is not None:
        frames, last = trajectory
        out["trajectory"] = {
            "path": str(Path(c.trajectory).resolve()),
            "frames": int(frames),
            "last_step": last,
        }
    if c.log and Path(c.log).exists():
        out["log"] = {"path": str(Path(c.log).resolve()), "size": Path(c.log).stat().st_size}
    if c.checkpoint:
        out["checkpoint"] = {"path": str(Path(c.checkpoint).resolve())}
    if c.model_devi:
        out["model_devi"] = {"path": str(Path(c.model_devi).resolve())}
    return out


@dataclass(frozen=True)
class ResumePlan:
    """What a resumed run does with its outputs.

    ``trajectory`` is "append", "create" or "none"; ``log_size``: cut the log to this many bytes
    first (None: append as it is).
    """

    run_id: str
    trajectory: str
    log_size: int | None


def plan_resume(c: RunConfig, ck: Checkpoint, atoms, model_hash: str, notes: list) -> ResumePlan:
    """Check the outputs of a resumed run against the checkpoint; raise with the reason."""
    run_id = str(ck.outputs.get("run_id") or new_run_id())
    trajectory = _trajectory_plan(c, ck, atoms, model_hash, notes)
    _model_devi_plan(c, ck, notes)
    return ResumePlan(run_id, trajectory, _log_plan(c, ck, notes))


def _trajectory_plan(c: RunConfig, ck: Checkpoint, atoms, model_hash: str, notes: list) -> str:
    if not c.trajectory:
        return "none"
    path = Path(c.trajectory)
    rec = ck.outputs.get("trajectory")
    same = rec is not None and _same(path, Path(rec["path"]))
    if not path.exists():
        if same:
            assert rec is not None  # same: the checkpoint records this file
            raise TrajectoryError(
                f"trajectory {path} is missing, but the checkpoint's run wrote {rec['frames']} "
                f"frames to it (through step {rec['last_step']}); restore it, or give another "
                f"trajectory file to start a new one at step {ck.step}"
            )
        notes.append(f"Trajectory: a new file {path}, frames from step {ck.step} on")
        return "create"
    with H5MDReader(path) as r:
        check_series(r.file, path)  # dtypes and shapes the run appends, before any change
        params = r.parameters
        if r.n_atoms != len(atoms) or not np.array_equal(r.species, atoms.numbers):
            raise TrajectoryError(f"trajectory {path} holds other atoms than the checkpoint")
        if params.get("model_hash") != model_hash:
            raise TrajectoryError(
                f"trajectory {path} was written with another model "
                f"({str(params.get('model_hash'))[:12]})"
            )
        if r.variable_cell != (c.ensemble == "npt-mtk"):
            raise TrajectoryError(f"trajectory {path} was written by another ensemble's run")
        theirs, ours = params.get("run_id"), ck.outputs.get("run_id")
        if theirs and ours and theirs != ours:
            raise TrajectoryError(
                f"trajectory {path} belongs to another run (run id {str(theirs)[:8]}, the "
                f"checkpoint's is {str(ours)[:8]}); give the run's own trajectory file"
            )
        steps = r.steps
    last = int(steps[-1]) if len(steps) else None
    if rec is not None and rec.get("last_step") is not None:
        need = int(rec["last_step"])
    else:  # a checkpoint of an older mdband: the frames its cadence wrote
        every = int(ck.config.get("traj_every") or c.traj_every)
        need = ck.step // every * every
    if last is None or last < need or need not in steps:
        where = "no frames" if last is None else f"frames through step {last}"
        raise TrajectoryError(
            f"trajectory {path} holds {where}, but the checkpoint (step {ck.step}) follows a "
            f"frame at step {need}: frames are missing (an older copy?); give the run's own "
            "trajectory file or another file name"
        )
    return "append"


def _model_devi_plan(c: RunConfig, ck: Checkpoint, notes: list) -> None:
    """Note in ``notes`` when the model-deviation file of a resumed run starts anew.

    Otherwise the committee's recorder continues the file (rows after the checkpoint dropped,
    see :meth:`mdband.committee.devi_file.ModelDeviWriter.resume`).
    """
    if not c.model_devi or Path(c.model_devi).exists():
        return
    rec = ck.outputs.get("model_devi")
    if rec is not None and _same(Path(c.model_devi), Path(rec["path"])):
        notes.append(f"Model deviation: {c.model_devi} is missing; a new one is started")
    else:
        notes.append(f"Model deviation: a new file {c.model_devi}, rows from step {ck.step} on")


def _log_plan(c: RunConfig, ck: Checkpoint, notes: list) -> int | None:
    rec = ck.outputs.get("log")
    if not c.log or rec is None or not _same(Path(c.log), Path(rec["path"])):
        return None
    path = Path(c.log)
    if not path.exists():
        notes.append(f"Log: {path} is missing; a new one is started")
        return None
    if path.stat().st_size < int(rec["size"]):
        notes.append(f"Log: {path} is shorter than when the checkpoint was written; appending")
        return None
    return int(rec["size"])
