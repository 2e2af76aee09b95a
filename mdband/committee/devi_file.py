"""``model_devi.out``: the model-deviation file of deepmd-kit's LAMMPS pair style.

Layout (what ``pair_style deepmd ... out_file`` writes and dpgen / dpgen2 read with
``numpy.loadtxt``)::

    #       step         max_devi_v         min_devi_v         avg_devi_v         max_devi_f ...
               0       1.234568e-03       2.345679e-05 ...

A header line, then one row per evaluated step: the step as ``%12d`` and the six deviations of
:data:`~mdband.committee.deviation.COLUMNS` as ``" %18.6e"`` (19 characters each). With
``atomic`` the per-atom force deviations follow in atom order (column ``atm_devi_f(N)``).

Every row is written with one ``write`` call and flushed, so after a crash the file holds whole
rows (and at worst one partial last row, which :meth:`ModelDeviWriter.resume` drops). A writer
holds an exclusive ``flock`` on its file: a second writer is refused.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import numpy as np

from mdband.committee.deviation import COLUMNS, ModelDeviation
from mdband.errors import MdbandError
from mdband.io.atomic import atomic_path

ATOMIC_COLUMN = "atm_devi_f(N)"


class ModelDeviFileError(MdbandError):
    """A model-deviation file exists, cannot be written, or does not have the expected layout."""


def header(atomic: bool = False) -> str:
    """Return the header line (with its newline)."""
    names = [*COLUMNS, ATOMIC_COLUMN] if atomic else list(COLUMNS)
    return "#" + f"{'step':>11}" + "".join(f"{name:>19}" for name in names) + "\n"


def format_row(step: int, devi: ModelDeviation, atomic: bool = False) -> str:
    """One row (with its newline); ``atomic`` appends ``devi.devi_f`` in atom order."""
    values = list(devi.row())
    if atomic:
        if devi.devi_f is None:
            raise ValueError("atomic rows need the per-atom force deviations")
        values += np.asarray(devi.devi_f, dtype=np.float64).tolist()
    return f"{int(step):12d}" + "".join(f" {v:18.6e}" for v in values) + "\n"


def _locked(path: Path, mode: str):
    """Return ``open(path, mode)`` holding an exclusive lock on the file.

    Raises ModelDeviFileError if another process writes the file.
    """
    fh = open(path, mode, buffering=1, encoding="ascii")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise ModelDeviFileError(f"{path} is being written by another process") from None
    return fh


def read_model_devi(path) -> np.ndarray:
    """All rows of a model-deviation file as a float64 array (rows, columns), by numpy.loadtxt."""
    return np.loadtxt(path, ndmin=2)


class ModelDeviWriter:
    """Append rows to a model-deviation file.

    :meth:`create` starts one, :meth:`resume` continues one. Steps must grow: a row for a step
    at or before the last one is skipped.
    """

    def __init__(self, path: Path, fh, atomic: bool, last_step: int | None) -> None:
        self.path = path
        self.atomic = bool(atomic)
        self.last_step = last_step
        self._fh = fh

    @classmethod
    def create(cls, path, atomic: bool = False, overwrite: bool = False) -> ModelDeviWriter:
        """Start ``path`` with the header.

        An existing file is refused unless ``overwrite``, which replaces it (or a link at
        ``path``) by a new file, never writing through it.
        """
        from mdband.io.files import OutputExistsError, start_new_file

        path = Path(path)
        try:
            if overwrite and path.is_file():
                _locked(path, "a").close()  # refuse a file that another process is writing
            start_new_file(path, overwrite, "model deviation")
            fh = _locked(path, "a")
        except OutputExistsError:
            raise ModelDeviFileError(f"model deviation file {path} exists") from None
        except OSError as exc:
            raise ModelDeviFileError(f"cannot create {path}: {exc.strerror}") from None
        fh.write(header(atomic))
        fh.flush()
        return cls(path, fh, atomic, None)

    @classmethod
    def resume(cls, path, through_step: int, atomic: bool = False) -> ModelDeviWriter:
        """Continue ``path`` after dropping every row with ``step > through_step``.

        A partial last row is dropped too; the file is replaced atomically. A missing file is
        created.
        """
        return cls._continue(path, atomic, through_step)

    @classmethod
    def extend(cls, path, atomic: bool = False) -> ModelDeviWriter:
        """Continue ``path`` keeping every whole row and writing the next row whatever its step.

        A partial last row is dropped. This is what ``pair_style deepmd`` does after
        ``read_restart``, so rows stay aligned with a LAMMPS dump appended to (both repeat the
        restart step).
        """
        return cls._continue(path, atomic, None)

    @classmethod
    def _continue(cls, path, atomic: bool, through_step: int | None) -> ModelDeviWriter:
        path = Path(path)
        if not path.exists():
            return cls.create(path, atomic)
        _locked(path, "a").close()  # refuse a file that another process is writing
        try:
            text = path.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelDeviFileError(f"cannot read model deviation file {path}: {exc}") from None
        lines = text.splitlines(keepends=True)
        if not lines or lines[0] != header(atomic):
            want = "with" if atomic else "without"
            raise ModelDeviFileError(
                f"{path} is not a model deviation file {want} per-atom columns; "
                "continue it with the same settings or start a new file"
            )
        kept, last = [lines[0]], None
        for line in lines[1:]:
            if not line.endswith("\n"):
                break  # a row cut short by a crash
            words = line.split()
            if not words:
                continue
            try:
                step = int(words[0])
            except ValueError:
                raise ModelDeviFileError(f"{path}: unreadable row {line.strip()[:40]!r}") from None
            if through_step is not None and step > through_step:
                break
            kept.append(line)
            last = step
        with atomic_path(path) as tmp:
            tmp.write_text("".join(kept), encoding="ascii")
        return cls(path, _locked(path, "a"), atomic, None if through_step is None else last)

    def write(self, step: int, devi: ModelDeviation) -> bool:
        """Append the row of ``step`` and flush it.

        Returns False (nothing written) if the file already has a row at or after ``step``.
        """
        if self.last_step is not None and step <= self.last_step:
            return False
        self._fh.write(format_row(step, devi, self.atomic))
        self._fh.flush()
        self.last_step = int(step)
        return True

    def sync(self) -> None:
        """Flush the rows to disk (before a checkpoint refers to them)."""
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        """Close the file (and release its lock)."""
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> ModelDeviWriter:
        """Return the writer itself."""
        return self

    def __exit__(self, *exc) -> None:
        """Close the file."""
        self.close()
