"""``mdband plot TRAJ_OR_LOG -o thermo.png``: energy, temperature, pressure, volume vs time."""

from __future__ import annotations

from pathlib import Path

import click

from mdband.cli.common import OneLineCommand, fail_on_user_error


@click.command("plot", cls=OneLineCommand)
@click.argument("source", metavar="TRAJ_OR_LOG")
@click.option(
    "-o", "--output", metavar="FILE", help="Figure (.png, .pdf, .svg) [<source stem>.png]."
)
@click.option("--title", help="Figure title [the source's name].")
@click.option("--overwrite", is_flag=True, help="Replace the figure if it exists.")
@fail_on_user_error
def command(source, output, title, overwrite):
    """Plot the thermo series of a run: energies (potential, kinetic, conserved, relative to
    their first values), temperature, pressure and volume against time, in four panels.

    TRAJ_OR_LOG is an H5MD trajectory, a CSV log (--log run.csv) or a text log of
    `mdband run`. Needs matplotlib (pip install 'mdband[plot]').
    """
    from mdband.io.files import claim_outputs
    from mdband.io.plot import plot_thermo, read_series, summary_line

    out = Path(output) if output else Path(source).with_suffix(".png")
    with claim_outputs({"figure": out}, {"source": source}, overwrite=overwrite):
        series = read_series(source)
        plot_thermo(series, out, title=title or Path(source).name)
    click.echo(f"wrote {out}: {summary_line(series)}")
