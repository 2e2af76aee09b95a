"""Many relaxations in lockstep: what ``mdband relax`` runs for several structures.

Every structure gets its own ASE optimiser (FIRE or BFGS; through ``FrechetCellFilter`` with
``cell``), exactly as :func:`mdband.md.relax.relax` sets one up, and the optimisers are stepped
together: each lockstep iteration moves every optimiser one step (``optimizer.step()``), then
evaluates every moved structure in one batched model call
(:meth:`mdband.Potential.evaluate_many`) and hands each its own result through its
calculator. The sequence of calls is that of ASE's ``Optimizer.run(fmax, steps)``
(``Dynamics.irun``: gradient, convergence test, then step, gradient, test, ...), so every
structure follows the path it would follow alone, to the rounding of the batched evaluation.
A structure leaves the batch when converged or after ``steps`` steps.

The output is one multi-frame file, in input order: every structure as relaxed, with its
energy, forces (and stress of periodic cells) on a single-point calculator and ``info``
``converged`` (bool), ``relax_steps`` and ``source`` (``file[image]``); a charge/spin model's
structures keep their ``charge`` and ``spin`` (``--charge`` / ``--spin`` for all of them, else
each file's own ``info``, else the model's default). It is written
atomically, never over an existing file unless ``overwrite``.
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass, field

import numpy as np
from ase import Atoms

from mdband.calculator import Calculator
from mdband.errors import MdbandError, StructureError
from mdband.io.atomic import atomic_path
from mdband.md.errors import ConfigError
from mdband.md.relax import (
    RelaxConfig,
    _charge_spin,
    _claim_outputs,
    _result,
    _snapshot,
    output_format,
    structure_paths,
)
from mdband.md.system import check_structure

logger = logging.getLogger(__name__)


class _BatchSlot(Calculator):
    """mdband's calculator for one structure of the batch.

    An evaluation of the positions and cell the batch primed it with returns the batched result;
    any other evaluates alone.
    """

    def __init__(self, potential) -> None:
        super().__init__(potential)
        self._primed: tuple | None = None  # (positions, cell, result) of prime
        #: evaluations not served by the batch (an optimiser that asked for another point)
        self.unbatched = 0

    def prime(self, atoms: Atoms, result) -> None:
        self._primed = (atoms.positions.copy(), atoms.cell.array.copy(), result)

    def _evaluate(self, positions, cell, pbc, numbers, *args, **kw):
        primed = self._primed
        if primed is not None and np.array_equal(positions, primed[0]):
            if np.array_equal(cell, primed[1]):
                return primed[2]
        self.unbatched += 1
        return super()._evaluate(positions, cell, pbc, numbers, *args, **kw)


@dataclass
class Relaxed:
    """One structure's outcome (energy eV, forces eV/Å, stress GPa), as :class:`RelaxResult`."""

    source: str
    atoms: Atoms
    converged: bool
    steps: int
    energy: float
    max_force: float
    max_stress: float | None
    volume: float | None


@dataclass
class BatchRelaxResult:
    """Outcome of :func:`relax_many`: every structure in input order."""

    structures: list[Relaxed]
    notes: list[str] = field(default_factory=list)
    model_calls: int = 0  # batched model calls made
    unbatched: int = 0  # evaluations done one by one (none for FIRE and BFGS)

    @property
    def converged(self) -> bool:
        """Tell whether every structure converged."""
        return all(r.converged for r in self.structures)

    @property
    def steps(self) -> int:
        """Return the largest number of optimiser steps of a structure (0 without any)."""
        return max((r.steps for r in self.structures), default=0)


def read_batch(config: RelaxConfig, potential, notes: list[str]) -> list[tuple[str, Atoms]]:
    """Read ``(source, atoms)`` of every structure to relax.

    Each image of each file with ``all_frames``, else image ``frame`` of each; checked like one
    structure is (:func:`~mdband.md.system.check_structure`), errors naming the structure.
    """
    from mdband.io.structure import read_images, read_structure

    out = []
    for path in structure_paths(config):
        kw = dict(format=config.format, type_map=config.type_map,
                  default_type_map=potential.type_map, notes=notes)  # fmt: skip
        if config.all_frames:
            images = list(enumerate(read_images(path, **kw)))
        else:
            images = [(config.frame, read_structure(path, config.frame, **kw))]
        for k, atoms in images:
            source = f"{path}[{k}]"
            try:
                check_structure(atoms, potential, config.min_distance)
                _charge_spin(config, potential, atoms)  # --charge/--spin, else the file's
                if config.cell and not np.all(atoms.get_pbc()):
                    raise StructureError(
                        "--cell needs a structure periodic in all three directions"
                    )
            except MdbandError as exc:
                exc.args = (f"{source}: {exc}",)
                raise
            out.append((source, atoms))
    return out


def relax_many(config: RelaxConfig, *, potential=None, logfile=sys.stdout) -> BatchRelaxResult:
    """Relax every structure of ``config`` together and write ``config.output``.

    The output holds all of them, in input order.

    Parameters
    ----------
    config : RelaxConfig
        ``structure`` several files, glob patterns, or ``all_frames``.
    potential : Potential, optional
        An already loaded potential (``config.model`` is then not read).
    logfile : file, optional
        Where one line per lockstep step goes (None: nowhere).

    Raises
    ------
    MdbandError
        Bad input, before anything is written (the output must hold several frames; no
        ``trajectory``).
    """
    from ase.io.formats import ioformats

    if config.trajectory:
        raise ConfigError("--trajectory records one relaxation; not with several structures")
    fmt = output_format(config.output)
    if ioformats[fmt].single:
        raise ConfigError(
            f"output {config.output} holds one structure ({fmt}); give an .extxyz or .traj "
            "file for several"
        )
    with _claim_outputs(config):
        return _relax_many(config, potential, logfile, fmt)


def _relax_many(config: RelaxConfig, potential, logfile, fmt: str) -> BatchRelaxResult:
    import ase.io
    from ase.filters import FrechetCellFilter
    from ase.optimize import BFGS, FIRE

    if config.threads is not None:
        import torch

        torch.set_num_threads(config.threads)
    if potential is None:
        from mdband.loader import load_model

        potential = load_model(config.model, device=config.device, dtype=config.dtype,
                               head=config.head)  # fmt: skip
    if config.cell and potential.direct_forces:
        raise ConfigError(
            "the model gives direct forces and no virial (deepmd-kit's dens mode); "
            "--cell needs the stress"
        )
    if potential.spin is not None:
        raise ConfigError(
            "several structures of a spin model are not relaxed together (their magnetic "
            "moments are not batched); relax them one at a time"
        )
    notes: list[str] = []
    batch = read_batch(config, potential, notes)
    atoms = [a for _, a in batch]
    slots, opts = [], []
    for a in atoms:
        a.calc = _BatchSlot(potential)
        slots.append(a.calc)
        target = FrechetCellFilter(a) if config.cell else a
        opt = {"fire": FIRE, "bfgs": BFGS}[config.optimizer](target, logfile=None)
        opt.fmax = config.fmax  # as Optimizer.run(fmax, steps) sets them
        opt.max_steps = opt.nsteps + config.steps
        opts.append(opt)
    calls, converged = _lockstep(potential, atoms, slots, opts, logfile)
    relaxed = []
    for (source, a), opt, conv in zip(batch, opts, converged):
        res = _result(a, conv, opt.nsteps)
        relaxed.append(Relaxed(source, a, conv, opt.nsteps, res.energy, res.max_force,
                               res.max_stress, res.volume))  # fmt: skip
    frames = []
    for r in relaxed:
        snap = _snapshot(r.atoms)
        snap.info.update(converged=r.converged, relax_steps=r.steps, source=r.source)
        frames.append(snap)
    with atomic_path(config.output, replace=config.overwrite) as tmp:
        ase.io.write(tmp, frames, format=fmt)
    out = BatchRelaxResult(relaxed, notes, calls, sum(s.unbatched for s in slots))
    logger.info("relax: %d of %d structures converged in %d batched calls; wrote %s",
                sum(r.converged for r in relaxed), len(relaxed), out.model_calls,
                config.output)  # fmt: skip
    return out


def _lockstep(potential, atoms, slots, opts, logfile) -> tuple[int, list[bool]]:
    """Run every optimiser as ``Optimizer.run`` would, stepping them together.

    Returns (batched model calls, converged flag of each).
    """
    n = len(atoms)
    converged = [False] * n
    calls = 0

    def evaluate(indices):
        nonlocal calls
        results = potential.evaluate_many([atoms[i] for i in indices])
        calls += 1
        for i, res in zip(indices, results):
            slots[i].prime(atoms[i], res)

    def check(indices) -> tuple[list[int], float]:
        still, worst = [], 0.0
        for i in indices:
            gradient = opts[i].optimizable.get_gradient()
            worst = max(worst, float(opts[i].optimizable.gradient_norm(gradient)))
            converged[i] = bool(opts[i].gradient_converged(gradient))
            if not converged[i] and opts[i].nsteps < opts[i].max_steps:
                still.append(i)
        return still, worst

    active = list(range(n))
    evaluate(active)
    step = 0
    active, worst = check(active)
    _log(logfile, step, len(active), n, worst, header=True)
    while active:
        for i in active:
            opts[i].step()
            opts[i].nsteps += 1
        evaluate(active)
        step += 1
        active, worst = check(active)
        _log(logfile, step, len(active), n, worst)
    return calls, converged


def _log(logfile, step: int, active: int, total: int, worst: float, header=False) -> None:
    """Write one line per lockstep step to ``logfile`` (the column header first if asked).

    The line gives the structures still relaxing and the largest fmax of those evaluated (ASE's
    ``fmax``: the force, or with the cell filter the generalised force).
    """
    if logfile is None:
        return
    if header:
        logfile.write(f"{'Step':>6} {'relaxing':>9} {'done':>6} {'max fmax':>12}\n")
    done = total - active
    value = f"{worst:12.6f}" if math.isfinite(worst) else f"{'nan':>12}"
    logfile.write(f"{step:6d} {active:9d} {done:6d} {value}\n")
    logfile.flush()
