"""``dp model-devi`` for mdband: a committee's deviations over a list of frames.

Every model evaluates the frames in batches (:meth:`mdband.committee.Committee.evaluate_many`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from mdband.committee.committee import Committee, CommitteeError
from mdband.committee.devi_file import ModelDeviFileError, format_row, header
from mdband.committee.deviation import ModelDeviation

#: frames evaluated together at most (every model's forces of them are held at once)
BLOCK_FRAMES = 512


def read_frames(
    path, fmt: str | None = None, type_map=None, default_type_map=None, notes=None
) -> tuple[list, list[int] | None]:
    """Read every frame of ``path`` as ASE atoms, with the MD step of every frame.

    The steps are those the file records (H5MD steps, LAMMPS dump timesteps, ``info["step"]``
    of extxyz), else None.

    Any format :func:`mdband.io.systems.read_systems` reads (``fmt``, ``type_map`` and
    ``default_type_map`` as there); its :class:`~mdband.io.frames.DatasetError` propagates.
    """
    from mdband.io.systems import read_systems

    frames = read_systems(path, fmt, type_map, default_type_map=default_type_map, notes=notes)
    steps = [f.step for f in frames]
    atoms = [f.to_atoms() for f in frames]
    known = [s for s in steps if s is not None]
    return atoms, (None if len(known) < len(steps) else [int(s) for s in known])


def model_devi_frames(
    committee: Committee,
    frames: Iterable,
    output=None,
    *,
    every: int = 1,
    steps: Iterable[int] | None = None,
    atomic: bool = False,
    overwrite: bool = False,
    **batch,
) -> list[tuple[int, ModelDeviation]]:
    """Evaluate ``committee`` on every frame (ASE atoms), writing ``model_devi.out`` if asked.

    With ``output``, the rows are written to a ``model_devi.out`` file.

    Parameters
    ----------
    committee : Committee
    frames : iterable of ase.Atoms
    output : path, optional
        File to write (refused if it exists, unless ``overwrite``): written at the end,
        atomically (a temporary file renamed onto it), so a failure leaves no partial file and
        an old one as it was. Every frame's elements are checked before anything is evaluated.
    every : int
        MD steps between the frames: frame k is step ``k * every`` (``dp model-devi -f``).
    steps : iterable of int, optional
        The step of every frame (overrides ``every``), e.g. an H5MD trajectory's own steps.
    atomic : bool
        Also write the per-atom force deviations (all frames must have the same atom count).
    **batch
        ``batch_size``, ``batch_atoms`` of :meth:`mdband.Potential.evaluate_many`: every model
        evaluates the frames in batches, :data:`BLOCK_FRAMES` frames at a time.

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
    if output is not None and not overwrite and os.path.lexists(output):
        raise ModelDeviFileError(f"model deviation file {output} exists")
    for numbers in {tuple(np.unique(a.get_atomic_numbers()).tolist()) for a in frames}:
        committee.check_species(np.asarray(numbers, dtype=np.int64))
    out = []
    for start in range(0, len(frames), BLOCK_FRAMES):
        block = frames[start : start + BLOCK_FRAMES]
        for step, res in zip(steps[start:], committee.evaluate_many(block, **batch)):
            out.append((step, res.deviation))
    if output is not None:
        _write_rows(Path(output), out, atomic, overwrite)
    return out


def _write_rows(path: Path, rows, atomic: bool, overwrite: bool) -> None:
    """``model_devi.out`` with ``rows`` (steps growing), replacing ``path`` atomically."""
    from mdband.io.atomic import atomic_path

    text, last = [header(atomic)], None
    for step, devi in rows:
        if last is None or step > last:  # as ModelDeviWriter: steps must grow
            text.append(format_row(step, devi, atomic))
            last = step
    try:
        with atomic_path(path, replace=overwrite) as tmp:
            tmp.write_text("".join(text), encoding="ascii")
    except FileExistsError:
        raise ModelDeviFileError(f"model deviation file {path} exists") from None
