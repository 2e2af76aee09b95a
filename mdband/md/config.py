"""RunConfig: every setting of an MD run, validated once.

Units: timestep, ``tdamp`` and ``pdamp`` in fs; temperature in K; pressure in GPa; friction
in ps⁻¹; lengths (``min_distance``, ``skin``) in Å.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from mdband.io.h5md import FORCE_UNITS
from mdband.md.errors import ConfigError

ENSEMBLES = ("nve", "nvt-langevin", "nvt-bussi", "nvt-nhc", "npt-mtk")
BAROSTATS = ("isotropic", "full")
DTYPES = ("float32", "float64")
ENGINES = ("ase", "lammps")
PATH_FIELDS = ("structure", "model", "trajectory", "checkpoint", "log")
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
)
TIMESTEP_BOUNDS_FS = (0.01, 20.0)  # outside: refused unless allow_unusual_timestep


@dataclass(frozen=True)
class RunConfig:
    """Settings of one ``mdband run``.

    Parameters
    ----------
    structure : str
        Any file :func:`ase.io.read` reads; ``frame`` picks one image (default: the last).
    model : str
        Model file for :func:`mdband.load_model`.
    ensemble : {"nve", "nvt-langevin", "nvt-bussi", "nvt-nhc", "npt-mtk"}
    temperature : float
        Target (and initial-velocity) temperature in K.
    pressure : float
        Target pressure in GPa (``npt-mtk``).
    timestep : float
        Time step in fs.
    steps : int
        Total length of the run in steps; a resumed run continues until the counter reaches it.
    seed : int, optional
        Seed of the initial velocities and of the thermostat noise; drawn at random (and
        recorded) when not given.
    friction : float
        Langevin friction in ps⁻¹.
    tdamp, pdamp : float, optional
        Thermostat / barostat time constants in fs (default 100 and 1000 time steps).
    tchain, pchain, tloop, ploop : int
        Nosé-Hoover chain lengths and sub-steps (``nvt-nhc``, ``npt-mtk``).
    barostat : {"isotropic", "full"}
        ``npt-mtk`` cell fluctuations: volume only, or the full (triclinic) cell.
    trajectory : str, optional
        H5MD output; frames every ``traj_every`` steps in ``traj_precision``, forces in
        ``traj_force_unit`` ("kJ mol-1 Angstrom-1", readable by MDAnalysis, or
        "eV Angstrom-1").
    checkpoint : str, optional
        Restart file, written every ``checkpoint_every`` steps and at the end.
    resume, overwrite : bool
        Continue from ``checkpoint`` / replace existing outputs.
    device, dtype, head
        Passed to :func:`mdband.load_model`.
    log : str, optional
        Plain-text copy of the thermo table and the summary.
    min_distance : float
        Refuse structures with two atoms closer than this (Å); 0 disables the check.
    skin : float
        Neighbour-list skin in Å (0 rebuilds the list every step).
    threads : int, optional
        CPU threads for torch (process-wide; default: torch's choice).
    progress : bool
        Show a progress bar.
    engine : {"ase", "lammps"}
        Who integrates: ASE in this process, or LAMMPS with ``pair_style mdband`` (runs under
        ``mpirun``; see :mod:`mdband.md.lammps_engine`).
    max_temperature : float, optional
        Stop the run (exit code 3, the last checkpoint kept) when the temperature exceeds this
        (K), checked before each frame and checkpoint; default max(10 × temperature,
        10,000 K); 0 disables the check.
    guard_distance : float
        Stop the run (exit code 3) when two atoms come closer than this (Å), checked like
        ``max_temperature``; default 0.4; 0 disables the check.
    allow_unusual_timestep : bool
        Accept a timestep outside 0.01–20 fs (refused by default: no atomistic run uses one).
    """

    structure: str | None = None
    model: str | None = None
    frame: int = -1
    ensemble: str = "nve"
    temperature: float = 300.0
    pressure: float = 0.0
    timestep: float = 1.0
    steps: int = 1000
    seed: int | None = None
    friction: float = 1.0
    tdamp: float | None = None
    pdamp: float | None = None
    tchain: int = 3
    pchain: int = 3
    tloop: int = 1
    ploop: int = 1
    barostat: str = "isotropic"
    trajectory: str | None = None
    traj_every: int = 100
    traj_precision: str = "float32"
    traj_force_unit: str = "kJ mol-1 Angstrom-1"
    checkpoint: str | None = None
    checkpoint_every: int = 1000
    resume: bool = False
    overwrite: bool = False
    device: str = "auto"
    dtype: str = "float32"
    head: str | None = None
    log: str | None = None
    min_distance: float = 0.5
    skin: float = 0.0
    threads: int | None = None
    progress: bool = True
    engine: str = "ase"
    max_temperature: float | None = None
    guard_distance: float = 0.4
    allow_unusual_timestep: bool = False

    def __post_init__(self) -> None:
        _validate(self)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_mapping(cls, data: dict, base_dir: str | Path | None = None) -> RunConfig:
        """Build from a dict (a TOML table, say); relative paths are taken from ``base_dir``."""
        return cls(**normalise_mapping(data, base_dir))

    def to_dict(self) -> dict:
        return asdict(self)

    def resolved(self) -> RunConfig:
        """A copy with the seed and damping times made concrete (what a run records)."""
        return replace(
            self,
            seed=secrets.randbits(63) if self.seed is None else self.seed,
            tdamp=100 * self.timestep if self.tdamp is None else self.tdamp,
            pdamp=1000 * self.timestep if self.pdamp is None else self.pdamp,
        )


_FIELD_TYPES = {f.name: f.type for f in fields(RunConfig)}


def normalise_mapping(data: dict, base_dir: str | Path | None = None) -> dict:
    """Check keys (``traj-every`` and ``traj_every`` both accepted), coerce numbers, and make
    relative paths absolute against ``base_dir``."""
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in _FIELD_TYPES:
            raise ConfigError(f"unknown setting {key!r}")
        builtin = name == "model" and str(value).startswith("builtin:")
        if name in PATH_FIELDS and value is not None and base_dir is not None and not builtin:
            value = str(Path(base_dir).resolve() / Path(str(value)).expanduser())
        out[name] = value
    return out


def _validate(c: RunConfig) -> None:
    _types(c)
    if c.ensemble not in ENSEMBLES:
        raise ConfigError(f"ensemble must be one of {', '.join(ENSEMBLES)}; got {c.ensemble!r}")
    if c.engine not in ENGINES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINES)}; got {c.engine!r}")
    if c.barostat not in BAROSTATS:
        raise ConfigError(f"barostat must be one of {', '.join(BAROSTATS)}; got {c.barostat!r}")
    if c.traj_force_unit not in FORCE_UNITS:
        raise ConfigError(f"traj_force_unit must be one of {', '.join(map(repr, FORCE_UNITS))}")
    for name in ("dtype", "traj_precision"):
        if getattr(c, name) not in DTYPES:
            raise ConfigError(f"{name} must be float32 or float64; got {getattr(c, name)!r}")
    _positive(c, "timestep", "steps", "traj_every", "checkpoint_every", "friction")
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
    _runaway_settings(c)
    if c.resume and c.overwrite:
        raise ConfigError("resume and overwrite exclude each other")
    if c.resume and not c.checkpoint:
        raise ConfigError("resume needs a checkpoint file")
    if not c.model:
        raise ConfigError("no model given (--model)")
    if not c.structure and not c.resume:
        raise ConfigError("no structure given (--structure)")


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


_KIND_NAMES = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a finite number",
    "str": "a string",
}


def _types(c: RunConfig) -> None:
    for f in fields(c):
        value = getattr(c, f.name)
        kind = f.type
        if value is None and "None" in kind:
            continue
        if kind.startswith("bool"):
            ok = isinstance(value, bool)
        elif kind.startswith("int"):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind.startswith("float"):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok:
                ok = math.isfinite(value)
                if ok:
                    object.__setattr__(c, f.name, float(value))
        else:
            ok = isinstance(value, str)
        if not ok:
            what = _KIND_NAMES[kind.split(" |")[0]]
            raise ConfigError(f"{f.name} must be {what}, got {value!r}")


def _positive(c: RunConfig, *names: str) -> None:
    for name in names:
        value = getattr(c, name)
        if not value > 0:
            raise ConfigError(f"{name} must be positive; got {value}")


def merge_for_resume(recorded: dict, explicit: dict) -> RunConfig:
    """Settings of a resumed run: the checkpoint's ``recorded`` ones, updated by ``explicit``.

    Raises :class:`ConfigError` naming every explicit physics setting that differs from the
    recorded run.
    """
    merged = {k: v for k, v in recorded.items() if k in _FIELD_TYPES}
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
