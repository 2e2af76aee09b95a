"""``mdband repair TRAJ``: rewrite a trajectory a killed run left flagged "open for write".

Such a file (the run was killed inside a frame write) is refused by plain h5py, MDAnalysis
and HDF5's tools; the repair rewrites it atomically into a cleanly closed file with every
complete frame (see :mod:`mdband.io.repair`; a damaged file gives one line, never a hang).
``mdband run --resume`` does the same by itself. Exit codes: 0 done (or nothing to do);
2 the file cannot be repaired or another process writes it; 4 the disk is full; 130 stopped
by SIGINT or SIGTERM (the file as it was: the rewrite replaces it atomically).
"""

from __future__ import annotations

from pathlib import Path

import click

from mdband.cli.common import UserError, fail_on_user_error


class _ExhaustedError(UserError):
    exit_code = 4


@click.command("repair")
@click.argument("trajectory")
@click.option(
    "--through-step",
    type=int,
    metavar="N",
    help="Also drop the frames after step N (e.g. those after a checkpoint).",
)
@fail_on_user_error
def command(trajectory, through_step):
    """Rewrite TRAJECTORY (H5MD) into a cleanly closed file that any HDF5 reader opens."""
    from mdband.errors import ResourceExhaustedError
    from mdband.io.atomic import clean_stale_temps
    from mdband.io.locks import OutputLock
    from mdband.io.repair import (
        inspect_trajectory,
        is_flagged,
        repair_trajectory,
        uneven_series,
    )

    if not Path(trajectory).is_file():
        raise UserError(f"trajectory {trajectory} does not exist")
    with OutputLock(trajectory, "trajectory"):
        clean_stale_temps(trajectory)
        flagged = is_flagged(trajectory)
        state = inspect_trajectory(trajectory)
        beyond = through_step is not None and (state.last_step or 0) > through_step
        if not (flagged or beyond or uneven_series(trajectory)):
            click.echo(f"{trajectory}: a clean file with {state.frames} frames; nothing to do")
            return
        try:
            state = repair_trajectory(trajectory, through_step)
        except ResourceExhaustedError as exc:
            raise _ExhaustedError(str(exc)) from None
    last = "" if state.last_step is None else f", the last at step {state.last_step}"
    click.echo(f"{trajectory}: rewrote a clean file with {state.frames} frames{last}")
