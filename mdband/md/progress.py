"""Progress bar (rich), thermo table (console and log file) and the end-of-run summary."""

from __future__ import annotations

import math
import time
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from mdband.io.run_files import drift_line, open_log
from mdband.md import thermo


class _RateColumn(ProgressColumn):
    """steps/s and ns/day from rich's running speed estimate."""

    def __init__(self, timestep_fs: float) -> None:
        super().__init__()
        self.timestep_fs = timestep_fs

    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        if not speed:
            return Text("-- steps/s", style="progress.data.speed", no_wrap=True)
        ns_day = speed * self.timestep_fs * 86400.0 * 1e-6
        text = f"{speed:,.1f} steps/s {ns_day:,.3g} ns/day"
        return Text(text, style="progress.data.speed", no_wrap=True)


class Reporter:
    """Shows progress and the thermo table; mirrors the table and summary to ``log``.

    Parameters
    ----------
    first_step, last_step : int
        The step the run starts from and the step it ends at.
    timestep_fs : float
    log : path, optional
        Appended to when ``append`` is True (a resumed run), otherwise created; CSV thermo
        rows when the name ends in ``.csv`` (see :mod:`mdband.io.run_files`).
    show_progress : bool
    console : rich Console, optional
    table : ThermoTable, optional
        The thermo columns (``thermo_columns``, ``pressure_unit``); default: the fixed ones.
    """

    def __init__(
        self,
        first_step: int,
        last_step: int,
        timestep_fs: float,
        log=None,
        *,
        append: bool = False,
        show_progress: bool = True,
        console: Console | None = None,
        table: thermo.ThermoTable | None = None,
    ) -> None:
        self.console = console or Console(highlight=False)
        self.table = table or thermo.ThermoTable()
        self.first_step = first_step
        self.last_step = last_step
        self.timestep_fs = timestep_fs
        self._log_path = None if log is None else Path(log)
        self._append = append
        self._log = None
        self._progress = None
        self._task: TaskID | None = None
        self._t0 = time.perf_counter()
        self.samples: list[tuple[int, float, dict]] = []
        self.plot_source = None if log is None else str(log)  # named by the drift line
        if show_progress:
            self._progress = Progress(
                TextColumn("[progress.description]{task.description}"),
                BarColumn(bar_width=24),
                MofNCompleteColumn(),
                _RateColumn(timestep_fs),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )

    def start(self, lines: list[str]) -> None:
        """Open the log, print the description lines and the thermo header; start the bar."""
        if self._log_path is not None:
            self._log = open_log(self._log_path, self._append, self.table)
        for line in lines:
            self._emit(line)
        self._emit(self.table.header())
        self._t0 = time.perf_counter()
        if self._progress is not None:
            self._progress.start()
            total = self.last_step - self.first_step
            self._task = self._progress.add_task("MD", total=total)

    def thermo(self, step: int, time_ps: float, obs: dict) -> None:
        """Keep a thermo sample, write it to the log and print its table row."""
        self.samples.append((step, time_ps, obs))
        if self._log is not None:
            self._log.thermo(step, time_ps, obs)
        self._emit(self.table.row(step, time_ps, obs))

    def advance(self, step: int) -> None:
        """Move the progress bar to ``step``."""
        if self._progress is not None:
            assert self._task is not None  # added by start()
            self._progress.update(self._task, completed=step - self.first_step)

    def message(self, text: str) -> None:
        """Print ``text`` on the console."""
        self._emit(text)

    def finish(self, step: int, n_atoms: int, extra: list[str] | None = None) -> list[str]:
        """Stop the bar; print and log the summary (returned as lines)."""
        self.close_bar()
        wall = time.perf_counter() - self._t0
        done = step - self.first_step
        rate = done / wall if wall > 0 else math.nan
        ns_day = rate * self.timestep_fs * 86400.0 * 1e-6
        lines = [
            f"Finished at step {step} ({step * self.timestep_fs / 1000:.4f} ps): {done} steps "
            f"in {wall:.2f} s, {rate:,.1f} steps/s, {ns_day:,.3f} ns/day",
        ]
        if self.samples:
            temps = [s[2]["temperature"] for s in self.samples]
            epots = [s[2]["potential_energy"] for s in self.samples]
            lines.append(
                f"Mean over {len(temps)} samples: T = {sum(temps) / len(temps):.2f} K, "
                f"Epot = {sum(epots) / len(epots):.6f} eV"
            )
            times = [s[1] for s in self.samples]
            cons = [s[2]["conserved_energy"] for s in self.samples]
            drift = thermo.drift_per_atom_ps(times, cons, n_atoms)
            if math.isfinite(drift):
                lines.append(drift_line(drift, self.plot_source))
        lines.extend(extra or [])
        for line in lines:
            self._emit(line)
        return lines

    def close_bar(self) -> None:
        """Stop the progress bar, if it runs."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def close(self) -> None:
        """Stop the progress bar and close the log."""
        self.close_bar()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _emit(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)
        if self._log is not None:
            self._log.line(line)
