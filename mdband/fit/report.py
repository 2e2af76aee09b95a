"""What ``mdband fit`` shows while it trains.

A rich progress bar with the running losses and one line per epoch, also appended to the log
file.
"""

from __future__ import annotations

from mdband.fit.loss import Metrics


class Reporter:
    """Rich progress bar with the running losses; per-epoch lines to a log file."""

    def __init__(self, enabled: bool, console, log, total_steps: int, first_step: int) -> None:
        self.enabled = enabled
        self.console = console
        self.log = log
        self.progress = None
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[losses]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
            )
            self.task = self.progress.add_task(
                "fit", total=total_steps, completed=first_step, losses=""
            )
            self.progress.start()

    def line(self, text: str) -> None:
        """Append ``text`` to the log file and print it above the progress bar."""
        if self.log is not None:
            with open(self.log, "a", encoding="utf-8") as fh:
                fh.write(text + "\n")
        if self.progress is not None:
            self.progress.console.print(text, highlight=False)

    def step(self, epoch: int, epochs: int, losses: str) -> None:
        """Advance the progress bar by one step, showing the epoch and the running losses."""
        if self.progress is not None:
            self.progress.update(
                self.task, advance=1, description=f"epoch {epoch}/{epochs}", losses=losses
            )

    def close(self) -> None:
        """Stop the progress bar."""
        if self.progress is not None:
            self.progress.stop()


def format_metrics(m: Metrics | None) -> str:
    """Format the validation loss and RMSEs on one line."""
    if m is None:
        return "no validation frames"
    s = f"val loss {m.loss:.4g}  E {m.energy_rmse:.3g} meV/atom  F {m.force_rmse:.4g} meV/Å (RMSE)"
    return s if m.virial_rmse is None else s + f"  W {m.virial_rmse:.3g} meV/atom"
