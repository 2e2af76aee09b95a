"""Thermo series of a run (H5MD trajectory, CSV or text log) and their four-panel figure.

:func:`read_series` returns arrays keyed like :data:`SERIES` (time in ps, energies in eV,
K, GPa, Å³; NaN where a source lacks a quantity). :func:`plot_thermo` draws energy
(potential, kinetic, conserved, each relative to its first value), temperature, pressure and
volume against time in one 2×2 figure with matplotlib, an optional dependency
(``pip install 'mdband[plot]'``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from mdband.errors import MdbandError
from mdband.io.atomic import atomic_path

SERIES = (
    "time_ps",
    "potential_energy",
    "kinetic_energy",
    "total_energy",
    "conserved_energy",
    "temperature",
    "pressure",
    "volume",
)
# the text log's thermo table (mdband.md.thermo.COLUMNS): title -> series
_TABLE = {
    "Time[ps]": "time_ps",
    "Epot[eV]": "potential_energy",
    "Ekin[eV]": "kinetic_energy",
    "Etot[eV]": "total_energy",
    "T[K]": "temperature",
    "P[GPa]": "pressure",
    "V[A^3]": "volume",
}
FIGSIZE = (10.0, 7.5)  # inches; at DPI the PNG is 1000 x 750 pixels
DPI = 100


class PlotError(MdbandError):
    """The input holds no thermo series, or matplotlib is missing."""


def read_series(path) -> dict[str, np.ndarray]:
    """The thermo series of an H5MD trajectory, a CSV log or a text log."""
    path = Path(path)
    if not path.is_file():
        raise PlotError(f"{path} does not exist")
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head.startswith(b"\x89HDF"):
        return _from_h5md(path)
    if path.suffix.lower() == ".csv":
        return _from_csv(path)
    return _from_text(path)


def _complete(data: dict, n: int) -> dict[str, np.ndarray]:
    out = {k: np.asarray(data.get(k, np.full(n, np.nan)), dtype=np.float64) for k in SERIES}
    if n == 0:
        raise PlotError("no thermo rows to plot")
    return out


def _from_h5md(path: Path) -> dict[str, np.ndarray]:
    from mdband.io.h5md_reader import H5MDReader

    with H5MDReader(path) as r:
        data = {"time_ps": r.times}
        for name in SERIES[1:]:
            if f"observables/{name}" in r.file:
                data[name] = r.observable(name)
        n = r.n_frames
    return _complete(data, n)


def _from_csv(path: Path) -> dict[str, np.ndarray]:
    from mdband.io.run_files import CSV_COLUMNS, read_csv_log

    try:
        cols = read_csv_log(path)
    except ValueError as exc:
        raise PlotError(str(exc)) from None
    data = {key or name: cols[name] for name, key in CSV_COLUMNS.items() if name in cols}
    return _complete(data, len(cols["step"]))


def _from_text(path: Path) -> dict[str, np.ndarray]:
    """Rows of the thermo table (after its ``Step Time[ps] ...`` header) in a text log."""
    titles, rows = None, []
    with open(path, errors="replace") as fh:
        for line in fh:
            fields = line.split()
            if fields[:2] == ["Step", "Time[ps]"]:
                titles = fields
                continue
            if titles is None or len(fields) != len(titles):
                continue
            try:
                rows.append([float(x) for x in fields])
            except ValueError:
                continue
    if titles is None:
        raise PlotError(f"{path} is no H5MD trajectory, CSV log or mdband text log")
    table = np.array(rows, dtype=np.float64).reshape(-1, len(titles))
    data = {_TABLE[t]: table[:, k] for k, t in enumerate(titles) if t in _TABLE}
    return _complete(data, len(rows))


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlotError(
            "mdband plot needs matplotlib: pip install 'mdband[plot]' (or matplotlib)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_thermo(series: dict, out, title: str | None = None) -> Path:
    """Draw the four panels of ``series`` into ``out`` (PNG, PDF, SVG ...; written via a
    temporary file, then renamed)."""
    plt = _pyplot()
    t = series["time_ps"]
    fig, axes = plt.subplots(2, 2, figsize=FIGSIZE, dpi=DPI, sharex=True)
    energy, temp, press, vol = axes.ravel()
    last = ("conserved", series["conserved_energy"])
    if not np.isfinite(last[1]).any():  # a text log: no conserved energy column
        last = ("total", series["total_energy"])
    for name, y in (
        ("potential", series["potential_energy"]),
        ("kinetic", series["kinetic_energy"]),
        last,
    ):
        if np.isfinite(y).any():
            first = y[np.isfinite(y)][0]
            energy.plot(t, y - first, label=f"{name} (E₀ = {first:.6g} eV)", lw=1.2)
    energy.set_ylabel("E − E₀ [eV]")
    energy.legend(fontsize=8, loc="best")
    _panel(temp, t, series["temperature"], "temperature [K]", "C3")
    _panel(press, t, series["pressure"], "pressure [GPa]", "C4")
    _panel(vol, t, series["volume"], "volume [Å³]", "C5")
    for ax in axes[1]:
        ax.set_xlabel("time [ps]")
    for ax in axes.ravel():
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = Path(out)
    try:
        # the mode follows the umask; the name of the temporary file does not tell the format
        with atomic_path(out) as tmp:
            fig.savefig(tmp, format=out.suffix.lstrip(".").lower() or None)
    finally:
        plt.close(fig)
    return out


def _panel(ax, t, y, label: str, color: str) -> None:
    ax.set_ylabel(label)
    if np.isfinite(y).any():
        ax.plot(t, y, color=color, lw=1.2)
        mean = float(np.nanmean(y))
        ax.axhline(mean, color="0.4", lw=0.8, ls="--", label=f"mean {mean:.4g}")
        ax.legend(fontsize=8, loc="best")
    else:
        ax.text(0.5, 0.5, "not recorded (non-periodic cell?)", ha="center", va="center",
                transform=ax.transAxes, color="0.4")  # fmt: skip


def summary_line(series: dict) -> str:
    """One line: frames, time span and the mean temperature."""
    t = series["time_ps"]
    temp = series["temperature"]
    mean_t = float(np.nanmean(temp)) if np.isfinite(temp).any() else math.nan
    return f"{len(t)} samples over {t[-1] - t[0]:.4g} ps, mean T {mean_t:.2f} K"
