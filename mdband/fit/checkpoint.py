"""The fit checkpoint (``OUTPUT.ckpt`` or ``checkpoint``): writing, reading and checking it.

This module says what the checkpoint holds, writes it atomically, reads it back and checks that
a resumed run is the run that wrote it.

A checkpoint is a ``torch.save`` dict (``format`` = :data:`CHECKPOINT_FORMAT`): the epoch and
optimiser step, model kind/type map/config and weights, the EMA weights, AdamW's state, the
run-defining settings, a fingerprint of the data, the train/validation split, the energy shift
(eV per type) and the history so far.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from mdband.fit.config import FitConfig, FitConfigError
from mdband.io.atomic import atomic_path

CHECKPOINT_FORMAT = "mdband-fit-checkpoint"
CHECKPOINT_VERSION = 1

# settings a resumed run must share with the checkpoint (the rest may change, e.g. epochs)
RUN_DEFINING = (
    "init",
    "head",
    "model",
    "type_map",
    "batch_size",
    "lr",
    "lr_final_ratio",
    "warmup",
    "weight_decay",
    "grad_clip",
    "ema_decay",
    "energy_weight",
    "force_weight",
    "virial_weight",
    "val_fraction",
    "seed",
    "init_seed",
    "init_gain",
    "refit_shift",
    "max_frames",
    "dtype",
)


class OutputExistsError(FitConfigError):
    """The output or checkpoint file exists and neither ``overwrite`` nor ``resume`` is set."""


class CheckpointMismatchError(FitConfigError):
    """``resume`` was asked with a checkpoint from a different run (data or settings)."""


def claim_outputs(cfg: FitConfig):
    """Check the fit's outputs and lock them; return the locks (release them).

    First :func:`check_outputs`, then the outputs are checked as files (none is an input or
    another output: :func:`mdband.io.files.check_outputs`) and locked.
    """
    from mdband.io.files import check_outputs as check_files
    from mdband.io.locks import OutputLocks

    check_outputs(cfg)
    named = {"output": cfg.output, "log": cfg.log}
    if cfg.output is not None or cfg.checkpoint is not None:
        named["checkpoint"] = str(cfg.checkpoint_path)
    outs = {k: v for k, v in named.items() if v is not None}
    inputs = {f"training data {k + 1}": d for k, d in enumerate(cfg.data)}
    if cfg.init is not None and not str(cfg.init).startswith("builtin:"):
        inputs["model to fine-tune"] = cfg.init
    check_files(outs, inputs, error=FitConfigError, verb="the fit")
    return OutputLocks.acquire(outs)


def check_outputs(cfg: FitConfig) -> None:
    """Refuse an output, checkpoint or log that exists or has no folder.

    An existing file is accepted with overwrite or resume (a resumed run appends to its log).
    """
    if cfg.log is not None and Path(cfg.log).exists() and not (cfg.overwrite or cfg.resume):
        raise OutputExistsError(f"log {cfg.log} exists (use --overwrite to replace it)")
    if cfg.output is not None:
        out = Path(cfg.output)
        if out.is_dir():
            raise OutputExistsError(f"output {out} is a directory")
        if not out.parent.exists():
            raise FitConfigError(f"output directory {out.parent} does not exist")
        if out.exists() and not (cfg.overwrite or cfg.resume):
            raise OutputExistsError(f"output {out} exists (use --overwrite to replace it)")
    if cfg.output is not None or cfg.checkpoint is not None:
        ck = cfg.checkpoint_path
        if not ck.parent.exists():
            raise FitConfigError(f"checkpoint directory {ck.parent} does not exist")
        if ck.exists() and not (cfg.overwrite or cfg.resume):
            raise OutputExistsError(
                f"checkpoint {ck} exists (use --resume to continue or --overwrite to restart)"
            )
    if cfg.resume and cfg.output is None and cfg.checkpoint is None:
        raise FitConfigError("--resume needs an output or a checkpoint file")


def data_fingerprint(frames) -> str:
    """SHA-256 of the frames' species, positions and energies (what a resume must match)."""
    h = hashlib.sha256()
    for f in frames:
        h.update(" ".join(f.species).encode())
        h.update(np.ascontiguousarray(f.positions, dtype=np.float64).tobytes())
        h.update(np.float64(f.energy).tobytes())
    return h.hexdigest()


def save_checkpoint(path: Path, state: dict, cfg: FitConfig) -> None:
    """Write ``state`` to ``path`` atomically.

    ``state`` holds the entries listed in the module docstring, without the format and the
    settings, which are added here.
    """
    obj = {"format": CHECKPOINT_FORMAT, "format_version": CHECKPOINT_VERSION}
    obj.update(state)
    obj["settings"] = {k: _plain(getattr(cfg, k)) for k in RUN_DEFINING}
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def read_checkpoint(path: Path) -> dict:
    """Load the checkpoint at ``path``, refusing a missing, unreadable or foreign file."""
    if not path.is_file():
        raise FitConfigError(f"--resume: checkpoint {path} does not exist")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FitConfigError(f"cannot read checkpoint {path}: {first[:160]}") from None
    if not isinstance(ck, dict) or ck.get("format") != CHECKPOINT_FORMAT:
        raise FitConfigError(f"{path} is not an mdband fit checkpoint")
    if ck.get("format_version", 0) > CHECKPOINT_VERSION:
        raise FitConfigError(f"{path}: checkpoint format is newer than this mdband")
    return ck


def check_resume(ck: dict, cfg: FitConfig, fingerprint: str) -> None:
    """Refuse to resume from ``ck`` unless it is the same run and has epochs left.

    Raises :class:`CheckpointMismatchError` when the data fingerprint or a run-defining setting
    differs, or when the checkpoint already finished ``cfg.epochs``.
    """
    if ck["data_fingerprint"] != fingerprint:
        raise CheckpointMismatchError(
            f"checkpoint {cfg.checkpoint_path} was written for different training data"
        )
    saved = ck.get("settings", {})
    for key in RUN_DEFINING:
        if key in saved and saved[key] != _plain(getattr(cfg, key)):
            raise CheckpointMismatchError(
                f"setting {key} differs from the checkpoint ({saved[key]!r} there, "
                f"{getattr(cfg, key)!r} now); start a new run instead"
            )
    if int(ck["epoch"]) >= cfg.epochs:
        raise CheckpointMismatchError(
            f"checkpoint {cfg.checkpoint_path} already finished epoch {ck['epoch']} of "
            f"{cfg.epochs}; raise --epochs to train longer"
        )


def cpu_copy(sd: dict) -> dict:
    """Return a detached CPU copy of every tensor of the state dict ``sd``."""
    return {k: v.detach().cpu().clone() for k, v in sd.items()}


def _plain(v):
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v
