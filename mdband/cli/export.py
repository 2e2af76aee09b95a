"""``mdband export TRAJ OUT``: frames of an mdband H5MD trajectory to any format ASE writes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click

from mdband.cli.common import OneLineCommand, fail_on_user_error, user_error


def _writer_format(out: str, fmt: str | None) -> str:
    from ase.io.formats import UnknownFileTypeError, filetype, ioformats

    guess = None
    if fmt is None:
        try:
            guess = filetype(out, read=False)
        except UnknownFileTypeError:
            guess = ""
    io = ioformats.get(fmt or guess)
    if io is None or not io.can_write:
        if fmt is None:
            user_error(f"cannot tell a format ASE writes from the name {out}; give --format")
        user_error(f"ASE cannot write format {fmt!r} (see `ase info --formats`)")
    return io.name


@click.command("export", cls=OneLineCommand)
@click.argument("traj", metavar="TRAJ")
@click.argument("out", metavar="OUT")
@click.option("--every", type=click.IntRange(min=1), default=1, help="Every Nth frame [1].")
@click.option("--frame", type=int, default=None, help="Only this frame (-1: the last).")
@click.option("--format", "fmt", metavar="FMT", help="ASE format of OUT [from its name].")
@click.option("--wrap", is_flag=True, help="Fold positions into the cell (default: continuous).")
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists.")
@fail_on_user_error
def command(traj, out, every, frame, fmt, wrap, overwrite):
    """Write frames of the H5MD trajectory TRAJ to OUT in any format ASE writes (extxyz,
    traj, xyz, vasp, lammps-data, ...), with cell, pbc, velocities, energy and forces where
    the format holds them.
    """
    import ase.io

    from mdband.io.h5md_reader import H5MDReader

    if Path(out).exists() and not overwrite:
        user_error(f"{out} exists; pass --overwrite to replace it")
    name = _writer_format(out, fmt)
    with H5MDReader(traj) as reader:
        index = slice(None, None, every) if frame is None else frame
        try:
            images = reader.to_atoms(index)
        except IndexError as exc:
            user_error(f"{traj}: {exc}")
    images = images if isinstance(images, list) else [images]
    if not images:
        user_error(f"{traj} has no frames")
    if len(images) > 1 and ase.io.formats.ioformats[name].single:
        user_error(f"format {name} holds one structure; pick one with --frame (e.g. -1)")
    if wrap:
        for atoms in images:
            atoms.wrap()
    _write_atomically(Path(out), images, name)
    steps = [a.info["step"] for a in images]
    click.echo(f"wrote {len(images)} frame(s), steps {steps[0]}..{steps[-1]}, to {out} ({name})")


def _write_atomically(out: Path, images: list, fmt: str) -> None:
    """Write to a temporary file beside ``out`` and rename it: no half-written OUT."""
    import ase.io

    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent or ".")
    os.close(fd)
    try:
        ase.io.write(tmp, images if len(images) > 1 else images[0], format=fmt)
        os.replace(tmp, out)
    except Exception as exc:  # noqa: BLE001 - ASE's writers raise many kinds
        Path(tmp).unlink(missing_ok=True)
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        user_error(f"cannot write {out} as {fmt}: {first}")
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
