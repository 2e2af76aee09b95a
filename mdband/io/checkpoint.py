"""Restart state of an MD run, written atomically (temp file, fsync, rename).

A checkpoint is a small HDF5 file::

    attrs:  format="mdband-checkpoint", format_version, step, time (ps), model_hash,
            config_json, mdband_version, outputs_json (optional, see ``Checkpoint.outputs``),
            sha256 (over everything below)
    numbers (N,) int32   masses (N,) f8   positions, momenta, velocities (N, 3) f8
    cell (3, 3) f8       pbc (3,) bool
    integrator/<name>    float64 arrays: thermostat chains, barostat and cell momenta, ...
    rng/<name>           attribute "state": JSON of a numpy bit generator's state
    neighbours/          positions, cell, pbc of the reusable neighbour list (if any)
    attrs: constraints_json  ASE constraints (ase.io.jsonio of their todict()), only when the
                             run has any; such a checkpoint has format_version 2
    magmoms (N, 3) f8        the fixed magnetic moments (μB) of a spin model's run, only then;
                             such a checkpoint has format_version 3

Momenta are what ASE's integrators keep, so they are the restart quantity (velocities are
stored for readers). Positions and momenta are float64 so a resumed run is bitwise exact.
A new checkpoint is read back and verified before it replaces the old one, so a failed write
(disk full: :class:`~mdband.errors.ResourceExhaustedError`) keeps the last good checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from mdband._version import __version__
from mdband.errors import MdbandError, ResourceExhaustedError
from mdband.io.atomic import atomic_path, is_disk_full, no_space_left

logger = logging.getLogger(__name__)
FORMAT = "mdband-checkpoint"
FORMAT_VERSION = 3  # 2: constraints_json, 3: magmoms; a checkpoint with neither is version 1
_ARRAYS = ("numbers", "masses", "positions", "momenta", "cell", "pbc")


class CheckpointError(MdbandError):
    """A checkpoint is missing, corrupt, or does not belong to the run being resumed."""


@dataclass
class Checkpoint:
    """Everything needed to continue a run exactly."""

    step: int
    time: float
    numbers: np.ndarray
    masses: np.ndarray
    positions: np.ndarray
    momenta: np.ndarray
    cell: np.ndarray
    pbc: np.ndarray
    config: dict
    model_hash: str
    integrator: dict[str, np.ndarray] = field(default_factory=dict)
    rng: dict[str, dict] = field(default_factory=dict)
    neighbours: dict[str, np.ndarray] | None = None
    constraints: str = ""  # JSON of the ASE constraints ("" or "[]": none)
    # what the run had written when the checkpoint was taken (JSON-able), e.g.
    # {"run_id": ..., "trajectory": {"path": absolute, "frames": n, "last_step": s},
    #  "log": {"path": absolute, "size": bytes}}; empty in files of older versions
    outputs: dict = field(default_factory=dict)
    magmoms: np.ndarray | None = None  # (N, 3) μB: a spin model's moments (held fixed)

    @property
    def velocities(self) -> np.ndarray:
        """Velocities (N, 3): the momenta divided by the masses."""
        return self.momenta / self.masses[:, None]


def _digest(ck: Checkpoint) -> str:
    h = hashlib.sha256()

    def add(name: str, arr) -> None:
        a = np.ascontiguousarray(arr)
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())

    h.update(f"{ck.step}|{ck.time!r}|{ck.model_hash}".encode())
    h.update(json.dumps(ck.config, sort_keys=True).encode())
    for name in _ARRAYS:
        add(name, getattr(ck, name))
    for name in sorted(ck.integrator):
        add("integrator/" + name, ck.integrator[name])
    for name in sorted(ck.rng):
        h.update(f"rng/{name}:{json.dumps(ck.rng[name], sort_keys=True)}".encode())
    neighbours = ck.neighbours or {}
    for name in sorted(neighbours):
        add("neighbours/" + name, neighbours[name])
    if _has_constraints(ck):
        h.update(f"constraints:{ck.constraints}".encode())
    if ck.outputs:  # absent from older files, whose checksum stays valid
        h.update(("outputs:" + json.dumps(ck.outputs, sort_keys=True)).encode())
    if ck.magmoms is not None:
        add("magmoms", ck.magmoms)
    return h.hexdigest()


def _has_constraints(ck: Checkpoint) -> bool:
    return ck.constraints not in ("", "[]")


def _normalise(ck: Checkpoint) -> Checkpoint:
    return Checkpoint(
        step=int(ck.step),
        time=float(ck.time),
        numbers=np.asarray(ck.numbers, dtype=np.int32),
        masses=np.asarray(ck.masses, dtype=np.float64),
        positions=np.asarray(ck.positions, dtype=np.float64),
        momenta=np.asarray(ck.momenta, dtype=np.float64),
        cell=np.asarray(ck.cell, dtype=np.float64).reshape(3, 3),
        pbc=np.asarray(ck.pbc, dtype=bool).reshape(3),
        config=dict(ck.config),
        model_hash=str(ck.model_hash),
        integrator={k: np.asarray(v, dtype=np.float64) for k, v in ck.integrator.items()},
        rng={k: dict(v) for k, v in ck.rng.items()},
        neighbours=None
        if ck.neighbours is None
        else {k: np.asarray(v) for k, v in ck.neighbours.items()},
        constraints=str(ck.constraints or ""),
        outputs=json.loads(json.dumps(ck.outputs)),
        magmoms=None if ck.magmoms is None else np.asarray(ck.magmoms, dtype=np.float64),
    )


def write_checkpoint(path, ck: Checkpoint) -> None:
    """Atomically replace ``path`` with ``ck`` (temp file, fsync, verify, rename).

    Raises
    ------
    ResourceExhaustedError
        The disk is full; ``path`` is left as it was.
    CheckpointError
        Any other failure to write (``path`` is left as it was).
    """
    path = Path(path)
    ck = _normalise(ck)
    try:
        with atomic_path(path) as tmp:
            with h5py.File(tmp, "w") as f:
                _write_body(f, ck)
            _verify(tmp, ck)
    except (OSError, RuntimeError) as exc:  # h5py raises either, the errno in the text
        if is_disk_full(exc) or no_space_left(path.parent):
            raise ResourceExhaustedError(
                f"disk full: checkpoint {path} could not be written (the previous one is kept)"
            ) from None
        detail = " ".join(str(exc).split())[:160]
        raise CheckpointError(f"cannot write checkpoint {path}: {detail}") from None
    logger.info("checkpoint written: %s (step %d)", path, ck.step)


def _write_body(f: h5py.File, ck: Checkpoint) -> None:
    f.attrs["format"] = FORMAT
    version = 3 if ck.magmoms is not None else 2 if _has_constraints(ck) else 1
    f.attrs["format_version"] = version
    f.attrs["step"] = ck.step
    f.attrs["time"] = ck.time
    f.attrs["model_hash"] = ck.model_hash
    f.attrs["config_json"] = json.dumps(ck.config, sort_keys=True)
    f.attrs["mdband_version"] = __version__
    if ck.outputs:
        f.attrs["outputs_json"] = json.dumps(ck.outputs, sort_keys=True)
    f.attrs["sha256"] = _digest(ck)
    if _has_constraints(ck):
        f.attrs["constraints_json"] = ck.constraints
    for name in _ARRAYS:
        f.create_dataset(name, data=getattr(ck, name))
    f.create_dataset("velocities", data=ck.velocities)
    if ck.magmoms is not None:
        f.create_dataset("magmoms", data=ck.magmoms)
    g = f.create_group("integrator")
    for name, arr in ck.integrator.items():
        g.create_dataset(name, data=arr)
    g = f.create_group("rng")
    for name, state in ck.rng.items():
        g.create_group(name).attrs["state"] = json.dumps(state)
    if ck.neighbours is not None:
        g = f.create_group("neighbours")
        for name, arr in ck.neighbours.items():
            g.create_dataset(name, data=arr)


def _verify(tmp: Path, ck: Checkpoint) -> None:
    """Read the new file back: HDF5 can report a failed write only when the file is closed."""
    try:
        back = read_checkpoint(tmp)
    except CheckpointError as exc:
        raise OSError(f"the written file does not read back ({exc})") from None
    if back.step != ck.step or _digest(_normalise(back)) != _digest(ck):
        raise OSError("the written file does not read back (checksum mismatch)")


def read_checkpoint(path) -> Checkpoint:
    """Read and verify a checkpoint; :class:`CheckpointError` if missing or corrupt."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT:
                raise CheckpointError(f"{path} is not an mdband checkpoint")
            version = int(f.attrs["format_version"])
            if version > FORMAT_VERSION:
                raise CheckpointError(
                    f"checkpoint {path} has format version {version}, newer than this mdband "
                    f"({FORMAT_VERSION})"
                )
            ck = Checkpoint(
                step=int(f.attrs["step"]),
                time=float(f.attrs["time"]),
                config=json.loads(f.attrs["config_json"]),
                model_hash=str(f.attrs["model_hash"]),
                integrator={k: v[()] for k, v in f["integrator"].items()},
                rng={k: json.loads(v.attrs["state"]) for k, v in f["rng"].items()},
                neighbours=None
                if "neighbours" not in f
                else {k: v[()] for k, v in f["neighbours"].items()},
                constraints=str(f.attrs.get("constraints_json", "")),
                outputs=json.loads(f.attrs.get("outputs_json", "{}")),
                magmoms=f["magmoms"][()] if "magmoms" in f else None,
                **{name: f[name][()] for name in _ARRAYS},
            )
            stored = str(f.attrs["sha256"])
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged HDF5 file fails in many ways
        detail = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable ({detail})") from None
    if _digest(_normalise(ck)) != stored:
        raise CheckpointError(f"checkpoint {path} is corrupt (checksum mismatch)")
    return ck
