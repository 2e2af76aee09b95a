"""The columns of a run's thermo table (console and text log) and of its CSV log.

One :class:`ThermoTable` says which columns a run prints: the fixed ones (step, time,
energies, temperature, pressure, volume) and the extras a run asks for
(``thermo_columns``: ``pressure_tensor``, ``cell``, ``density``), with pressures in GPa or
bar (``pressure_unit``). The same table names every column of the text log (its title) and of
the CSV log (its header), and :func:`column_series` reads either back into the series of
:mod:`mdband.io.plot` (pressures in GPa, whatever unit the log used).

Values come from an observables dict (:func:`mdband.md.thermo.observables`): energies in eV,
K, GPa, Å³, ``stress`` (3, 3) GPa, ``cell_lengths`` (3,) Å, ``density`` g/cm³.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np

THERMO_EXTRAS = ("pressure_tensor", "cell", "density")
PRESSURE_UNITS = ("GPa", "bar")
BAR_PER_GPA = 1.0e4
_TENSOR = (("xx", 0, 0), ("yy", 1, 1), ("zz", 2, 2), ("yz", 1, 2), ("xz", 0, 2), ("xy", 0, 1))


@dataclass(frozen=True)
class Column:
    """One column of the thermo output.

    Holds the text title, CSV name, plot series (None: not a series), the factor from the
    series' unit to the column's, the text format and a getter of the value.
    """

    title: str
    csv: str
    series: str | None
    factor: float
    fmt: str
    get: Callable[[dict], float]


def _obs(key: str, scale: float = 1.0) -> Callable[[dict], float]:
    return lambda obs: scale * float(obs.get(key, math.nan))


def _item(key: str, index, scale: float = 1.0) -> Callable[[dict], float]:
    def get(obs: dict) -> float:
        value = obs.get(key)
        if value is None:
            return math.nan
        return scale * float(np.asarray(value, dtype=np.float64)[index])

    return get


def _base(pressure_unit: str) -> list[Column]:
    p = BAR_PER_GPA if pressure_unit == "bar" else 1.0
    pfmt = "{:>12.2f}" if pressure_unit == "bar" else "{:>10.4f}"
    return [
        Column("Epot[eV]", "potential_energy_eV", "potential_energy", 1.0, "{:>15.6f}",
               _obs("potential_energy")),
        Column("Ekin[eV]", "kinetic_energy_eV", "kinetic_energy", 1.0, "{:>12.6f}",
               _obs("kinetic_energy")),
        Column("Etot[eV]", "total_energy_eV", "total_energy", 1.0, "{:>15.6f}",
               _obs("total_energy")),
        Column("", "conserved_energy_eV", "conserved_energy", 1.0, "",
               _obs("conserved_energy")),
        Column("T[K]", "temperature_K", "temperature", 1.0, "{:>9.2f}", _obs("temperature")),
        Column(f"P[{pressure_unit}]", f"pressure_{pressure_unit}", "pressure", p, pfmt,
               _obs("pressure", p)),
        Column("V[A^3]", "volume_A3", "volume", 1.0, "{:>12.3f}", _obs("volume")),
    ]  # fmt: skip


def _extras(name: str, pressure_unit: str) -> list[Column]:
    if name == "pressure_tensor":  # P_ab = -stress_ab, LAMMPS' pxx ... pxy
        p = BAR_PER_GPA if pressure_unit == "bar" else 1.0
        pfmt = "{:>12.2f}" if pressure_unit == "bar" else "{:>10.4f}"
        return [
            Column(f"P{ab}[{pressure_unit}]", f"p{ab}_{pressure_unit}", f"p{ab}", p, pfmt,
                   _item("stress", (i, j), -p))
            for ab, i, j in _TENSOR
        ]  # fmt: skip
    if name == "cell":
        return [
            Column(f"{n}[A]", f"{n}_A", f"cell_{n}", 1.0, "{:>10.4f}", _item("cell_lengths", k))
            for k, n in enumerate("abc")
        ]
    if name == "density":
        return [Column("rho[g/cm3]", "density_g_cm3", "density", 1.0, "{:>11.5f}",
                       _obs("density"))]  # fmt: skip
    raise ValueError(f"unknown thermo column {name!r}; choose from {', '.join(THERMO_EXTRAS)}")


class ThermoTable:
    """The columns of a run's thermo output (see the module docstring)."""

    def __init__(self, extras=(), pressure_unit: str = "GPa") -> None:
        if pressure_unit not in PRESSURE_UNITS:
            raise ValueError(f"pressure unit must be GPa or bar, not {pressure_unit!r}")
        self.extras = tuple(extras)
        self.pressure_unit = pressure_unit
        self.columns = _base(pressure_unit)
        for name in dict.fromkeys(self.extras):
            self.columns += _extras(name, pressure_unit)

    def header(self) -> str:
        """Return the text header line: Step, Time[ps] and the titled columns."""
        titles = [f"{'Step':>10}", f"{'Time[ps]':>11}"]
        titles += [f"{c.title:>{_width(c)}}" for c in self.columns if c.title]
        return " ".join(titles)

    def row(self, step: int, time_ps: float, obs: dict) -> str:
        """Format the text row of one step from its observables ``obs``."""
        cells = [f"{step:>10d}", f"{time_ps:>11.4f}"]
        cells += [c.fmt.format(c.get(obs)) for c in self.columns if c.title]
        return " ".join(cells)

    def csv_header(self) -> list[str]:
        """Return the CSV names: ``step``, ``time_ps`` and every column's."""
        return ["step", "time_ps", *(c.csv for c in self.columns)]

    def csv_row(self, step: int, time_ps: float, obs: dict) -> list[str]:
        """Return the CSV row of one step from its observables ``obs`` (values as ``repr``)."""
        return [str(step), repr(float(time_ps)), *(repr(c.get(obs)) for c in self.columns)]


def _width(c: Column) -> int:
    return int(c.fmt.split(">")[1].split(".")[0])


def _all_columns() -> list[Column]:
    out = []
    for unit in PRESSURE_UNITS:
        out += _base(unit)
        for name in THERMO_EXTRAS:
            out += _extras(name, unit)
    return out


def csv_values(names, step: int, time_ps: float, obs: dict) -> list[str]:
    """Return a CSV row for the header ``names``.

    The header is a log's own, e.g. of the run a resumed run continues: every known column is
    filled, whatever unit or extras this run chose; NaN otherwise.
    """
    known = {c.csv: c for c in _all_columns()}
    out = []
    for name in names:
        if name == "step":
            out.append(str(step))
        elif name == "time_ps":
            out.append(repr(float(time_ps)))
        else:
            column = known.get(name)
            out.append(repr(column.get(obs) if column is not None else math.nan))
    return out


def column_series(names, by: str) -> dict[int, tuple[str, float]]:
    """Map the columns a plot can use to their series, by a log's header.

    ``names`` are the titles (``by="title"``) or CSV names (``by="csv"``) of the header; the
    result maps column index -> (series name, factor to divide by) of every column a plot can
    use.
    """
    known = {getattr(c, by): c for c in _all_columns() if getattr(c, by) and c.series}
    return {
        k: (cast(str, known[n].series), known[n].factor) for k, n in enumerate(names) if n in known
    }
