"""A committee during ``mdband run``: ``model_devi.out`` rows and H5MD observables.

The committee is evaluated on the current frame every ``model_devi_every`` steps (a row of the
file) and at every trajectory frame (the H5MD observables, one value per frame as MDAnalysis
expects), once per step at most. The dynamics never see it: the first model's forces are the
calculator's own.
"""

from __future__ import annotations

from pathlib import Path

from mdband.committee.calculator import CommitteeCalculator
from mdband.committee.devi_file import ModelDeviWriter
from mdband.committee.deviation import ModelDeviation


class DeviationRecorder:
    """Model deviations of a run.

    Parameters
    ----------
    calculator : CommitteeCalculator
        The run's calculator (first model = the one that drives the dynamics).
    path : path
        The model-deviation file.
    every : int
        Steps between rows.
    atomic : bool
        Per-atom force deviations in each row.
    overwrite : bool
        Replace an existing file when starting a new run.
    """

    def __init__(
        self, calculator: CommitteeCalculator, path, every: int, atomic=False, overwrite=False
    ) -> None:
        self.calculator = calculator
        self.path = Path(path)
        self.every = int(every)
        self.atomic = bool(atomic)
        self.overwrite = bool(overwrite)
        self.writer: ModelDeviWriter | None = None
        self._cached: tuple[int, ModelDeviation] | None = None

    def describe(self) -> str:
        """Return a one-line description: number of models, row interval and file."""
        n = len(self.calculator.committee)
        return f"Model deviation: {n} models, every {self.every} steps -> {self.path}"

    def open(self, resumed: bool, start_step: int) -> None:
        """Start the file, or continue it after ``start_step`` when the run is resumed."""
        if resumed and self.path.exists():
            self.writer = ModelDeviWriter.resume(self.path, start_step, self.atomic)
        else:
            self.writer = ModelDeviWriter.create(self.path, self.atomic, self.overwrite)

    def deviation(self, step: int, atoms) -> ModelDeviation:
        """Return the deviations of ``atoms`` at ``step`` (evaluated once per step)."""
        if self._cached is None or self._cached[0] != step:
            self._cached = (step, self.calculator.model_deviation(atoms))
        return self._cached[1]

    def at_step(self, step: int, atoms) -> None:
        """Write the row of ``step`` if it is a model-deviation step."""
        if step % self.every == 0:
            assert self.writer is not None, "open() the recorder before its steps"
            self.writer.write(step, self.deviation(step, atoms))

    def observables(self, step: int, atoms) -> dict[str, float]:
        """Return the six deviations as H5MD observables of the frame at ``step``."""
        return self.deviation(step, atoms).as_dict()

    def sync(self) -> None:
        """Flush the file's rows to disk (before a checkpoint refers to them)."""
        if self.writer is not None:
            self.writer.sync()

    def close(self) -> None:
        """Close the file, if one is open."""
        if self.writer is not None:
            self.writer.close()
