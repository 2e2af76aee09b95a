"""``mdband plot TRAJ_OR_LOG -o thermo.png``: a run's thermo series against time.

Energies, temperature, pressure, volume (those that vary, or the panels asked for) against
time, with target lines and an equilibration cut.
"""

from __future__ import annotations

from pathlib import Path

import click

from mdband.cli.common import OneLineCommand, fail_on_user_error, user_error

PANEL_NAMES = "energy, temperature, pressure, volume, density, cell, pressure_tensor"


@click.command("plot", cls=OneLineCommand)
@click.argument("source", metavar="TRAJ_OR_LOG")
@click.option(
    "-o", "--output", metavar="FILE", help="Figure (.png, .pdf, .svg) [<source stem>.png]."
)
@click.option("--title", help="Figure title [the source's name].")
@click.option(
    "--panels",
    metavar="NAME,...",
    help=f"Panels to draw, in order: {PANEL_NAMES} [energy and, of temperature, pressure and "
    "volume, those that vary].",
)
@click.option(
    "--target-temperature",
    type=float,
    metavar="K",
    help="Target line on the temperature panel [a trajectory's thermostat temperature].",
)
@click.option(
    "--target-pressure",
    type=float,
    metavar="GPA",
    help="Target line on the pressure panel [a trajectory's barostat pressure].",
)
@click.option("--no-targets", is_flag=True, help="Draw no target lines.")
@click.option(
    "--equilibration",
    type=float,
    metavar="PS",
    help="Shade the samples before this time and leave them out of the means.",
)
@click.option("--overwrite", is_flag=True, help="Replace the figure if it exists.")
@fail_on_user_error
def command(
    source, output, title, panels, target_temperature, target_pressure, no_targets,
    equilibration, overwrite,
):  # fmt: skip
    """Plot the thermo series of a run against time.

    Panels: energies (potential, kinetic, conserved, relative to their first values) and, of
    temperature, pressure and volume, those that vary (--panels picks others: density, cell
    lengths, the pressure tensor).

    TRAJ_OR_LOG is an H5MD trajectory, a CSV log (--log run.csv) or a text log of
    `mdband run`. A trajectory's thermostat temperature and barostat pressure are drawn as
    target lines. Needs matplotlib (pip install 'mdband[plot]').
    """
    from mdband.io.files import claim_outputs
    from mdband.io.plot import PANELS, plot_thermo, read_series, run_targets, summary_line

    out = Path(output) if output else Path(source).with_suffix(".png")
    chosen = None
    if panels:
        chosen = [p.strip() for p in panels.split(",") if p.strip()]
        unknown = [p for p in chosen if p not in PANELS]
        if unknown:
            user_error(f"--panels: unknown panel {unknown[0]!r}; choose from {PANEL_NAMES}")
    with claim_outputs({"figure": out}, {"source": source}, overwrite=overwrite):
        series = read_series(source)
        if equilibration is not None and not equilibration < series["time_ps"][-1]:
            user_error(f"--equilibration {equilibration:g} ps leaves no sample to average")
        targets = {} if no_targets else run_targets(source)
        if target_temperature is not None:
            targets["temperature"] = target_temperature
        if target_pressure is not None:
            targets["pressure"] = target_pressure
        plot_thermo(series, out, title=title or Path(source).name, panels=chosen,
                    targets=targets, equilibration_ps=equilibration)  # fmt: skip
    click.echo(f"wrote {out}: {summary_line(series, equilibration)}")
