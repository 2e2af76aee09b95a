"""RunConfig: every setting of an MD run, validated once.

Units: timestep, ``tdamp`` and ``pdamp`` in fs; temperature in K; pressure in GPa; friction
in ps⁻¹; lengths (``min_distance``, ``skin``) in Å. A setting is one field declared with
:func:`~mdband.md.setting_table.setting`: that makes it a TOML key, a ``mdband run`` flag, a
``--help`` line and a ``--print-config`` line.
"""

from __future__ import annotations

import math
import re
import secrets
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from mdband.charge_spin import ChargeSpinError, whole_number
from mdband.host_memory import CHOICES as HOST_MEMORY
from mdband.io.h5md import FORCE_UNITS
from mdband.io.run_files import default_final
from mdband.io.thermo_table import PRESSURE_UNITS, THERMO_EXTRAS
from mdband.md.errors import ConfigError
from mdband.md.setting_table import (
    charge_setting,
    check_values,
    head_setting,
    parameters_doc,
    setting,
    spin_setting,
    to_toml,
)
from mdband.settings import check_budget

ENSEMBLES = ("nve", "nvt-langevin", "nvt-bussi", "nvt-nhc", "npt-mtk")
BAROSTATS = ("isotropic", "full")
DTYPES = ("float32", "float64")
ENGINES = ("ase", "lammps")
VELOCITIES = ("auto", "maxwell", "file")
#: ``compile = "auto"`` compiles CUDA runs of at least this many steps: compiling costs once
#: (and again for each new edge-list bucket) what thousands of faster steps win back
#: (BENCHMARKS.md "2026-12-01 (evening)", torch.compile: the break-even per config)
COMPILE_AUTO_STEPS = 50_000
PATH_FIELDS = ("structure", "model", "trajectory", "checkpoint", "log", "final", "model_devi")
# settings that define the dynamics: a resumed run must keep them
PHYSICS_FIELDS = (
    "ensemble",
    "temperature",
    "pressure",
    "timestep",
    "friction",
    "tdamp",
    "pdamp",
    "tchain",
    "pchain",
    "tloop",
    "ploop",
    "barostat",
    "engine",
    "dtype",  # float32 and float64 runs differ in every bit
    "charge",  # total charge and spin multiplicity of a charge/spin model
    "spin",
)
TIMESTEP_BOUNDS_FS = (0.01, 20.0)  # outside: refused unless allow_unusual_timestep


@dataclass(frozen=True)
class RunConfig:
    """Settings of one ``mdband run``.

    Each is a TOML key and a flag (``traj_every`` is ``--traj-every``), declared once below with
    its help text (:mod:`mdband.md.setting_table`).

    Units: fs, K, GPa, ps⁻¹ and Å, as the help of each setting says. ``device="auto"`` is
    CUDA when available, else CPU (the rule of every mdband front end).
    """

    structure: str | None = setting(
        None,
        "Starting structure: a deepmd-kit system (npy, npy/mixed, hdf5, raw), a LAMMPS data "
        "file or dump, a VASP OUTCAR or vasprun.xml, or any ase.io.read file (extxyz, ...).",
        metavar="FILE",
    )
    format: str | None = setting(
        None,
        "Format of --structure, named as dpdata names it (deepmd/npy, deepmd/npy/mixed, "
        "deepmd/hdf5, deepmd/raw, lammps/lmp, lammps/dump, vasp/outcar, vasp/xml), h5md, or "
        "an ASE format name.",
        metavar="FORMAT",
        default_text="from the file name",
    )
    type_map: str | None = setting(
        None,
        "Type map: the element of each type number, e.g. O,H (type 0, LAMMPS type 1, is O), "
        "for files that number their types (LAMMPS, deepmd-kit without type_map.raw).",
        metavar="EL,EL",
        default_text="names in the file, LAMMPS Masses, else the model's type map",
    )
    model: str | None = setting(
        None,
        "Model file (mdband, deepmd-kit SeZM) or builtin:NAME; repeat the flag (or give a TOML "
        "list) for a committee: the first model drives the dynamics.",
        metavar="PATH",
        repeatable=True,
    )
    frame: int = setting(
        -1,
        "Image of the structure file to start from, counting from 0 (-1: the last; the images "
        "of a VASP OUTCAR or vasprun.xml are its converged ionic steps).",
        default_text="last",
    )
    ensemble: str = setting("nve", "Ensemble.", choices=ENSEMBLES)
    temperature: float = setting(300.0, "Target and initial-velocity temperature.", unit="K")
    pressure: float = setting(0.0, "Target pressure (npt-mtk).", unit="GPa")
    timestep: float = setting(1.0, "Time step.", unit="fs")
    steps: int = setting(1000, "Total length in steps (a resumed run continues until it).")
    seed: int | None = setting(
        None,
        "Seed of the initial velocities and the thermostat noise.",
        default_text="drawn and recorded",
    )
    velocities: str = setting(
        "auto",
        "Initial velocities: maxwell (Maxwell-Boltzmann at exactly --temperature, zero total "
        "momentum, zero rotation for open systems), file (from the structure file; an error "
        "if it has none) or auto (file when it has them, else maxwell).",
        choices=VELOCITIES,
    )
    friction: float = setting(1.0, "Langevin friction.", unit="ps^-1", metavar="1/PS")
    tdamp: float | None = setting(
        None, "Thermostat time constant in fs.", metavar="FS", default_text="100 timesteps"
    )
    pdamp: float | None = setting(
        None, "Barostat time constant in fs.", metavar="FS", default_text="1000 timesteps"
    )
    tchain: int = setting(3, "Nose-Hoover thermostat chain length (nvt-nhc, npt-mtk).")
    pchain: int = setting(3, "Nose-Hoover barostat chain length (npt-mtk).")
    tloop: int = setting(1, "Thermostat chain sub-steps per step (nvt-nhc, npt-mtk).")
    ploop: int = setting(1, "Barostat chain sub-steps per step (npt-mtk).")
    barostat: str = setting(
        "isotropic", "npt-mtk cell fluctuations: volume only or the full cell.", choices=BAROSTATS
    )
    trajectory: str | None = setting(None, "H5MD trajectory output.", metavar="FILE.h5")
    traj_every: int = setting(100, "Trajectory frame interval in steps.")
    thermo_every: int | None = setting(
        None,
        "Thermo-line interval in steps (console table, log, CSV rows); frames keep traj_every.",
        default_text="traj_every",
    )
    thermo_columns: tuple[str, ...] = setting(
        (),
        "Extra thermo columns: pressure_tensor (pxx pyy pzz pyz pxz pxy, with the kinetic "
        "part, as LAMMPS), cell (lengths a b c in Å), density (g/cm^3).",
        choices=THERMO_EXTRAS,
        metavar="NAME,...",
    )
    pressure_unit: str = setting(
        "GPa", "Unit of the thermo table's and log's pressures.", choices=PRESSURE_UNITS
    )
    traj_precision: str = setting("float32", "Precision of trajectory frames.", choices=DTYPES)
    traj_force_unit: str = setting(
        "kJ mol-1 Angstrom-1",
        "Unit of trajectory forces: one MDAnalysis converts (kJ mol-1 Angstrom-1, kcal mol-1 "
        "Angstrom-1, kJ mol-1 nm-1), or eV Angstrom-1 (MDAnalysis opens it through "
        "mdband.io.mdanalysis).",
        choices=FORCE_UNITS,
    )
    checkpoint: str | None = setting(None, "Restart file.", metavar="FILE")
    checkpoint_every: int = setting(1000, "Checkpoint interval in steps (and at the end).")
    resume: bool = setting(False, "Continue from --checkpoint until --steps.")
    overwrite: bool = setting(
        False, "Replace existing output files (a resumed run ignores it: it continues them)."
    )
    device: str = setting(
        "auto", "auto (CUDA when available, else CPU), cpu, cuda or cuda:N.", metavar="DEVICE"
    )
    dtype: str = setting("float32", "Model precision.", choices=DTYPES)
    stack_precision: str | None = setting(
        None,
        "Products of the fused SO(2) mixing layers on CUDA: tf32x3, fp16x3 (same rounding, "
        "about as fast), fp16 (fastest, about 2^-11 per product) or ieee; "
        "docs/precision.md.",
        choices=("tf32x3", "fp16x3", "fp16", "ieee"),
        default_text="tf32x3 or $MDBAND_STACK_PRECISION",
    )
    compile: str = setting(
        "auto",
        "torch.compile the model's torch code between its fused ops: auto ($MDBAND_COMPILE if "
        f"set, else on for CUDA runs with {COMPILE_AUTO_STEPS:,} or more steps to go: the first "
        "step compiles, tens of seconds), on or off.",
        choices=("auto", "on", "off"),
    )
    memory_budget: str | None = setting(
        None,
        "Memory one evaluation may use before it runs in chunks of atoms (same numbers, more "
        "time): a size such as 40GB, auto (90 % of the free GPU memory; no limit on CPU) or off.",
        metavar="SIZE",
        default_text="auto or $MDBAND_MEMORY_BUDGET",
    )
    host_memory: str | None = setting(
        None,
        "Host memory freed by a call: auto (kept in the process for the next call when the "
        "model runs on the CPU: fewer page faults, 20-45 % faster CPU steps; the process keeps "
        "its peak memory), keep (also for CUDA models) or system (the C library's own).",
        choices=HOST_MEMORY,
        default_text="auto or $MDBAND_HOST_MEMORY",
    )
    head: str | None = head_setting()
    charge: int | None = charge_setting()
    spin: int | None = spin_setting()
    log: str | None = setting(
        None,
        "Also write the thermo table and summary to this file (CSV rows when it ends in .csv).",
        metavar="FILE",
    )
    final: str | None = setting(
        None,
        "Final structure, written atomically at the end and on a clean stop (format from its "
        "name).",
        metavar="FILE",
        default_text="<trajectory or log stem>.final.xyz",
    )
    min_distance: float = setting(
        0.5, "Refuse structures with two atoms closer than this (0 disables).", unit="Å"
    )
    skin: float = setting(0.0, "Neighbour-list skin (0 rebuilds the list every step).", unit="Å")
    threads: int | None = setting(
        None, "CPU threads for torch (process-wide).", default_text="torch's choice"
    )
    progress: bool = setting(True, "Show a progress bar.")
    engine: str = setting(
        "ase",
        "ase (one process) or lammps (pair_style mdband; mpirun -np N for ranks).",
        choices=ENGINES,
    )
    committee: tuple[str, ...] = setting(
        (),
        "Further models evaluated on the same frames as --model for the model deviation "
        "(deepmd-kit's definitions); they never change the dynamics. Needs --model-devi.",
        metavar="PATH,...",
    )
    model_devi: str | None = setting(
        None,
        "Model-deviation output in deepmd-kit's model_devi.out layout (and the same numbers as "
        "H5MD observables in every frame).",
        metavar="FILE",
    )
    model_devi_every: int = setting(100, "Model-deviation interval in steps (out_freq).")
    model_devi_atomic: bool = setting(
        False, "Append the per-atom force deviations to each model_devi row."
    )
    max_temperature: float | None = setting(
        None,
        "Stop the run (exit code 3, the last checkpoint kept) when the temperature exceeds "
        "this, checked before each frame and checkpoint; 0 disables the check.",
        unit="K",
        default_text="max(10 x temperature, 10000 K)",
    )
    guard_distance: float = setting(
        0.4,
        "Stop the run (exit code 3) when two atoms come closer than this, checked like "
        "max_temperature; 0 disables the check.",
        unit="Å",
    )
    allow_unusual_timestep: bool = setting(
        False,
        "Accept a timestep outside 0.01-20 fs (refused by default: no atomistic run uses one).",
    )

    def __post_init__(self) -> None:
        """Split a model list into model and committee, then validate the settings."""
        for name, value in split_models(self.model, self.committee).items():
            object.__setattr__(self, name, value)
        _validate(self)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_mapping(cls, data: dict, base_dir: str | Path | None = None) -> RunConfig:
        """Build from a dict (a TOML table, say); relative paths are taken from ``base_dir``."""
        return cls(**normalise_mapping(data, base_dir))

    def to_dict(self) -> dict:
        """Return every setting as a dict."""
        return asdict(self)

    def to_toml(self) -> str:
        """Return the settings as TOML that reads back to an equal config; paths become absolute.

        ``mdband run --config`` (or :meth:`from_mapping` of ``tomllib.loads``) reads it back.
        """
        from mdband._version import __version__

        header = f"mdband {__version__} run settings; run them with: mdband run --config FILE"
        return to_toml(self, header, path_fields=(*PATH_FIELDS, "committee"))

    def resolved(self) -> RunConfig:
        """Return a copy with the seed and damping times made concrete (what a run records)."""
        return replace(
            self,
            seed=secrets.randbits(63) if self.seed is None else self.seed,
            tdamp=100 * self.timestep if self.tdamp is None else self.tdamp,
            pdamp=1000 * self.timestep if self.pdamp is None else self.pdamp,
            final=self.final or default_final(self.trajectory, self.log),
            thermo_every=self.traj_every if self.thermo_every is None else self.thermo_every,
        )


if RunConfig.__doc__:  # None under python -OO
    RunConfig.__doc__ += parameters_doc(RunConfig)
_FIELD_TYPES = {f.name: f.type for f in fields(RunConfig)}
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def split_models(model, committee=()) -> dict:
    """Return ``model`` and ``committee`` from a model given as a list.

    The list is a TOML array or a repeated ``--model``: the first entry drives the dynamics, the
    others form the committee.
    """
    if not isinstance(model, (list, tuple)):
        return {"model": model, "committee": committee}
    if committee:
        raise ConfigError("give the committee either as a list of models or as committee")
    model = list(model)
    return {"model": model[0] if model else None, "committee": tuple(model[1:])}


def normalise_mapping(data: dict, base_dir: str | Path | None = None) -> dict:
    """Check keys, coerce numbers, and make relative paths absolute against ``base_dir``.

    ``traj-every`` and ``traj_every`` are both accepted as keys.
    """
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in _FIELD_TYPES:
            raise ConfigError(f"unknown setting {key!r}")
        if name == "type_map" and isinstance(value, (list, tuple)):  # TOML: ["O", "H"]
            value = ",".join(map(str, value))
        if base_dir is not None and name in (*PATH_FIELDS, "committee") and value is not None:
            if isinstance(value, (list, tuple)):
                value = [_path(v, base_dir) for v in value]
            else:
                value = _path(value, base_dir)
        out[name] = value
    if isinstance(out.get("model"), (list, tuple)):
        out.update(split_models(out["model"], out.get("committee", ())))
    return out


def _path(value, base_dir) -> str:
    """``value`` made absolute against ``base_dir`` (``builtin:NAME`` models stay as they are)."""
    if str(value).startswith("builtin:"):
        return str(value)
    return str(Path(base_dir).resolve() / Path(str(value)).expanduser())


def _validate(c: RunConfig) -> None:
    check_values(c, ConfigError)  # types and choices, from the settings table
    if not _DEVICE.fullmatch(c.device):
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N; got {c.device!r}")
    if c.memory_budget is not None:
        try:
            check_budget(c.memory_budget)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    _positive(c, "timestep", "steps", "traj_every", "checkpoint_every", "friction")
    if c.thermo_every is not None:
        _positive(c, "thermo_every")
    _positive(c, "tchain", "pchain", "tloop", "ploop")
    for name in ("tdamp", "pdamp"):
        if getattr(c, name) is not None:
            _positive(c, name)
    if c.temperature < 0:
        raise ConfigError(f"temperature must be >= 0 K; got {c.temperature}")
    if c.ensemble != "nve" and c.temperature <= 0:
        raise ConfigError(f"ensemble {c.ensemble} needs a temperature > 0 K")
    if c.min_distance < 0 or c.skin < 0:
        raise ConfigError("min_distance and skin must be >= 0 Å")
    if c.threads is not None and c.threads < 1:
        raise ConfigError(f"threads must be >= 1; got {c.threads}")
    if c.seed is not None and c.seed < 0:
        raise ConfigError(f"seed must be >= 0; got {c.seed}")
    for name in ("charge", "spin"):
        if getattr(c, name) is not None:
            try:
                whole_number(name, getattr(c, name))
            except ChargeSpinError as exc:
                raise ConfigError(str(exc)) from None
    _runaway_settings(c)
    if c.resume and not c.checkpoint:
        raise ConfigError("resume needs a checkpoint file")
    if not c.model:
        raise ConfigError("no model given (--model)")
    if not c.structure and not c.resume:
        raise ConfigError("no structure given (--structure)")
    _positive(c, "model_devi_every")
    if c.committee and not c.model_devi:
        raise ConfigError("a committee of models needs a model deviation file (--model-devi)")
    if c.model_devi and not c.committee:
        raise ConfigError("model_devi needs a committee: give two or more models (--model)")
    if c.committee and c.engine == "lammps":
        raise ConfigError(
            "a committee is not available with engine lammps; use engine ase, or pair_style "
            "mdband a.pt b.pt ... out_freq N out_file FILE in a LAMMPS input"
        )
    _validate_io(c)


def _runaway_settings(c: RunConfig) -> None:
    low, high = TIMESTEP_BOUNDS_FS
    if not c.allow_unusual_timestep and not low < c.timestep < high:
        raise ConfigError(
            f"timestep {c.timestep:g} fs is outside {low:g}-{high:g} fs, where atomistic MD "
            "runs; set allow_unusual_timestep (--allow-unusual-timestep) to run it anyway"
        )
    if c.max_temperature is not None and c.max_temperature < 0:
        raise ConfigError(f"max_temperature must be >= 0 K (0: no limit); got {c.max_temperature}")
    if c.guard_distance < 0:
        raise ConfigError(f"guard_distance must be >= 0 Å (0: no check); got {c.guard_distance}")


def _validate_io(c: RunConfig) -> None:
    """``format``, ``type_map`` and ``final`` (see :mod:`mdband.io.structure`)."""
    from mdband.io.frames import DatasetError
    from mdband.io.run_files import final_format
    from mdband.io.structure import parse_type_map
    from mdband.io.systems import format_name

    if c.format is not None:
        try:
            format_name(c.format)
        except DatasetError as exc:
            raise ConfigError(str(exc)) from None
    if c.type_map is not None:
        try:
            parse_type_map(c.type_map)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if c.final:
        try:
            final_format(c.final)
        except ValueError as exc:
            raise ConfigError(f"final: {exc}") from None


def _positive(c: RunConfig, *names: str) -> None:
    for name in names:
        value = getattr(c, name)
        if not value > 0:
            raise ConfigError(f"{name} must be positive; got {value}")


def merge_for_resume(recorded: dict, explicit: dict) -> RunConfig:
    """Return the settings of a resumed run.

    They are the checkpoint's ``recorded`` ones, updated by ``explicit``.

    Raises :class:`ConfigError` naming every explicit physics setting that differs from the
    recorded run.
    """
    # what the recorded run was told about its outputs is no setting of this run
    merged = {k: v for k, v in recorded.items() if k in _FIELD_TYPES and k != "overwrite"}
    merged.update(normalise_mapping(explicit))
    config = RunConfig(**merged)
    clashes = []
    for name in PHYSICS_FIELDS:
        if name not in explicit or name not in recorded:
            continue
        new, old = getattr(config, name), recorded[name]
        if isinstance(old, float) or isinstance(new, float):
            same = old is not None and new is not None and math.isclose(new, old, rel_tol=1e-12)
        else:
            same = new == old
        if not same:
            clashes.append(f"{name} {old!r} -> {new!r}")
    if clashes:
        raise ConfigError(
            "cannot resume with changed settings: " + "; ".join(clashes) + " (start a new run)"
        )
    return config
