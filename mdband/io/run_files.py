"""What a run leaves beside its trajectory and checkpoint: the final structure and the log.

* The final structure (``RunConfig.final``; default ``<trajectory or log stem>.final.xyz``)
  is written atomically (temporary file, fsync, rename) at the end and on a clean stop, in
  any format ASE writes (extended XYZ by default: cell, pbc, masses, velocities, energy and
  forces), so ``mdband run --structure`` can start from it and MDAnalysis can take it as
  the topology of the H5MD trajectory.
* The log (``RunConfig.log``) is a plain-text copy of the thermo table and summary, or,
  when its name ends in ``.csv``, the thermo rows as CSV (one header line, full precision;
  columns: :class:`mdband.io.thermo_table.ThermoTable`).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from ase import Atoms

from mdband.io.atomic import atomic_path
from mdband.io.thermo_table import ThermoTable, csv_values

FINAL_SUFFIX = ".final.xyz"


def default_final(trajectory: str | None, log: str | None) -> str | None:
    """``<stem>.final.xyz`` beside the trajectory, else beside the log, else None."""
    base = trajectory or log
    if not base:
        return None
    p = Path(base)
    return str(p.with_name(p.stem + FINAL_SUFFIX))


def final_format(path) -> str:
    """Return the ASE format that ``path``'s name asks for (ValueError if ASE cannot write it)."""
    from ase.io.formats import UnknownFileTypeError, filetype, ioformats

    try:
        name = filetype(str(path), read=False)
    except UnknownFileTypeError:
        name = None
    fmt = ioformats.get(name) if name else None
    if fmt is None or not fmt.can_write:
        raise ValueError(f"ASE cannot write a structure file named {Path(path).name}")
    return fmt.name


def write_final(path, atoms: Atoms) -> None:
    """Write ``atoms`` atomically.

    The file holds its positions, cell, velocities, masses, magnetic moments, energy and forces.
    """
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.io import write

    path = Path(path)
    out = Atoms(
        numbers=atoms.get_atomic_numbers(),
        positions=atoms.get_positions(),
        cell=atoms.get_cell(),
        pbc=atoms.get_pbc(),
        masses=atoms.get_masses(),
    )
    out.set_momenta(atoms.get_momenta(), apply_constraint=False)
    if atoms.has("initial_magmoms"):  # a spin model's fixed moments
        out.set_initial_magnetic_moments(atoms.get_initial_magnetic_moments())
    results = getattr(atoms.calc, "results", None) or {}
    kept = {k: results[k] for k in ("energy", "forces", "stress") if k in results}
    if kept:
        out.calc = SinglePointCalculator(out, **kept)
    with atomic_path(path) as tmp:  # the mode follows the umask, as open() gives it
        write(tmp, out, format=final_format(path))


def drift_line(drift: float, source: str | None) -> str:
    """Return the summary's drift line, with the command that plots the series it came from."""
    line = f"Conserved-energy drift: {drift:.3e} eV/atom/ps"
    return line + (f" (plot: mdband plot {source} -o thermo.png)" if source else "")


class _TextLog:
    """Every line the run prints (thermo table and summary)."""

    def __init__(self, path: Path, append: bool) -> None:
        self._fh = open(path, "a" if append else "w")  # noqa: SIM115

    def line(self, text: str) -> None:
        self._fh.write(text + "\n")
        self._fh.flush()

    def thermo(self, step: int, time_ps: float, obs: dict) -> None:
        """Do nothing: the table row arrives through :meth:`line`."""

    def close(self) -> None:
        self._fh.close()


class _CsvLog:
    """The thermo rows only, as CSV (``repr`` precision).

    A resumed run appends rows under the file's own header (its columns, whatever columns and
    units the resumed run chose).
    """

    def __init__(self, path: Path, append: bool, table: ThermoTable) -> None:
        fresh = not append or not path.exists() or path.stat().st_size == 0
        self._table = table
        self._names = table.csv_header()
        if not fresh:
            with open(path, newline="") as fh:
                self._names = next(csv.reader(fh), []) or self._names
        self._fh = open(path, "a" if append else "w", newline="")  # noqa: SIM115
        self._csv = csv.writer(self._fh)
        if fresh:
            self._csv.writerow(self._names)
            self._fh.flush()

    def line(self, text: str) -> None:
        """Do nothing: descriptions and the summary stay on the console."""

    def thermo(self, step: int, time_ps: float, obs: dict) -> None:
        self._csv.writerow(csv_values(self._names, step, time_ps, obs))
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def open_log(path, append: bool, table: ThermoTable | None = None):
    """Open a log sink with ``line(text)``, ``thermo(step, time_ps, obs)`` and ``close()``.

    ``table``: the run's thermo columns (CSV logs).

    A new log (``append`` false; the run checked that it may replace the path) starts as a new
    file renamed onto the path: an old file or a link there is replaced, never written
    through (:func:`mdband.io.files.start_new_file`).
    """
    from mdband.io.files import start_new_file

    path = Path(path)
    if not append:
        start_new_file(path, overwrite=True, what="log")
    if path.suffix.lower() == ".csv":
        return _CsvLog(path, append, table or ThermoTable())
    return _TextLog(path, append)


def read_csv_log(path) -> dict[str, np.ndarray]:
    """Columns of a CSV thermo log by name (floats; ``step`` as int).

    Raises ValueError naming the file and line of a row that is not a row of numbers.
    """
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows or rows[0][:2] != ["step", "time_ps"]:
        raise ValueError(f"{path} is not an mdband CSV thermo log")
    width = len(rows[0])
    numbered = [(line, row) for line, row in enumerate(rows[1:], start=2) if row]
    body = np.empty((len(numbered), width), dtype=np.float64)
    for k, (line, row) in enumerate(numbered):
        if len(row) != width:
            raise ValueError(
                f"{path}, line {line}: {len(row)} values where the header names {width}"
            )
        try:
            body[k] = [float(x) for x in row]
        except ValueError:
            bad = next(x for x in row if not _is_number(x))
            raise ValueError(f"{path}, line {line}: {bad!r} is not a number") from None
    out = {name: body[:, k] for k, name in enumerate(rows[0])}
    out["step"] = out["step"].astype(np.int64)
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
