"""Thermo series of a run (H5MD trajectory, CSV or text log) and their figure.

:func:`read_series` returns arrays keyed like :data:`SERIES` (time in ps, energies in eV,
K, GPa, Å³, g/cm³, Å; NaN where a source lacks a quantity; pressures in GPa whatever unit a
log used). :func:`plot_thermo` draws one panel per quantity against time with matplotlib, an
optional dependency (``pip install 'mdband[plot]'``): by default the energies (potential,
kinetic, conserved, each relative to its first value) and, of temperature, pressure and
volume, those that vary (no flat volume panel for an NVT run, no pressure panel for an open
system); ``panels`` picks them instead (:data:`PANELS`). Target lines (a run's thermostat
temperature and barostat pressure: :func:`run_targets`) and an equilibration cut (samples
before it are shaded and left out of the means) are drawn when given.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from ase import units

from mdband.errors import MdbandError
from mdband.io.atomic import atomic_path
from mdband.io.thermo_table import column_series

_TENSOR = ("pxx", "pyy", "pzz", "pyz", "pxz", "pxy")
SERIES = (
    "time_ps",
    "potential_energy",
    "kinetic_energy",
    "total_energy",
    "conserved_energy",
    "temperature",
    "pressure",
    "volume",
    "density",
    "cell_a",
    "cell_b",
    "cell_c",
    *_TENSOR,
)
#: panel -> (series drawn, y label, colour of the first curve); "energy" is drawn apart
PANELS = {
    "energy": ((), "E − E₀ [eV]", "C0"),
    "temperature": (("temperature",), "temperature [K]", "C3"),
    "pressure": (("pressure",), "pressure [GPa]", "C4"),
    "volume": (("volume",), "volume [Å³]", "C5"),
    "density": (("density",), "density [g/cm³]", "C6"),
    "cell": (("cell_a", "cell_b", "cell_c"), "cell lengths [Å]", "C7"),
    "pressure_tensor": (_TENSOR, "pressure tensor [GPa]", "C8"),
}
DEFAULT_PANELS = ("energy", "temperature", "pressure", "volume")
FIGSIZE = (10.0, 7.5)  # inches; at DPI the PNG is 1000 x 750 pixels
DPI = 100
_G_CM3 = 1e24 / units._Nav  # g/cm³ of 1 u per Å³


class PlotError(MdbandError):
    """The input holds no thermo series, or matplotlib is missing."""


def read_series(path) -> dict[str, np.ndarray]:
    """Read the thermo series of an H5MD trajectory, a CSV log or a text log."""
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


def run_targets(path) -> dict[str, float]:
    """Return the thermostat temperature (K) and barostat pressure (GPa) of a run.

    They are those recorded in an H5MD trajectory's run settings (none for NVE, no pressure
    without a barostat, nothing for a log, which does not record them).
    """
    path = Path(path)
    with open(path, "rb") as fh:
        if not fh.read(8).startswith(b"\x89HDF"):
            return {}
    from mdband.io.h5md_reader import H5MDReader

    with H5MDReader(path) as r:
        config = json.loads(str(r.parameters.get("config_json") or "{}"))
    ensemble = str(config.get("ensemble", "nve"))
    out = {}
    if ensemble != "nve" and config.get("temperature") is not None:
        out["temperature"] = float(config["temperature"])
    if ensemble.startswith("npt") and config.get("pressure") is not None:
        out["pressure"] = float(config["pressure"])
    return out


def _complete(data: dict, n: int) -> dict[str, np.ndarray]:
    out = {k: np.asarray(data.get(k, np.full(n, np.nan)), dtype=np.float64) for k in SERIES}
    if n == 0:
        raise PlotError("no thermo rows to plot")
    return out


def _from_h5md(path: Path) -> dict[str, np.ndarray]:
    from mdband.io.h5md_reader import H5MDReader

    with H5MDReader(path) as r:
        n = r.n_frames
        data = {"time_ps": r.times}
        for name in SERIES[1:]:
            if f"observables/{name}" in r.file:
                data[name] = r.observable(name)
        if "observables/stress" in r.file:
            stress = r.observable("stress")
            for name, (i, j) in zip(_TENSOR, ((0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1))):
                data[name] = -stress[:, i, j]
        cells = np.array([r.cell(k) for k in range(n)]).reshape(n, 3, 3)
        for k, name in enumerate(("cell_a", "cell_b", "cell_c")):
            data[name] = np.linalg.norm(cells[:, k], axis=1)
        if r.pbc.all() and n:
            data["density"] = float(np.sum(r.masses)) * _G_CM3 / np.abs(np.linalg.det(cells))
    return _complete(data, n)


def _from_columns(names, rows, by: str) -> dict[str, np.ndarray]:
    table = np.array(rows, dtype=np.float64).reshape(-1, len(names))
    data = {}
    for k, (series, factor) in column_series(names, by).items():
        data[series] = table[:, k] / factor
    if "time_ps" in names:
        data["time_ps"] = table[:, names.index("time_ps")]
    return data


def _from_csv(path: Path) -> dict[str, np.ndarray]:
    from mdband.io.run_files import read_csv_log

    try:
        cols = read_csv_log(path)
    except ValueError as exc:
        raise PlotError(str(exc)) from None
    names = list(cols)
    rows: np.ndarray | list = np.stack([cols[n] for n in names], axis=1) if names else []
    return _complete(_from_columns(names, rows, "csv"), len(cols["step"]))


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
    data = _from_columns(titles, rows, "title")
    data["time_ps"] = np.array(rows, dtype=np.float64).reshape(-1, len(titles))[:, 1]
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


def varies(y) -> bool:
    """Whether a series has finite values that are not all the same (to 1e-9 relative)."""
    y = np.asarray(y, dtype=np.float64)
    y = y[np.isfinite(y)]
    return y.size > 1 and float(np.ptp(y)) > 1e-9 * max(1.0, float(np.abs(y).max()))


def default_panels(series: dict) -> list[str]:
    """Choose the energy panel and those of temperature, pressure and volume that vary."""
    return ["energy"] + [p for p in DEFAULT_PANELS[1:] if varies(series[PANELS[p][0][0]])]


def plot_thermo(
    series: dict,
    out,
    title: str | None = None,
    *,
    panels=None,
    targets: dict | None = None,
    equilibration_ps: float | None = None,
) -> Path:
    """Draw the panels of ``series`` (:func:`figure`) into ``out`` (PNG, PDF, SVG ...).

    The file is written via a temporary file, then renamed.
    """
    plt = _pyplot()
    fig = figure(series, title, panels=panels, targets=targets, equilibration_ps=equilibration_ps)
    out = Path(out)
    try:
        # the mode follows the umask; the name of the temporary file does not tell the format
        with atomic_path(out) as tmp:
            fig.savefig(tmp, format=out.suffix.lstrip(".").lower() or None)
    finally:
        plt.close(fig)
    return out


def figure(series: dict, title=None, *, panels=None, targets=None, equilibration_ps=None):
    """Build the matplotlib figure of :func:`plot_thermo`.

    ``panels`` are names of :data:`PANELS` (default: :func:`default_panels`); ``targets``
    (``{"temperature": K, "pressure": GPa}``) are drawn as dotted black lines; samples before
    ``equilibration_ps`` are shaded and left out of the means.
    """
    unknown = [p for p in panels or () if p not in PANELS]
    if unknown:
        raise PlotError(f"unknown panel(s) {', '.join(unknown)}; choose from {', '.join(PANELS)}")
    names = list(dict.fromkeys(panels)) if panels else default_panels(series)
    plt = _pyplot()
    t = series["time_ps"]
    keep = np.ones(len(t), dtype=bool) if equilibration_ps is None else t >= equilibration_ps
    cols = 1 if len(names) == 1 else 2
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=FIGSIZE, dpi=DPI, sharex=True, squeeze=False)
    flat = list(axes.ravel())
    for ax, name in zip(flat, names):
        if name == "energy":
            _energy_panel(ax, series, t)
        else:
            keys, label, colour = PANELS[name]
            _panel(ax, t, [series[k] for k in keys], keys, label, colour, keep,
                   (targets or {}).get(name))  # fmt: skip
        if equilibration_ps is not None:
            ax.axvspan(float(t[0]), equilibration_ps, color="0.85", zorder=0, lw=0)
        ax.grid(alpha=0.3)
    for ax in flat[len(names) :]:
        ax.set_visible(False)
    for ax in flat[max(0, len(names) - cols) : len(names)]:
        ax.set_xlabel("time [ps]")
        ax.xaxis.set_tick_params(labelbottom=True)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _energy_panel(ax, series, t) -> None:
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
            ax.plot(t, y - first, label=f"{name} (E₀ = {first:.6g} eV)", lw=1.2)
    ax.set_ylabel(PANELS["energy"][1])
    ax.legend(fontsize=8, loc="best")


def _panel(ax, t, ys, keys, label: str, colour: str, keep, target) -> None:
    ax.set_ylabel(label)
    if not any(np.isfinite(y).any() for y in ys):
        ax.text(0.5, 0.5, "not recorded (non-periodic cell?)", ha="center", va="center",
                transform=ax.transAxes, color="0.4")  # fmt: skip
        return
    start = int(colour[1:])
    for k, (key, y) in enumerate(zip(keys, ys)):
        name = key if len(ys) > 1 else None
        ax.plot(t, y, color=f"C{(start + k) % 10}", lw=1.2, label=name)
    if len(ys) == 1 and np.isfinite(ys[0][keep]).any():
        mean = float(np.nanmean(ys[0][keep]))
        ax.axhline(mean, color="0.4", lw=0.8, ls="--", label=f"mean {mean:.4g}")
    if target is not None:
        ax.axhline(float(target), color="k", lw=1.0, ls=":", label=f"target {target:g}")
    ax.legend(fontsize=8, loc="best")


def summary_line(series: dict, equilibration_ps: float | None = None) -> str:
    """One line: samples, time span and the mean temperature (after the cut, if given)."""
    t = series["time_ps"]
    temp = series["temperature"]
    keep = np.ones(len(t), dtype=bool) if equilibration_ps is None else t >= equilibration_ps
    ok = keep & np.isfinite(temp)
    mean_t = float(np.mean(temp[ok])) if ok.any() else math.nan
    line = f"{len(t)} samples over {t[-1] - t[0]:.4g} ps, mean T {mean_t:.2f} K"
    if equilibration_ps is not None:
        line += f" (after {equilibration_ps:g} ps: {int(ok.sum())} samples)"
    return line
