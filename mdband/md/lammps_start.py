"""Rank 0's half of ``--engine lammps`` start-up: check the input, decide the starting state.

A fresh run starts from the structure with the ASE engine's velocities; a resumed run from a
checkpoint whose ``integrator`` entries (keys below) hold LAMMPS' own binary restart file,
packed into float64 numbers, the rotation into LAMMPS' cell form and the Bussi bath energy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from ase import units

from mdband.io.checkpoint import Checkpoint, CheckpointError, read_checkpoint
from mdband.md import outputs
from mdband.md.config import RunConfig
from mdband.md.errors import ConfigError

PS = 1000.0 * units.fs  # ASE time units per ps
RESTART = "lammps.restart"  # integrator/<key> entries of the checkpoint
RESTART_BYTES = "lammps.restart_bytes"
ROTATION = "lammps.rotation"
BATH = "lammps.bath_energy"
HELD_LOCKS: list = []  # rank 0: the output locks of the run in progress (run_lammps releases)


@dataclass
class Start:
    """Everything the ranks need to build the same LAMMPS system (decided on rank 0)."""

    config: RunConfig
    numbers: np.ndarray
    masses: np.ndarray
    positions: np.ndarray  # Å, input frame (fresh runs)
    velocities: np.ndarray  # Å/ps, input frame (fresh runs)
    cell: np.ndarray
    rotation: np.ndarray | None  # r_lammps = r_input @ rotation (None: the identity)
    start_step: int
    restart: bytes | None  # LAMMPS restart file of a resumed run
    bath_energy: float
    model_kind: str
    model_hash: str
    notes: list[str] = field(default_factory=list)
    plan: outputs.ResumePlan | None = None  # what happens to the outputs (mdband.md.outputs)
    type_map: str = ""  # the model's, space-separated (what `mdband export` numbers types by)

    @property
    def resumed(self) -> bool:
        """Tell whether the run resumes from a checkpoint (it has a LAMMPS restart file)."""
        return self.restart is not None


def prepare(config: RunConfig) -> Start:
    """Rank 0: validate as the ASE engine does and decide the starting state."""
    from mdband.md import setup

    HELD_LOCKS.append(outputs.claim_outputs(config))
    if config.checkpoint and '"' in str(Path(config.checkpoint).resolve()):
        raise ConfigError('--engine lammps cannot write a checkpoint whose path contains "')
    ck = read_checkpoint(config.checkpoint) if config.resume else None
    config = setup._resume_config(config, ck) if ck is not None else config.resolved()
    from mdband.lammps import pair_style_command
    from mdband.loader import load_model

    pair_style_command(config.model, dtype=config.dtype, device=config.device, head=config.head)
    potential = load_model(config.model, device="cpu", dtype=config.dtype, head=config.head)
    if potential.spin is not None:
        raise ConfigError(
            f"--engine lammps cannot run {config.model}: a {potential.spin.scheme} spin model "
            "(pair_style mdband has no atom_style spin); use --engine ase"
        )
    notes: list[str] = []
    if ck is not None:
        if RESTART not in ck.integrator:
            raise CheckpointError(
                f"checkpoint {config.checkpoint} was written by the ASE engine; resume it with "
                "--engine ase"
            )
        atoms = setup._atoms_from_checkpoint(ck, potential, config)
        plan = outputs.plan_resume(config, ck, atoms, potential.model_hash, notes)
        restart = unpack_bytes(ck.integrator[RESTART], int(ck.integrator[RESTART_BYTES]))
        stored = np.asarray(ck.integrator[ROTATION], dtype=np.float64)
        rotation = None if np.array_equal(stored, np.eye(3)) else stored
        bath = float(ck.integrator.get(BATH, 0.0))
        start = ck.step
        notes.append(f"Resuming from {config.checkpoint} at step {ck.step}")
    else:
        atoms = setup._fresh_atoms(config, potential, notes)
        restart, bath, start = None, 0.0, 0
        rotation = None
        plan = outputs.ResumePlan(outputs.new_run_id(), "create", None)
    config = setup.charge_spin_of_run(config, [potential], atoms, notes)
    if not np.all(atoms.get_pbc()):
        raise ConfigError("--engine lammps needs a structure periodic in all three directions")
    cell = atoms.get_cell().array
    if ck is None:
        if np.linalg.det(cell) <= 0:
            raise ConfigError(
                "--engine lammps needs a right-handed cell (positive determinant); "
                "swap two cell vectors"
            )
        rotation = rotation_to_lammps(cell)
        if config.ensemble == "nvt-bussi" and atoms.get_kinetic_energy() <= 0:
            raise ConfigError("nvt-bussi needs non-zero initial velocities")
    return Start(
        config=config,
        numbers=atoms.get_atomic_numbers(),
        masses=atoms.get_masses(),
        positions=atoms.get_positions(),
        velocities=atoms.get_velocities() * PS,
        cell=cell,
        rotation=rotation,
        start_step=start,
        restart=restart,
        bath_energy=bath,
        model_kind=potential.kind,
        type_map=" ".join(potential.type_map),
        model_hash=potential.model_hash,
        notes=notes,
        plan=plan,
    )


def checkpoint_record(
    s: Start,
    config: RunConfig,
    state,
    time_ps: float,
    restart: bytes,
    bath: float,
    written: tuple[int, int | None] | None = None,
) -> Checkpoint:
    """Return the checkpoint of gathered ``state`` (a :class:`mdband.md.lammps_frames.State`).

    LAMMPS' restart file ``restart`` and the Bussi bath energy ``bath`` (eV) are its
    ``integrator`` entries; ``time_ps`` in ps; ``written``: the trajectory's (frames, last
    step) on disk, recorded with the other outputs (:func:`mdband.md.outputs.record`).
    """
    rotation = np.eye(3) if s.rotation is None else s.rotation
    assert s.plan is not None  # prepare plans the outputs
    return Checkpoint(
        step=state.step,
        time=time_ps,
        numbers=s.numbers,
        masses=s.masses,
        positions=state.positions,
        momenta=s.masses[:, None] * state.velocities / PS,
        cell=state.cell,
        pbc=np.ones(3, dtype=bool),
        config=outputs.recorded_config(config),
        model_hash=s.model_hash,
        integrator={
            RESTART: pack_bytes(restart),
            RESTART_BYTES: np.asarray(len(restart), dtype=np.float64),
            ROTATION: rotation,
            BATH: np.asarray(bath, dtype=np.float64),
        },
        outputs=outputs.record(config, s.plan.run_id, written),
    )


def rotation_to_lammps(cell: np.ndarray) -> np.ndarray | None:
    """Return the rotation taking ``cell`` (rows a, b, c) to LAMMPS' form.

    LAMMPS' form has a ∥ x and b in the xy plane; None when the cell already has that form.
    """
    if cell[0, 1] == 0 and cell[0, 2] == 0 and cell[1, 2] == 0 and np.all(np.diag(cell) > 0):
        return None
    a, b = cell[0], cell[1]
    e1 = a / np.linalg.norm(a)
    e3 = np.cross(a, b)
    e3 /= np.linalg.norm(e3)
    e2 = np.cross(e3, e1)
    return np.stack([e1, e2, e3], axis=1)


def pack_bytes(data: bytes) -> np.ndarray:
    """Bytes as float64 numbers, six bytes (an exact integer < 2**48) each."""
    pad = (-len(data)) % 6
    raw = np.frombuffer(data + b"\0" * pad, dtype=np.uint8).reshape(-1, 6).astype(np.uint64)
    weights = np.uint64(256) ** np.arange(6, dtype=np.uint64)
    return (raw * weights).sum(axis=1).astype(np.float64)


def unpack_bytes(words: np.ndarray, nbytes: int) -> bytes:
    """Return the first ``nbytes`` bytes packed by :func:`pack_bytes` into ``words``."""
    ints = np.asarray(words, dtype=np.float64).astype(np.uint64)
    shifts = np.arange(6, dtype=np.uint64) * np.uint64(8)
    raw = ((ints[:, None] >> shifts) & np.uint64(255)).astype(np.uint8)
    data = raw.tobytes()
    if len(data) < nbytes:
        raise CheckpointError("checkpoint holds a truncated LAMMPS restart file")
    return data[:nbytes]
