"""``mdband export TRAJ OUT``: frames of an mdband H5MD trajectory to ASE and dpdata formats.

The dpdata formats are deepmd-kit systems and LAMMPS dumps; the frames keep their energies,
forces and virials/stress.
"""

from __future__ import annotations

from pathlib import Path

import click

from mdband.cli.common import OneLineCommand, fail_on_user_error, user_error

# dpdata formats mdband writes; a LAMMPS dump is also told by its name
_DUMP_SUFFIXES = (".dump", ".lammpstrj")


def _writer_format(out: str, fmt: str | None) -> str:
    from ase.io.formats import UnknownFileTypeError, filetype, ioformats

    from mdband.io.dpdata_io import WRITE_FORMATS

    if fmt in WRITE_FORMATS:
        return fmt
    name = Path(out).name.lower()
    if fmt is None and (Path(name).suffix in _DUMP_SUFFIXES or name.startswith("dump.")):
        return "lammps/dump"
    guess = ""
    if fmt is None:
        try:
            guess = filetype(out, read=False)
        except UnknownFileTypeError:
            guess = ""
    io = ioformats.get(fmt or guess)
    if io is None or not io.can_write:
        if fmt is None:
            user_error(f"cannot tell a format ASE writes from the name {out}; give --format")
        user_error(
            f"format {fmt!r} is neither one dpdata writes ({', '.join(WRITE_FORMATS)}) nor one "
            "ASE writes (see `ase info --formats`)"
        )
    return io.name


@click.command("export", cls=OneLineCommand)
@click.argument("traj", metavar="TRAJ")
@click.argument("out", metavar="OUT")
@click.option("--every", type=click.IntRange(min=1), default=1, help="Every Nth frame [1].")
@click.option("--frame", type=int, default=None, help="Only this frame (-1: the last).")
@click.option(
    "--format",
    "fmt",
    metavar="FMT",
    help="Format of OUT: deepmd/npy, deepmd/npy/mixed, deepmd/hdf5, deepmd/raw, lammps/dump "
    "(dpdata's names) or any format ASE writes [from OUT's name].",
)
@click.option(
    "--type-map",
    metavar="EL,EL",
    help="Type map numbering the types of deepmd-kit and LAMMPS outputs (O,H: type 0, LAMMPS "
    "type 1, is O) [the run's model type map, else the elements by atomic number].",
)
@click.option("--wrap", is_flag=True, help="Fold positions into the cell (default: continuous).")
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists.")
@fail_on_user_error
def command(traj, out, every, frame, fmt, type_map, wrap, overwrite):
    """Write frames of H5MD trajectory TRAJ to OUT in an ASE, deepmd-kit or LAMMPS format.

    Energy, forces and the potential virial (stress for ASE formats) are written where the
    format holds them. OUT is in any format ASE writes (extxyz, traj, xyz, vasp, lammps-data,
    ...), a deepmd-kit system (deepmd/npy, deepmd/npy/mixed, deepmd/hdf5, deepmd/raw) or a
    LAMMPS text dump (lammps/dump: the MD steps as timesteps, positions and forces) for DP-GEN
    and dpgen2.
    """
    from mdband.io.dpdata_io import WRITE_FORMATS
    from mdband.io.files import claim_outputs

    name = _writer_format(out, fmt)
    folder = ("output",) if name in WRITE_FORMATS else ()  # deepmd-kit systems are folders
    with claim_outputs({"output": out}, {"trajectory": traj}, overwrite=overwrite, folders=folder):
        frames, images = _read(traj, every, frame)
        if wrap:
            for f, atoms in zip(frames, images):
                atoms.wrap()
                f.positions = atoms.get_positions()
        if name in WRITE_FORMATS:
            _write_dpdata(traj, frames, Path(out), name, type_map, overwrite)
        else:
            _write_ase(Path(out), images, name, overwrite)
    steps = [f.step for f in frames]
    click.echo(f"wrote {len(frames)} frame(s), steps {steps[0]}..{steps[-1]}, to {out} ({name})")


def _read(traj, every: int, frame: int | None):
    """Read the selected frames, and the same frames as ASE atoms.

    The frames have labels, virial and step; the atoms velocities, masses and observables,
    and their calculators carry the stress of the virial.
    """
    import numpy as np

    from mdband.io.h5md_reader import H5MDReader
    from mdband.io.systems import read_h5md

    with H5MDReader(traj) as reader:
        index = slice(None, None, every) if frame is None else frame
        try:
            picks = reader.indices(index)
        except IndexError as exc:
            user_error(f"{traj}: {exc}")
        images = [reader.to_atoms(k) for k in picks]
    if not images:
        user_error(f"{traj} has no frames")
    frames = read_h5md(traj, picks)
    for f, atoms in zip(frames, images):
        if f.virial is not None:
            atoms.calc.results["stress"] = -f.virial / atoms.get_volume()
            atoms.info["virial"] = np.asarray(f.virial)  # extxyz: what dpdata reads
    return frames, images


def _type_map(traj, frames, type_map, name: str) -> list[str]:
    from mdband.io.frames import elements_of
    from mdband.io.h5md_reader import H5MDReader
    from mdband.io.structure import parse_type_map

    if type_map is not None:
        return parse_type_map(type_map)
    with H5MDReader(traj) as reader:
        recorded = reader.parameters.get("type_map")
    if recorded:
        return str(recorded).split()
    if name == "lammps/dump":
        user_error(
            f"{traj} does not record its model's type map; give the LAMMPS types with "
            "--type-map, e.g. --type-map O,H"
        )
    return elements_of(frames)


def _write_dpdata(traj, frames, out: Path, name: str, type_map, overwrite: bool) -> None:
    from mdband.io.dpdata_io import write_dpdata

    if not out.parent.is_dir():
        user_error(f"directory of {out} does not exist")
    write_dpdata(frames, out, name, _type_map(traj, frames, type_map, name), replace=overwrite)


def _write_ase(out: Path, images: list, fmt: str, overwrite: bool) -> None:
    """Write ``images`` to ``out`` in ASE format ``fmt``, never leaving a half-written OUT.

    The file is written through a temporary file beside ``out``, renamed into place (modes
    follow the umask).
    """
    import ase.io

    from mdband.io.atomic import atomic_path

    if len(images) > 1 and ase.io.formats.ioformats[fmt].single:
        user_error(f"format {fmt} holds one structure; pick one with --frame (e.g. -1)")
    try:
        with atomic_path(out, replace=overwrite) as tmp:
            ase.io.write(tmp, images if len(images) > 1 else images[0], format=fmt)
    except FileExistsError:
        user_error(f"{out} exists; pass --overwrite to replace it")
    except Exception as exc:  # noqa: BLE001 - ASE's writers raise many kinds
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        user_error(f"cannot write {out} as {fmt}: {first}")
