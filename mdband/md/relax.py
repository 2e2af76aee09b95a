"""Geometry (and cell) relaxation with ASE's optimisers: what ``mdband relax`` calls.

The structure's ASE constraints are kept (ASE's optimisers honour all of them); ``cell``
relaxes the cell too through ASE's ``FrechetCellFilter`` (to zero stress). The result is
written atomically (temp file, fsync, rename) and never over an existing file unless
``overwrite``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from ase import Atoms, units
from ase.calculators.singlepoint import SinglePointCalculator

from mdband.charge_spin import ChargeSpinError, MissingChargeSpinError, whole_number
from mdband.errors import StructureError
from mdband.io.atomic import atomic_path
from mdband.io.files import start_new_file
from mdband.md.errors import ConfigError
from mdband.md.setting_table import (
    charge_setting,
    check_values,
    head_setting,
    parameters_doc,
    setting,
    spin_setting,
)
from mdband.md.system import check_structure, read_structure

logger = logging.getLogger(__name__)

OPTIMIZERS = ("fire", "bfgs")
_TRAJECTORY_SUFFIXES = (".traj", ".xyz", ".extxyz")


@dataclass(frozen=True)
class RelaxConfig:
    """Settings of one ``mdband relax`` (each is a flag: ``fmax`` is ``--fmax``)."""

    structure: list[str] | None = setting(
        None,
        "Structure to relax: a deepmd-kit system, a LAMMPS data file or dump, a VASP OUTCAR or "
        "vasprun.xml, or any ase.io.read file; a glob pattern ('cands/*.xyz') or a repeated "
        "flag relaxes several together (one multi-frame --output).",
        metavar="FILE",
        repeatable=True,
    )
    format: str | None = setting(
        None,
        "Format of --structure as dpdata names it (deepmd/npy, lammps/dump, ...), h5md, or an "
        "ASE format name.",
        metavar="FORMAT",
        default_text="from the file name",
    )
    type_map: str | None = setting(
        None,
        "Type map: the element of each type number, e.g. O,H (type 0, LAMMPS type 1, is O), "
        "for files that number their types.",
        metavar="EL,EL",
        default_text="names in the file, LAMMPS Masses, else the model's type map",
    )
    frame: int = setting(
        -1,
        "Image of the structure file, counting from 0 (-1: the last; the images of a VASP "
        "OUTCAR or vasprun.xml are its converged ionic steps).",
        default_text="last",
    )
    all_frames: bool = setting(
        False,
        "Relax every image of every structure file, together (one multi-frame --output), "
        "instead of one --frame.",
    )
    model: str | None = setting(
        None, "Model file (mdband, deepmd-kit SeZM) or builtin:NAME.", metavar="PATH"
    )
    output: str | None = setting(
        None, "Relaxed structure (format from the name, any ase.io.write one).", metavar="FILE"
    )
    trajectory: str | None = setting(
        None, "Every optimiser step, as an ASE .traj or extxyz file.", metavar="FILE"
    )
    fmax: float = setting(
        0.01, "Converged when every force (and, with --cell, stress) is below this.", unit="eV/Å"
    )
    cell: bool = setting(False, "Relax the cell too (FrechetCellFilter, to zero stress).")
    optimizer: str = setting("fire", "ASE optimiser.", choices=OPTIMIZERS)
    steps: int = setting(1000, "Most optimiser steps.")
    overwrite: bool = setting(False, "Replace existing output files.")
    device: str = setting(
        "auto", "auto (CUDA when available, else CPU), cpu, cuda or cuda:N.", metavar="DEVICE"
    )
    dtype: str = setting("float64", "Model precision.", choices=("float32", "float64"))
    head: str | None = head_setting()
    charge: int | None = charge_setting()
    spin: int | None = spin_setting()
    min_distance: float = setting(
        0.5, "Refuse structures with two atoms closer than this (0 disables).", unit="Å"
    )
    threads: int | None = setting(
        None, "CPU threads for torch (process-wide).", default_text="torch's choice"
    )

    def __post_init__(self) -> None:
        """Make ``structure`` a list and check the settings (:class:`ConfigError` if bad)."""
        if isinstance(self.structure, (str, tuple)):  # one file, or a tuple from the API
            one = isinstance(self.structure, str)
            object.__setattr__(self, "structure", [self.structure] if one else list(self.structure))
        check_values(self, ConfigError)
        if not self.fmax > 0:
            raise ConfigError(f"fmax must be positive; got {self.fmax}")
        if self.steps < 1:
            raise ConfigError(f"steps must be positive; got {self.steps}")
        if self.min_distance < 0:
            raise ConfigError("min_distance must be >= 0 Å")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"threads must be >= 1; got {self.threads}")
        for name in ("charge", "spin"):
            if getattr(self, name) is not None:
                try:
                    whole_number(name, getattr(self, name))
                except ChargeSpinError as exc:
                    raise ConfigError(str(exc)) from None
        if self.all_frames and self.frame != -1:
            raise ConfigError("--frame and --all-frames exclude each other")
        for name, flag in (("structure", "--structure"), ("model", "--model")):
            if not getattr(self, name):
                raise ConfigError(f"no {name} given ({flag})")
        if not self.output:
            raise ConfigError("no output given (--output FILE)")
        _check_format_and_type_map(self)

    def to_dict(self) -> dict:
        """Return every setting as a dict."""
        return asdict(self)


def _check_format_and_type_map(c: RelaxConfig) -> None:
    from mdband.io.frames import DatasetError
    from mdband.io.structure import parse_type_map
    from mdband.io.systems import format_name

    try:
        format_name(c.format)
        if c.type_map is not None:
            parse_type_map(c.type_map)
    except (DatasetError, ValueError) as exc:
        raise ConfigError(str(exc)) from None


def structure_paths(c: RelaxConfig) -> list[str]:
    """Return the ``structure`` entries with glob patterns expanded.

    Each pattern's matches come in natural order; an existing path is taken as it is, a pattern
    that matches nothing is an error.
    """
    import glob
    import re

    def natural(text: str) -> list:
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]

    out = []
    for entry in c.structure or []:
        if Path(entry).exists() or not glob.has_magic(entry):
            out.append(entry)
            continue
        found = sorted(glob.glob(entry), key=natural)
        if not found:
            raise ConfigError(f"no structure file matches {entry}")
        out += found
    return out


def is_batch(c: RelaxConfig) -> bool:
    """Whether ``c`` relaxes several structures (:mod:`mdband.md.relax_batch`)."""
    return c.all_frames or len(structure_paths(c)) > 1


if RelaxConfig.__doc__:  # None under python -OO
    RelaxConfig.__doc__ += parameters_doc(RelaxConfig)


@dataclass
class RelaxResult:
    """Outcome of :func:`relax`: energy in eV, forces in eV/Å, stress in GPa."""

    atoms: Atoms
    converged: bool
    steps: int
    energy: float
    max_force: float  # largest atomic force (constraints applied)
    max_stress: float | None  # largest |stress component| (periodic cells)
    volume: float | None
    notes: list[str] = field(default_factory=list)  # how numbered types became elements


def output_format(path, what: str = "output") -> str:
    """Return the ASE format ``path``'s name asks for.

    Raises :class:`ConfigError` when no ASE format that can write it is found.
    """
    from ase.io.formats import filetype, ioformats

    try:
        fmt = filetype(str(path), read=False)
    except Exception:  # noqa: BLE001 - ASE raises several kinds for unknown names
        fmt = None
    if fmt not in ioformats or not ioformats[fmt].can_write:
        raise ConfigError(f"cannot tell an ASE format that writes {what} {path} from its name")
    return fmt


def _claim_outputs(c: RelaxConfig):
    """Check the outputs, lock them and refuse existing ones unless ``overwrite``.

    The outputs must not be an input nor one file (:mod:`mdband.io.files`); the caller releases
    the returned locks.
    """
    from mdband.io.files import claim_outputs

    output_format(c.output)
    if c.trajectory and Path(c.trajectory).suffix.lower() not in _TRAJECTORY_SUFFIXES:
        raise ConfigError(f"trajectory {c.trajectory} must end in .traj, .xyz or .extxyz")
    paths = structure_paths(c)
    inputs: dict[str, str | None] = {
        f"structure {k + 1}" if len(paths) > 1 else "structure": p for k, p in enumerate(paths)
    }
    if not str(c.model).startswith("builtin:"):
        inputs["model"] = c.model
    return claim_outputs(
        {"output": c.output, "trajectory": c.trajectory},
        inputs,
        overwrite=c.overwrite,
        error=ConfigError,
        verb="the relaxation",
        hint="use --overwrite to replace it",
    )


def _snapshot(atoms: Atoms) -> Atoms:
    """Return a copy of ``atoms`` carrying the calculator's latest results (for writing)."""
    snap = atoms.copy()
    results = atoms.calc.results
    keep = {k: results[k] for k in ("energy", "free_energy", "forces", "stress") if k in results}
    snap.calc = SinglePointCalculator(snap, **keep)
    return snap


class _TrajectoryWriter:
    """Appends optimiser steps to an ASE .traj (incrementally) or an extxyz file."""

    def __init__(self, path: str, atoms: Atoms) -> None:
        self.path = Path(path)
        self.atoms = atoms
        self.frames = 0
        self._traj = None
        # a new file renamed onto the path: an old file or a link there is replaced, never
        # written through (the outputs were claimed: replacing is allowed)
        start_new_file(self.path, overwrite=True, what="trajectory")
        if self.path.suffix.lower() == ".traj":
            from ase.io.trajectory import Trajectory

            self._traj = Trajectory(str(self.path), "w")

    def __call__(self) -> None:
        snap = _snapshot(self.atoms)
        if self._traj is not None:
            self._traj.write(snap)
        else:
            import ase.io

            ase.io.write(self.path, snap, format="extxyz", append=True)
        self.frames += 1

    def close(self) -> None:
        if self._traj is not None:
            self._traj.close()


def relax(config: RelaxConfig, *, potential=None, logfile="-") -> RelaxResult:
    """Relax ``config.structure`` with ``config.model`` and write ``config.output``.

    Parameters
    ----------
    config : RelaxConfig
    potential : Potential, optional
        An already loaded potential (``config.model`` is then not read).
    logfile : str or file, optional
        Where the optimiser prints its step table (ASE's ``logfile``; None: nowhere).

    Raises
    ------
    MdbandError
        Bad input, before anything is written (:class:`ConfigError`, :class:`StructureError`,
        :class:`OutputExistsError`, model errors).
    """
    fmt = output_format(config.output)
    with _claim_outputs(config):
        return _relax(config, potential, logfile, fmt)


def _relax(config: RelaxConfig, potential, logfile, fmt: str) -> RelaxResult:
    import ase.io
    from ase.filters import FrechetCellFilter
    from ase.optimize import BFGS, FIRE

    from mdband.calculator import Calculator, magmoms_of

    paths = structure_paths(config)
    if config.all_frames or len(paths) != 1:
        raise ConfigError("several structures: relax them with mdband.md.relax_batch.relax_many")
    if config.threads is not None:
        import torch

        torch.set_num_threads(config.threads)
    if potential is None:
        from mdband.loader import load_model

        potential = load_model(
            config.model, device=config.device, dtype=config.dtype, head=config.head
        )
    if config.cell and potential.direct_forces:
        raise ConfigError(
            "the model gives direct forces and no virial (deepmd-kit's dens mode); "
            "--cell needs the stress"
        )
    notes: list[str] = []
    atoms = read_structure(
        paths[0],
        config.frame,
        format=config.format,
        type_map=config.type_map,
        default_type_map=potential.type_map,
        notes=notes,
    )
    check_structure(atoms, potential, config.min_distance)
    magmoms_of(atoms, potential)  # a spin model's moments, checked before anything is written
    row = _charge_spin(config, potential, atoms, paths[0])
    if row is not None:
        logger.info("relax: total charge %d, spin multiplicity %d", *row)
    if config.cell and not np.all(atoms.get_pbc()):
        raise StructureError("--cell needs a structure periodic in all three directions")
    atoms.calc = Calculator(potential)
    target = FrechetCellFilter(atoms) if config.cell else atoms
    optimizer = {"fire": FIRE, "bfgs": BFGS}[config.optimizer](target, logfile=logfile)
    writer = _TrajectoryWriter(config.trajectory, atoms) if config.trajectory else None
    try:
        if writer is not None:
            optimizer.attach(writer, interval=1)
        converged = bool(optimizer.run(fmax=config.fmax, steps=config.steps))
    finally:
        if writer is not None:
            writer.close()
    result = _result(atoms, converged, optimizer.nsteps)
    result.notes = notes
    with atomic_path(config.output, replace=config.overwrite) as tmp:
        ase.io.write(tmp, _snapshot(atoms), format=fmt)
    logger.info(
        "relax: %s after %d steps, energy %.6f eV, max force %.3g eV/Å; wrote %s",
        "converged" if converged else "not converged",
        result.steps,
        result.energy,
        result.max_force,
        config.output,
    )
    return result


def _charge_spin(config: RelaxConfig, potential, atoms: Atoms, where: str | None = None):
    """Put ``--charge`` / ``--spin`` into ``atoms.info`` and check them against the model.

    The flags go over the structure file's values, which a charge/spin model reads otherwise;
    they are checked against the model before any step (a model without the embedding refuses
    the flags and ignores the file's values). Returns the (charge, spin) row evaluated, None for
    other models; a bad value is a :class:`ConfigError` (prefixed ``where:``).
    """
    for k in ("charge", "spin"):
        if getattr(config, k) is not None:
            atoms.info[k] = getattr(config, k)
    if potential.charge_spin is None:
        potential.charge_spin_of(config.charge, config.spin)
        return None
    try:
        row = potential.charge_spin_of(atoms.info.get("charge"), atoms.info.get("spin"))
    except ChargeSpinError as exc:
        if isinstance(exc, MissingChargeSpinError):
            raise
        raise ConfigError(str(exc) if where is None else f"{where}: {exc}") from None
    return tuple(row.tolist()[0])


def _result(atoms: Atoms, converged: bool, steps: int) -> RelaxResult:
    forces = atoms.get_forces()
    max_force = float(np.sqrt((forces**2).sum(axis=1).max())) if len(atoms) else 0.0
    stress = volume = None
    if np.all(atoms.get_pbc()):
        stress = float(np.abs(atoms.get_stress(voigt=False)).max() / units.GPa)
        volume = float(atoms.get_volume())
    energy = float(atoms.get_potential_energy())
    if not math.isfinite(energy):
        raise StructureError("the relaxation produced a non-finite energy")
    return RelaxResult(atoms, converged, int(steps), energy, max_force, stress, volume)
