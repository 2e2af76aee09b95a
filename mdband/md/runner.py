"""The MD loop: step, check, sample (thermo + trajectory frame), checkpoint.

Order within a step that is both a sampling and a checkpoint step: the frame is written and
flushed first, then the checkpoint, so a checkpoint never refers to a frame that is not on
disk. Frames after the last checkpoint are dropped when the run is resumed.
"""

from __future__ import annotations

import datetime as _dt
import json
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ase import Atoms, units

from mdband._version import __version__
from mdband.errors import MdbandError, StructureError
from mdband.io.checkpoint import Checkpoint, write_checkpoint
from mdband.io.h5md import Frame, H5MDWriter, TrajectoryHeader
from mdband.io.run_files import write_final
from mdband.md.config import RunConfig
from mdband.md.constraints import constraints_json
from mdband.md.errors import RunInterrupted, SimulationDivergedError
from mdband.md.progress import Reporter
from mdband.md.setup import Prepared, prepare
from mdband.md.thermo import observables
from mdband.potential import Potential

_PS = 1000.0 * units.fs  # ASE time units per ps
_NEIGHBOUR_NAMES = {"cell_list": "torch cell list on the device", "vesin": "vesin on the CPU"}


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
        produces NaN/inf (the last checkpoint and trajectory are kept), or
        :class:`RunInterrupted` after SIGINT/SIGTERM (a checkpoint is written first).
    """
    return _Run(prepare(config, potential), console).execute()


class _Run:
    def __init__(self, p: Prepared, console) -> None:
        self.p = p
        self.c = p.config
        self.atoms = p.atoms
        self.writer: H5MDWriter | None = None
        self.last_checkpoint: int | None = p.start_step if p.resumed else None
        self.reporter = Reporter(
            p.start_step,
            self.c.steps,
            self.c.timestep,
            self.c.log,
            append=p.resumed,
            show_progress=self.c.progress,
            console=console,
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

    def _diverged(self, step: int, what: str) -> SimulationDivergedError:
        kept = (
            f"last good checkpoint: step {self.last_checkpoint} ({self.c.checkpoint})"
            if self.last_checkpoint is not None
            else "no checkpoint was written"
        )
        return SimulationDivergedError(f"run stopped at step {step}: {what}; {kept}")

    def _sample(self, step: int) -> None:
        obs = observables(self.atoms, self.p.ensemble.conserved_energy())
        if self.p.model_devi is not None:
            obs.update(self.p.model_devi.observables(step, self.atoms))
        t = self._time_ps(step)
        self.reporter.thermo(step, t, obs)
        if self.writer is not None:
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
                config=self.c.to_dict(),
                model_hash=self.p.potential.model_hash,
                integrator=self.p.ensemble.get_state(),
                rng=self.p.ensemble.rng_state(),
                neighbours=None
                if ref is None
                else {"positions": ref.positions, "cell": ref.cell, "pbc": ref.pbc},
                constraints=constraints_json(a),
            ),
        )
        self.last_checkpoint = step

    def _final(self) -> list[str]:
        """Write the final structure (if configured); the summary line saying so."""
        if not self.c.final:
            return []
        write_final(self.c.final, self.atoms)
        return [f"Final structure: {self.c.final}"]

    def _open_trajectory(self) -> None:
        if not self.c.trajectory:
            return
        if self.p.resumed and Path(self.c.trajectory).exists():
            self.writer = H5MDWriter.resume(self.c.trajectory, self.p.start_step)
            return
        a = self.atoms
        pot = self.p.potential
        params = {
            "config_json": json.dumps(self.c.to_dict(), sort_keys=True),
            "model_hash": pot.model_hash,
            "model_kind": pot.kind,
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
        lines += self.p.notes
        names = ("trajectory", "checkpoint", "log", "model_devi")
        outs = [f"{k} {getattr(c, k)}" for k in names if getattr(c, k, None)]
        if outs:
            lines.append("Writing: " + ", ".join(outs))
        return lines

    # ------------------------------------------------------------------ loop
    def execute(self) -> RunResult:
        c, start = self.c, self.p.start_step
        self.atoms.get_forces()  # forces at the (restored) start positions
        self._check_finite(start)
        t0 = time.perf_counter()
        try:
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
            with _deferred_signals() as stop:
                for step in range(start + 1, c.steps + 1):
                    self._advance(step)
                    if devi is not None:
                        devi.at_step(step, self.atoms)
                    if step % c.traj_every == 0:
                        self._sample(step)
                    if step % c.checkpoint_every == 0 or step == c.steps:
                        self._checkpoint(step)
                    self.reporter.advance(step)
                    if stop and step < c.steps:
                        self._checkpoint(step)
                        self._final()
                        hint = f"; resume with --resume from {c.checkpoint}" if c.checkpoint else ""
                        raise RunInterrupted(f"stopped by {stop[0]} at step {step}{hint}")
            wall = time.perf_counter() - t0
            extra = [f"Checkpoint: {c.checkpoint} (step {c.steps})"] if c.checkpoint else []
            extra += self._final()
            summary = self.reporter.finish(c.steps, len(self.atoms), extra)
        except MdbandError as exc:
            self.reporter.message(f"Stopped: {exc}")
            raise
        finally:
            if self.writer is not None:
                self.writer.close()
            if self.p.model_devi is not None:
                self.p.model_devi.close()
            self.reporter.close()
        return RunResult(c, self.atoms, start, c.steps, wall, summary, self.reporter.samples)

    def _advance(self, step: int) -> None:
        with np.errstate(all="ignore"):
            try:
                self.p.ensemble.step()
            except (FloatingPointError, np.linalg.LinAlgError, StructureError) as exc:
                raise self._diverged(step, f"the integrator failed ({exc})") from None
        self._check_finite(step)


@contextmanager
def _deferred_signals():
    """Turn SIGINT/SIGTERM into a flag checked between steps (main thread only).

    Yields a list that holds the signal's name once one arrived; a second SIGINT raises
    KeyboardInterrupt at once.
    """
    caught: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def handler(signum, frame):
        if caught and signum == signal.SIGINT:
            raise KeyboardInterrupt
        caught.append(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for s, h in old.items():
            signal.signal(s, h)
