"""Everything a run checks before it writes anything: outputs, model, structure, checkpoint.

The outputs are locked here (:func:`mdband.md.outputs.claim_outputs`); the run releases them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from ase import Atoms

from mdband.calculator import Calculator, NeighbourReference, magmoms_of
from mdband.charge_spin import ChargeSpinError, whole_number
from mdband.errors import SpinInputError, StructureError
from mdband.io.checkpoint import Checkpoint, CheckpointError, read_checkpoint
from mdband.io.locks import OutputLocks
from mdband.io.structure import read_structure
from mdband.md.config import COMPILE_AUTO_STEPS, RunConfig, merge_for_resume
from mdband.md.constraints import carried_constraints, describe, restore_constraints
from mdband.md.ensembles import Ensemble, thermostat_rng
from mdband.md.errors import ConfigError, RunInterrupted
from mdband.md.outputs import ResumePlan, claim_outputs, new_run_id, plan_resume
from mdband.md.system import check_structure
from mdband.md.velocities import set_initial_velocities
from mdband.potential import Potential

if TYPE_CHECKING:
    from mdband.committee.recorder import DeviationRecorder
from mdband.settings import ENV


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
    locks: OutputLocks
    plan: ResumePlan  # what happens to the outputs (a fresh run: "create", no log cut)
    model_devi: DeviationRecorder | None = None


def prepare(config: RunConfig, potential: Potential | None = None) -> Prepared:
    """Validate everything and build the run; raises a typed error and writes nothing.

    The returned run holds the locks of its outputs (``Prepared.locks``; release them).
    """
    locks = claim_outputs(config)
    try:
        return _prepare(config, potential, locks)
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM under the console script
        locks.release()
        name = str(exc) if str(exc).startswith("SIG") else "SIGINT"
        raise RunInterrupted(
            f"stopped by {name}; the run had not started: nothing was written"
        ) from None
    except BaseException:
        locks.release()
        raise


def _prepare(config: RunConfig, potential: Potential | None, locks: OutputLocks) -> Prepared:
    ck = read_checkpoint(config.checkpoint) if config.resume else None
    notes: list[str] = []
    if ck is not None:
        config = _resume_config(config, ck)
        if config.overwrite:
            notes.append("Warning: overwrite is ignored: a resumed run continues its own outputs")
            config = replace(config, overwrite=False)
    else:
        config = config.resolved()
    if config.threads is not None:
        import torch

        torch.set_num_threads(config.threads)
    if potential is None:
        from mdband.loader import load_model

        potential = load_model(config.model, **model_options(config, ck.step if ck else 0))
    if potential.direct_forces and config.ensemble == "npt-mtk":
        raise ConfigError(
            f"{config.model} gives direct forces and no virial (deepmd-kit's dens mode); "
            "npt-mtk needs the virial: use an NVE or NVT ensemble"
        )
    if ck is not None:
        atoms = _atoms_from_checkpoint(ck, potential, config)
        restore_constraints(atoms, ck.constraints, config, str(config.checkpoint))
        start = ck.step
        notes.append(f"Resuming from {config.checkpoint} at step {ck.step}")
    else:
        atoms = _fresh_atoms(config, potential, notes)
        start = 0
    if config.committee:
        calc, recorder = _committee(config, potential, atoms, start)
        notes.append(recorder.describe())
        config = charge_spin_of_run(config, calc.committee.potentials, atoms, notes)
    else:
        calc, recorder = Calculator(potential, skin=config.skin), None
        config = charge_spin_of_run(config, [potential], atoms, notes)
    atoms.calc = calc
    ensemble = _build_ensemble(atoms, config)
    plan = ResumePlan(new_run_id(), "create" if config.trajectory else "none", None)
    if ck is not None:
        if ck.neighbours is not None:
            calc.restore_neighbours(NeighbourReference(**ck.neighbours))
        ensemble.set_state(ck.integrator)
        ensemble.set_rng_state(ck.rng)
        plan = plan_resume(config, ck, atoms, potential.model_hash, notes)
        notes += _ignored_on_resume(config, ck)
    return Prepared(
        config, potential, atoms, calc, ensemble, start, ck is not None, notes, locks, plan,
        recorder,
    )  # fmt: skip


def charge_spin_of_run(config: RunConfig, potentials, atoms: Atoms, notes: list[str]) -> RunConfig:
    """Return the run's config with its total charge and spin multiplicity made settings.

    The charge and spin multiplicity (:mod:`mdband.charge_spin`) become settings a checkpoint keeps:
    ``charge`` / ``spin`` as given, else (a fresh run of a charge/spin model) the structure file's
    ``atoms.info`` values, else None (the model's default). Checked against every model (a one-line
    typed error: a value missing without a default, or given to models that take none); written to
    ``atoms.info`` for the calculator.
    """
    takes = [p for p in potentials if p.charge_spin is not None]
    found = {k: atoms.info.pop(k, None) for k in ("charge", "spin")}
    if not takes:
        potentials[0].charge_spin_of(config.charge, config.spin)  # refuses given values
        return config
    fill: dict[str, Any] = {}
    for k, v in found.items():
        if getattr(config, k) is None and v is not None:
            try:
                fill[k] = whole_number(k, v)
            except ChargeSpinError as exc:
                raise ConfigError(f"{config.structure}: {exc}") from None
    config = replace(config, **fill)
    rows = [p.charge_spin_of(config.charge, config.spin).tolist()[0] for p in takes]
    for k in ("charge", "spin"):
        if getattr(config, k) is not None:
            atoms.info[k] = getattr(config, k)
    how = {k: "from the structure file" if k in fill else "given" for k in ("charge", "spin")}
    for k in ("charge", "spin"):
        if getattr(config, k) is None:
            how[k] = "the model's default"
    notes.append(f"Total charge {rows[0][0]} ({how['charge']}), spin multiplicity "
                 f"{rows[0][1]} ({how['spin']})")  # fmt: skip
    return config


def compile_for(config: RunConfig, start: int = 0) -> str | None:
    """Return the ``compile`` engine setting of a run from step ``start``.

    ``on``/``off`` as given; ``auto`` leaves it to ``$MDBAND_COMPILE`` when that is set (None), else
    is on for CUDA runs with at least ``COMPILE_AUTO_STEPS`` steps still to go (the compile pays for
    itself).
    """
    if config.compile != "auto":
        return config.compile
    if ENV["compile"] in os.environ:
        return None
    device = str(config.device)
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    todo = config.steps - start
    return "on" if device.startswith("cuda") and todo >= COMPILE_AUTO_STEPS else "off"


def model_options(config: RunConfig, start: int = 0) -> dict:
    """load_model's arguments for the run's model(s), the run going on from step ``start``."""
    options = dict(device=config.device, dtype=config.dtype, head=config.head,
                   stack_precision=config.stack_precision,
                   compile=compile_for(config, start))  # fmt: skip
    if config.memory_budget is not None:  # else $MDBAND_MEMORY_BUDGET or the default
        options["memory_budget"] = config.memory_budget
    if config.host_memory is not None:  # else $MDBAND_HOST_MEMORY or the default
        options["host_memory"] = config.host_memory
    return options


def _committee(config: RunConfig, potential: Potential, atoms: Atoms, start: int = 0):
    """Build the committee's calculator (first model = ``potential``) and its recorder."""
    from mdband.committee import CommitteeCalculator
    from mdband.committee.recorder import DeviationRecorder
    from mdband.loader import load_model

    others = [load_model(m, **model_options(config, start)) for m in config.committee]
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


def _build_ensemble(atoms: Atoms, config: RunConfig) -> Ensemble:
    try:
        return Ensemble.build(atoms, config, thermostat_rng(config.seed))
    except (ArithmeticError, np.linalg.LinAlgError, ValueError) as exc:
        detail = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise ConfigError(
            f"cannot set up {config.ensemble} with timestep {config.timestep:g} fs: {detail}"
        ) from None


def _ignored_on_resume(config: RunConfig, ck: Checkpoint) -> list[str]:
    """Warnings for settings a resumed run cannot use (the checkpoint holds the state)."""
    out = []
    old = ck.config.get("structure")
    if config.structure and old and Path(config.structure).resolve() != Path(old).resolve():
        out.append(
            f"Warning: structure {config.structure} is ignored: a resumed run continues from "
            f"the checkpoint's atoms (the run started from {old})"
        )
    if config.frame != ck.config.get("frame", config.frame):
        out.append(f"Warning: frame {config.frame} is ignored on resume")
    for name in ("traj_precision", "traj_force_unit"):
        old = ck.config.get(name, getattr(config, name))
        if getattr(config, name) != old and config.trajectory:
            out.append(
                f"Warning: {name} {getattr(config, name)!r} is ignored: the trajectory keeps "
                f"its {old!r}"
            )
    return out


def _resume_config(config: RunConfig, ck: Checkpoint) -> RunConfig:
    explicit = config.to_dict()
    for name in ("seed", "tdamp", "pdamp", "thermo_every"):  # None: the recorded value
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
    if potential.spin is not None:
        if ck.magmoms is None or ck.magmoms.shape != (n, 3):
            raise CheckpointError(
                f"checkpoint {config.checkpoint} has no (N, 3) magnetic moments, which the spin "
                f"model {config.model} needs"
            )
        atoms.set_initial_magnetic_moments(ck.magmoms)
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
        info={k: src.info[k] for k in ("charge", "spin") if k in src.info},  # charge_spin_of_run
    )
    if potential.spin is not None:  # held fixed for the whole run
        try:
            atoms.set_initial_magnetic_moments(magmoms_of(src, potential))
        except SpinInputError as exc:
            raise SpinInputError(f"structure {config.structure}: {exc}") from None
        magnetic = potential.spin.magnetic_types(potential.type_map)
        notes.append(
            f"Magnetic moments: from {config.structure}, held fixed ({potential.spin.scheme} "
            f"spin model; magnetic types {' '.join(magnetic) or 'none'})"
        )
    if constraints:
        atoms.set_constraint(constraints)
        notes.append(describe(atoms))
    notes.append(set_initial_velocities(atoms, src, config))
    if not np.all(np.isfinite(atoms.get_momenta())):
        raise StructureError(f"velocities in {config.structure} contain NaN or inf")
    return atoms
