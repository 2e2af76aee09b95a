"""``dp model-devi`` for mdband: a committee's deviations over a list of frames."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from mdband.committee.committee import Committee, CommitteeError
from mdband.committee.devi_file import ModelDeviWriter
from mdband.committee.deviation import ModelDeviation


def read_frames(
    path, fmt: str | None = None, type_map=None, default_type_map=None, notes=None
) -> tuple[list, list[int] | None]:
    """Every frame of ``path`` as ASE atoms, and the MD step of every frame when the file
    records them (H5MD steps, LAMMPS dump timesteps, ``info["step"]`` of extxyz), else None.

    Any format :func:`mdband.io.systems.read_systems` reads (``fmt``, ``type_map`` and
    ``default_type_map`` as there); its :class:`~mdband.io.frames.DatasetError` propagates.
    """
    from mdband.io.systems import read_systems

    frames = read_systems(path, fmt, type_map, default_type_map=default_type_map, notes=notes)
    steps = [f.step for f in frames]
    atoms = [f.to_atoms() for f in frames]
    return atoms, (None if any(s is None for s in steps) else [int(s) for s in steps])


def model_devi_frames(
    committee: Committee,
    frames: Iterable,
    output=None,
    *,
    every: int = 1,
    steps: Iterable[int] | None = None,
    atomic: bool = False,
    overwrite: bool = False,
) -> list[tuple[int, ModelDeviation]]:
    """Evaluate ``committee`` on every frame (ASE atoms) and, with ``output``, write the rows to
    a ``model_devi.out`` file.

    Parameters
    ----------
    committee : Committee
    frames : iterable of ase.Atoms
    output : path, optional
        File to write (refused if it exists, unless ``overwrite``).
    every : int
        MD steps between the frames: frame k is step ``k * every`` (``dp model-devi -f``).
    steps : iterable of int, optional
        The step of every frame (overrides ``every``), e.g. an H5MD trajectory's own steps.
    atomic : bool
        Also write the per-atom force deviations (all frames must have the same atom count).

    Returns
    -------
    list of (step, ModelDeviation)
    """
    frames = list(frames)
    if every < 1:
        raise CommitteeError(f"every must be a positive number of steps, got {every}")
    steps = [k * every for k in range(len(frames))] if steps is None else [int(s) for s in steps]
    if len(steps) != len(frames):
        raise CommitteeError(f"{len(steps)} steps given for {len(frames)} frames")
    if atomic and len({len(a) for a in frames}) > 1:
        raise CommitteeError("per-atom deviations need frames with the same number of atoms")
    writer = None if output is None else ModelDeviWriter.create(output, atomic, overwrite)
    out = []
    try:
        for step, atoms in zip(steps, frames):
            res = committee.evaluate(
                atoms.get_positions(),
                atoms.get_cell().array,
                np.asarray(atoms.get_pbc(), dtype=bool),
                atoms.get_atomic_numbers(),
                charge=atoms.info.get("charge"),
                spin=atoms.info.get("spin"),
            )
            out.append((step, res.deviation))
            if writer is not None:
                writer.write(step, res.deviation)
    finally:
        if writer is not None:
            writer.close()
    return out
