"""The MD loop: step, check, sample (thermo + trajectory frame), checkpoint.

Order within a step that is both a sampling and a checkpoint step: the frame is written and
flushed first, then the checkpoint, so a checkpoint never refers to a frame that is not on
disk. Frames after the last checkpoint are dropped when the run is resumed.

Every step is checked for NaN/inf; before a frame or a checkpoint is written, the runaway
guard checks the temperature and the closest pair (:mod:`mdband.md.guards`); out of memory
and a full disk stop the run with :class:`~mdband.errors.ResourceExhaustedError`. In each
case no checkpoint is written after the problem: the last good one stays, and the trajectory
is closed with the frames before it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from ase import Atoms, units

from mdband import host_threads
from mdband._version import __version__
from mdband.errors import (
    MdbandError,
    ResourceExhaustedError,
    StructureError,
    is_out_of_memory,
)
from mdband.io.atomic import is_disk_full
from mdband.io.checkpoint import Checkpoint, write_checkpoint
from mdband.io.h5md import Frame, H5MDWriter, TrajectoryHeader
from mdband.io.run_files import write_final
from mdband.md import outputs
from mdband.md.config import RunConfig
from mdband.md.constraints import constraints_json
from mdband.md.errors import RunInterrupted, SimulationDivergedError
from mdband.md.guards import RunawayGuard
from mdband.md.progress import Reporter
from mdband.md.setup import Prepared, prepare
from mdband.md.thermo import ThermoTable, observables
from mdband.potential import Potential

_PS = 1000.0 * units.fs  # ASE time units per ps
#: steps whose cost the summary also reports apart: step 1 runs the kernels' first calls (JIT,
#: torch.compile), step 2 captures the CUDA graph, replays follow
WARMUP_STEPS = 3
_NEIGHBOUR_NAMES = {"cell_list": "cell list on the device", "vesin": "vesin on the CPU"}


@dataclass
class RunResult:
    """Outcome of :func:`run`: the final atoms and what the run wrote."""

    config: RunConfig
    atoms: Atoms
    first_step: int
    final_step: int
    wall_time: float
    summary: list[str]
    samples: list[tuple[int, float, dict]]


def run(config: RunConfig, *, potential: Potential | None = None, console=None) -> RunResult:
    """Run molecular dynamics as ``config`` says (what ``mdband run`` calls).

    Parameters
    ----------
    config : RunConfig
    potential : Potential, optional
        An already loaded potential (``config.model`` is then only recorded).
    console : rich.console.Console, optional
        Where progress and the thermo table go (default: stdout).

    Raises
    ------
    MdbandError
        Bad input (before anything is written), :class:`SimulationDivergedError` when the run
        produces NaN/inf or runs away (``max_temperature``, ``guard_distance``; the last
        checkpoint and trajectory are kept), :class:`~mdband.errors.ResourceExhaustedError`
        on a full disk or out of memory (the same), or :class:`RunInterrupted` after
        SIGINT/SIGTERM (a checkpoint is written first).
    """
    p = prepare(config, potential)
    try:
        return _Run(p, console).execute()
    finally:
        p.locks.release()


class _Run:
    def __init__(self, p: Prepared, console) -> None:
        self.p = p
        self.c = p.config
        self.atoms = p.atoms
        self.writer: H5MDWriter | None = None
        self.last_checkpoint: int | None = p.start_step if p.resumed else None
        self.guard = RunawayGuard.from_config(self.c)
        self._guarded: int | None = None  # the last step the guard checked
        self.step = p.start_step
        self.reporter = Reporter(
            p.start_step,
            self.c.steps,
            self.c.timestep,
            self.c.log,
            append=p.resumed,
            show_progress=self.c.progress,
            console=console,
            table=ThermoTable(self.c.thermo_columns, self.c.pressure_unit),
        )
        self.reporter.plot_source = self.c.trajectory or self.c.log

    # ------------------------------------------------------------------ helpers
    def _time_ps(self, step: int) -> float:
        return step * self.c.timestep / 1000.0

    def _check_finite(self, step: int) -> None:
        """Stop on NaN/inf (the calculator's latest results are those of the current step)."""
        a = self.atoms
        res = self.p.calculator.results
        ok = (
            np.isfinite(res["energy"])
            and np.all(np.isfinite(res["forces"]))
            and np.all(np.isfinite(a.get_positions()))
            and np.all(np.isfinite(a.get_momenta()))
            and np.all(np.isfinite(a.get_cell().array))
        )
        if not ok:
            raise self._diverged(step, "the energy, forces, positions or momenta are NaN/inf")

    def _check_runaway(self, step: int) -> None:
        """Stop before a runaway state is sampled or checkpointed (:mod:`mdband.md.guards`)."""
        if step == self.p.start_step or self._guarded == step:
            return
        self._guarded = step
        problem = self.guard.temperature_problem(self.atoms.get_temperature())
        problem = problem or self.guard.distance_problem(self.atoms)
        if problem is not None:
            raise self._diverged(step, problem)

    def _kept(self) -> str:
        if self.last_checkpoint is not None:
            return f"last good checkpoint: step {self.last_checkpoint} ({self.c.checkpoint})"
        return "no checkpoint was written"

    def _diverged(self, step: int, what: str) -> SimulationDivergedError:
        return SimulationDivergedError(f"run stopped at step {step}: {what}; {self._kept()}")

    def _exhausted(self, what: str) -> ResourceExhaustedError:
        return ResourceExhaustedError(f"run stopped at step {self.step}: {what}; {self._kept()}")

    def _sample(self, step: int, thermo: bool = True, frame: bool = True) -> None:
        """Emit a thermo line (``thermo``) and/or a trajectory frame (``frame``) of this step."""
        self._check_runaway(step)
        try:
            conserved = self.p.ensemble.conserved_energy()
        except ArithmeticError as exc:  # e.g. a barostat mass of 0 from a 1e-300 fs timestep
            raise self._diverged(step, f"the integrator failed ({exc})") from None
        obs = observables(self.atoms, conserved)
        if frame and self.p.model_devi is not None:
            obs.update(self.p.model_devi.observables(step, self.atoms))
        t = self._time_ps(step)
        if thermo:
            self.reporter.thermo(step, t, obs)
        if frame and self.writer is not None:
            a = self.atoms
            self.writer.append(
                Frame(
                    step=step,
                    time=t,
                    positions=a.get_positions(),
                    velocities=a.get_velocities() * _PS,
                    forces=a.get_forces(),
                    cell=a.get_cell().array,
                    observables=obs,
                )
            )

    def _checkpoint(self, step: int) -> None:
        if not self.c.checkpoint or self.last_checkpoint == step:
            return
        self._check_runaway(step)
        if self.writer is not None:
            self.writer.flush()  # the checkpoint never refers to a frame not on disk
        a = self.atoms
        ref = self.p.calculator.neighbour_reference()
        if self.p.model_devi is not None:
            self.p.model_devi.sync()  # rows before the checkpoint that refers to them
        write_checkpoint(
            self.c.checkpoint,
            Checkpoint(
                step=step,
                time=self._time_ps(step),
                numbers=a.get_atomic_numbers(),
                masses=a.get_masses(),
                positions=a.get_positions(),
                momenta=a.get_momenta(),
                cell=a.get_cell().array,
                pbc=a.get_pbc(),
                config=outputs.recorded_config(self.c),
                model_hash=self.p.potential.model_hash,
                integrator=self.p.ensemble.get_state(),
                rng=self.p.ensemble.rng_state(),
                neighbours=None
                if ref is None
                else {"positions": ref.positions, "cell": ref.cell, "pbc": ref.pbc},
                constraints=constraints_json(a),
                outputs=outputs.record(
                    self.c, self.p.plan.run_id, None if self.writer is None else self.writer.written
                ),
                magmoms=self._magmoms(),
            ),
        )
        self.last_checkpoint = step

    def _magmoms(self):
        """Return a spin model's fixed moments (N, 3), else None."""
        if self.p.potential.spin is None:
            return None
        return self.atoms.get_initial_magnetic_moments()

    def _final(self) -> list[str]:
        """Write the final structure (if configured); the summary line saying so."""
        if not self.c.final:
            return []
        write_final(self.c.final, self.atoms)
        return [f"Final structure: {self.c.final}"]

    def _open_trajectory(self) -> None:
        if self.p.plan.trajectory == "none":
            return
        if self.p.plan.trajectory == "append":
            self.writer = H5MDWriter.resume(self.c.trajectory, self.p.start_step)
            return
        a = self.atoms
        pot = self.p.potential
        params = {
            "config_json": json.dumps(outputs.recorded_config(self.c), sort_keys=True),
            "run_id": self.p.plan.run_id,
            "model_hash": pot.model_hash,
            "model_kind": pot.kind,
            "type_map": " ".join(pot.type_map),  # what `mdband export` numbers types by
            "mdband_version": __version__,
            "ensemble": self.c.ensemble,
            "timestep_fs": self.c.timestep,
            "units": "Angstrom, eV, ps (time), K, GPa (pressure, stress), u (mass)",
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        header = TrajectoryHeader(
            species=a.get_atomic_numbers(),
            masses=a.get_masses(),
            pbc=a.get_pbc(),
            variable_cell=self.c.ensemble == "npt-mtk",
            parameters=params,
            precision=self.c.traj_precision,
            force_unit=self.c.traj_force_unit,
            model_devi=self.p.model_devi is not None,
            magmoms=self._magmoms(),
        )
        self.writer = H5MDWriter.create(self.c.trajectory, header)

    def _intro(self) -> list[str]:
        c, pot, n = self.c, self.p.potential, len(self.atoms)
        lines = [
            f"mdband {__version__}: {c.ensemble}, {n} atoms, dt {c.timestep} fs, "
            f"steps {self.p.start_step} -> {c.steps}",
            f"Model: {pot.kind} {pot.model_hash[:12]} on {pot.device} ({str(pot.dtype)[6:]})"
            + (f", CUDA graphs {pot.cuda_graphs}" if pot.device.type == "cuda" else ""),
            f"Neighbours: {_NEIGHBOUR_NAMES.get(pot.neighbour_backend, pot.neighbour_backend)}"
            + (f", skin {c.skin:g} Å" if c.skin > 0 else ", rebuilt every step (skin 0)"),
        ]
        lines.append(f"Memory budget: {pot.memory_budget}")
        if pot.device.type == "cpu":
            lines.append(f"Host memory: {pot.host_memory}")
            lines.append(f"CPU: {host_threads.describe()}")
        settings = pot.settings  # the network's engine settings (None: a test potential)
        if settings is not None and pot.device.type == "cuda":
            lines.append(f"Engine: SO(2) products {settings.stack_precision}, "
                         f"torch.compile {settings.compile}")  # fmt: skip
        lines += self.p.notes
        names = ("trajectory", "checkpoint", "log", "model_devi")
        outs = [f"{k} {getattr(c, k)}" for k in names if getattr(c, k, None)]
        if outs:
            lines.append("Writing: " + ", ".join(outs))
        return lines

    # ------------------------------------------------------------------ loop
    def execute(self) -> RunResult:
        failed = True
        try:
            with _resources(self):
                self.atoms.get_forces()  # forces at the (restored) start positions
                self._check_finite(self.p.start_step)
                result = self._loop()
            failed = False
            return result
        except KeyboardInterrupt as exc:  # a second SIGINT within a step, or before the loop
            name = str(exc) if str(exc).startswith("SIG") else "SIGINT"
            stop = RunInterrupted(f"stopped by {name} at step {self.step}; {self._kept()}")
            self._report(stop)
            raise stop from None
        except MdbandError as exc:
            self._report(exc)
            raise
        finally:
            self._close(quiet=failed)

    def _report(self, exc: BaseException) -> None:
        try:
            self.reporter.message(f"Stopped: {exc}")
        except OSError:  # the log's disk is full
            pass

    def _loop(self) -> RunResult:
        c, start = self.c, self.p.start_step
        t0 = time.perf_counter()
        model_s0 = getattr(self.atoms.calc, "model_seconds", None)
        outputs.clean_temps(c)
        if self.p.plan.log_size is not None:
            assert c.log is not None  # a log size is planned only for a log
            os.truncate(c.log, self.p.plan.log_size)  # drop the rows after the checkpoint
        self._open_trajectory()
        devi = self.p.model_devi
        if devi is not None:
            devi.open(self.p.resumed, start)
        self.reporter.start(self._intro())
        if not self.p.resumed:
            if devi is not None:
                devi.at_step(0, self.atoms)
            self._sample(0)
            self._checkpoint(0)
        steady = None  # (time, model seconds) once the warm-up steps are done
        with _deferred_signals() as stop:
            for step in range(start + 1, c.steps + 1):
                self.step = step
                self._advance(step)
                if devi is not None:
                    devi.at_step(step, self.atoms)
                thermo_now = step % (c.thermo_every or c.traj_every) == 0
                if thermo_now or step % c.traj_every == 0:
                    self._sample(step, thermo_now, step % c.traj_every == 0)
                if step % c.checkpoint_every == 0 or step == c.steps:
                    with stop.shielded():
                        self._checkpoint(step)
                self.reporter.advance(step)
                if step == start + WARMUP_STEPS and model_s0 is not None:
                    steady = (time.perf_counter(), self.atoms.calc.model_seconds)
                if stop and step < c.steps:
                    with stop.shielded():  # more signals wait: these writes complete
                        self._checkpoint(step)
                        self._final()
                    hint = f"; resume with --resume from {c.checkpoint}" if c.checkpoint else ""
                    raise RunInterrupted(f"stopped by {stop[0]} at step {step}{hint}")
            wall = time.perf_counter() - t0
            with stop.shielded():
                if self.writer is not None:
                    self.writer.close()
                extra = [f"Checkpoint: {c.checkpoint} (step {c.steps})"] if c.checkpoint else []
                extra += self._final()
        if model_s0 is not None and c.steps > start:
            in_model = self.atoms.calc.model_seconds - model_s0
            line = time_split(wall, in_model, c.steps - start)
            later = c.steps - start - WARMUP_STEPS
            if steady is not None and later >= WARMUP_STEPS:
                line += steady_split(t0 + wall - steady[0],
                                     self.atoms.calc.model_seconds - steady[1], later)  # fmt: skip
            extra.append(line)
        summary = self.reporter.finish(c.steps, len(self.atoms), extra)
        return RunResult(c, self.atoms, start, c.steps, wall, summary, self.reporter.samples)

    def _close(self, quiet: bool) -> None:
        """Close the trajectory (writing its waiting frames) and the log.

        After a failure an error here (the disk is still full) must not hide the first one.
        """
        try:
            if self.writer is not None:
                self.writer.close()
        except (MdbandError, OSError):
            if not quiet:
                raise
        finally:
            try:
                if self.p.model_devi is not None:
                    self.p.model_devi.close()
                self.reporter.close()
            except OSError:
                if not quiet:
                    raise

    def _advance(self, step: int) -> None:
        with np.errstate(all="ignore"):
            try:
                self.p.ensemble.step()
            except (ArithmeticError, np.linalg.LinAlgError, StructureError) as exc:
                raise self._diverged(step, f"the integrator failed ({exc})") from None
        self._check_finite(step)


def time_split(wall: float, model: float, steps: int) -> str:
    """Return the summary line splitting a step's wall time between the model and the rest."""
    per, in_model = 1e3 * wall / steps, 1e3 * model / steps
    return (f"Time per step: {per:.2f} ms, of which {in_model:.2f} ms in the model (forces, "
            f"neighbour list) and {per - in_model:.2f} ms elsewhere (integrator, trajectory, "
            "checkpoints, output)")  # fmt: skip


def steady_split(wall: float, model: float, steps: int) -> str:
    """Return the summary's tail for the steps after the warm-up.

    The first calls compile kernels and capture CUDA graphs, or torch.compile; the tail says
    what a longer run costs per step.
    """
    return (f"; after the first {WARMUP_STEPS} steps (kernel compilation, graph capture): "
            f"{1e3 * wall / steps:.2f} ms per step, {1e3 * model / steps:.2f} ms in the "
            "model")  # fmt: skip


@contextmanager
def _resources(run: _Run):
    """Turn out-of-memory and disk-full errors into :class:`ResourceExhaustedError`."""
    try:
        yield
    except ResourceExhaustedError as exc:  # from the trajectory or checkpoint writer
        raise run._exhausted(str(exc)) from None
    except torch.OutOfMemoryError:
        n = len(run.atoms)
        raise run._exhausted(
            f"out of GPU memory evaluating the model on {n} atoms (after the step graphs' own "
            "fallbacks)"
        ) from None
    except (MemoryError, RuntimeError) as exc:  # numpy, torch's CPU allocator, vesin...
        if not is_out_of_memory(exc):
            raise
        raise run._exhausted(
            f"out of memory (CPU) evaluating the model on {len(run.atoms)} atoms"
        ) from None
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise run._exhausted(f"disk full ({' '.join(str(exc).split())[:120]})") from None


class _Stop(list):
    """The signals that arrived (names); true once one did.

    Within :meth:`shielded` a second SIGINT waits too (the checkpoint and final structure being
    written complete).
    """

    def __init__(self) -> None:
        super().__init__()
        self.shield = 0

    @contextmanager
    def shielded(self):
        self.shield += 1
        try:
            yield
        finally:
            self.shield -= 1


@contextmanager
def _deferred_signals():
    """Turn SIGINT/SIGTERM into a flag checked between steps (main thread only).

    Yields a :class:`_Stop` that holds the signal's name once one arrived; a second SIGINT
    raises KeyboardInterrupt at once, except while writes are shielded
    (:meth:`_Stop.shielded`).
    """
    caught = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def handler(signum, frame):
        if caught and signum == signal.SIGINT and not caught.shield:
            raise KeyboardInterrupt("SIGINT")
        caught.append(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for s, h in old.items():
            signal.signal(s, h)
