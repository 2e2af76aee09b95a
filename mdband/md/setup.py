"""Everything a run checks before it writes anything: outputs, model, structure, checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ase import Atoms

from mdband.calculator import Calculator, NeighbourReference
from mdband.errors import StructureError
from mdband.io.checkpoint import Checkpoint, CheckpointError, read_checkpoint
from mdband.io.h5md import H5MDReader, TrajectoryError
from mdband.io.run_files import default_final
from mdband.io.structure import read_structure
from mdband.md.config import RunConfig, merge_for_resume
from mdband.md.constraints import carried_constraints, describe, restore_constraints
from mdband.md.ensembles import Ensemble, thermostat_rng
from mdband.md.errors import ConfigError, OutputExistsError
from mdband.md.system import check_structure
from mdband.md.velocities import set_initial_velocities
from mdband.potential import Potential

_OUTPUTS = ("trajectory", "checkpoint", "log", "final", "model_devi")


@dataclass
class Prepared:
    """A run ready to step: resolved settings, atoms with calculator, integrator."""

    config: RunConfig
    potential: Potential
    atoms: Atoms
    calculator: Calculator
    ensemble: Ensemble
    start_step: int
    resumed: bool
    notes: list[str]
    model_devi: object | None = None  # mdband.committee.recorder.DeviationRecorder


def prepare(config: RunConfig, potential: Potential | None = None) -> Prepared:
    """Validate everything and build the run; raises a typed error and writes nothing."""
    _check_paths(config)
    ck = read_checkpoint(config.checkpoint) if config.resume else None
    if ck is not None:
        config = _resume_config(config, ck)
    else:
        config = config.resolved()
    if config.threads is not None:
        import torch

        torch.set_num_threads(config.threads)
    if potential is None:
        from mdband.loader import load_model

        potential = load_model(
            config.model, device=config.device, dtype=config.dtype, head=config.head
        )
    notes: list[str] = []
    if ck is not None:
        atoms = _atoms_from_checkpoint(ck, potential, config)
        restore_constraints(atoms, ck.constraints, config, str(config.checkpoint))
        start = ck.step
        notes.append(f"Resuming from {config.checkpoint} at step {ck.step}")
    else:
        atoms = _fresh_atoms(config, potential, notes)
        start = 0
    if config.committee:
        calc, recorder = _committee(config, potential, atoms)
        notes.append(recorder.describe())
    else:
        calc, recorder = Calculator(potential, skin=config.skin), None
    atoms.calc = calc
    ensemble = Ensemble.build(atoms, config, thermostat_rng(config.seed))
    if ck is not None:
        if ck.neighbours is not None:
            calc.restore_neighbours(NeighbourReference(**ck.neighbours))
        ensemble.set_state(ck.integrator)
        ensemble.set_rng_state(ck.rng)
        _check_trajectory(config, atoms, potential)
    return Prepared(
        config, potential, atoms, calc, ensemble, start, ck is not None, notes, recorder
    )


def _committee(config: RunConfig, potential: Potential, atoms: Atoms):
    """The committee's calculator (first model = ``potential``) and its recorder."""
    from mdband.committee import CommitteeCalculator
    from mdband.committee.recorder import DeviationRecorder
    from mdband.loader import load_model

    others = [
        load_model(m, device=config.device, dtype=config.dtype, head=config.head)
        for m in config.committee
    ]
    calc = CommitteeCalculator([potential, *others], skin=config.skin, deviations=False)
    calc.committee.check_species(atoms.get_atomic_numbers())
    recorder = DeviationRecorder(
        calc,
        config.model_devi,
        config.model_devi_every,
        config.model_devi_atomic,
        config.overwrite,
    )
    return calc, recorder


def _check_paths(c: RunConfig) -> None:
    paths = {name: getattr(c, name) for name in _OUTPUTS if getattr(c, name)}
    if not c.final and default_final(c.trajectory, c.log):
        paths["final"] = default_final(c.trajectory, c.log)
    resolved = [Path(p).resolve() for p in paths.values()]
    if len(set(resolved)) != len(resolved):
        raise ConfigError(
            "trajectory, checkpoint, log, final and model_devi must be different files"
        )
    for name, p in paths.items():
        path = Path(p)
        if not path.parent.is_dir():
            raise ConfigError(f"directory of {name} file {path} does not exist")
        if path.is_dir():
            raise ConfigError(f"{name} path {path} is a directory")
        if c.resume or c.overwrite or not path.exists():
            continue
        raise OutputExistsError(
            f"{name} file {path} exists; use --overwrite to replace it or --resume to continue"
        )


def _resume_config(config: RunConfig, ck: Checkpoint) -> RunConfig:
    explicit = config.to_dict()
    for name in ("seed", "tdamp", "pdamp"):
        if explicit[name] is None:
            del explicit[name]
    merged = merge_for_resume(ck.config, explicit)
    if merged.steps < ck.step:
        raise ConfigError(
            f"steps {merged.steps} is below the checkpoint's step {ck.step}; "
            "steps is the total length of the run"
        )
    return merged


def _atoms_from_checkpoint(ck: Checkpoint, potential: Potential, config: RunConfig) -> Atoms:
    if ck.model_hash != potential.model_hash:
        raise CheckpointError(
            f"checkpoint {config.checkpoint} was written with model {ck.model_hash[:12]}, "
            f"but {config.model} is model {potential.model_hash[:12]}"
        )
    n = len(ck.numbers)
    for name in ("positions", "momenta"):
        if getattr(ck, name).shape != (n, 3):
            raise CheckpointError(f"checkpoint {name} has shape {getattr(ck, name).shape}")
    if ck.masses.shape != (n,) or not np.all(ck.masses > 0):
        raise CheckpointError("checkpoint masses are missing or not positive")
    potential.types_of(ck.numbers)
    atoms = Atoms(
        numbers=ck.numbers, positions=ck.positions, cell=ck.cell, pbc=ck.pbc, masses=ck.masses
    )
    atoms.set_momenta(ck.momenta, apply_constraint=False)
    return atoms


def _fresh_atoms(config: RunConfig, potential: Potential, notes: list[str]) -> Atoms:
    src = read_structure(
        config.structure,
        config.frame,
        format=config.format,
        type_map=config.type_map,
        default_type_map=potential.type_map,
        notes=notes,
    )
    constraints = carried_constraints(src.constraints, config, str(config.structure))
    check_structure(src, potential, config.min_distance)
    atoms = Atoms(
        numbers=src.get_atomic_numbers(),
        positions=src.get_positions(),
        cell=src.get_cell().array,
        pbc=src.get_pbc(),
        masses=src.get_masses(),
    )
    if constraints:
        atoms.set_constraint(constraints)
        notes.append(describe(atoms))
    notes.append(set_initial_velocities(atoms, src, config))
    if not np.all(np.isfinite(atoms.get_momenta())):
        raise StructureError(f"velocities in {config.structure} contain NaN or inf")
    return atoms


def _check_trajectory(config: RunConfig, atoms: Atoms, potential: Potential) -> None:
    if not config.trajectory or not Path(config.trajectory).exists():
        return
    with H5MDReader(config.trajectory) as r:
        params = r.parameters
        if r.n_atoms != len(atoms) or not np.array_equal(r.species, atoms.numbers):
            raise TrajectoryError(
                f"trajectory {config.trajectory} holds other atoms than the checkpoint"
            )
        if params.get("model_hash") != potential.model_hash:
            raise TrajectoryError(
                f"trajectory {config.trajectory} was written with another model "
                f"({str(params.get('model_hash'))[:12]})"
            )
        if r.variable_cell != (config.ensemble == "npt-mtk"):
            raise TrajectoryError(
                f"trajectory {config.trajectory} was written by another ensemble's run"
            )
