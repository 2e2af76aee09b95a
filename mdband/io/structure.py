"""Starting structures of ``mdband run`` and ``relax``: one image of any file mdband reads.

The formats and the type map are those of :func:`mdband.io.systems.read_systems`. Files ASE
reads (extxyz, ASE trajectories, mdband H5MD through its ASE plugin, POSCAR, ...) come back as
ASE reads them, velocities and constraints included; LAMMPS data files through
:mod:`mdband.io.lammps_data` (velocities and masses kept); the formats of dpdata
(``deepmd/npy``, ``deepmd/npy/mixed``, ``deepmd/hdf5``, ``deepmd/raw``, ``lammps/dump``,
``vasp/outcar``, ``vasp/xml``) through dpdata.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from ase import Atoms

from mdband.errors import StructureError
from mdband.io.dpdata_io import READ_FORMATS
from mdband.io.frames import DatasetError
from mdband.io.lammps_data import parse_type_map, read_lammps_data
from mdband.io.systems import detect_format, read_systems

__all__ = ["parse_type_map", "read_images", "read_structure", "structure_format"]


def structure_format(path, fmt: str | None = None) -> str | None:
    """Return the format :func:`read_structure` reads ``path`` as (None: ASE's guess)."""
    try:
        return detect_format(path, fmt)
    except DatasetError as exc:
        raise StructureError(str(exc)) from None


def read_structure(
    path,
    frame: int = -1,
    *,
    format: str | None = None,
    type_map=None,
    default_type_map=None,
    notes: list[str] | None = None,
) -> Atoms:
    """Read one image of ``path`` (see the module docstring for the formats).

    Parameters
    ----------
    path : path
        A file, or a deepmd-kit system directory.
    frame : int
        Which image (default: the last).
    format : str, optional
        A format name of :data:`mdband.io.systems.FORMATS` (``lammps-data`` is
        ``lammps/lmp``) or of :func:`ase.io.read`; found from the path when None.
    type_map : str or list of str, optional
        Elements of numbered types (``"O,H"``: type 0, LAMMPS type 1, is O); files that name
        their elements keep them.
    default_type_map : list of str, optional
        Used instead of ``type_map`` when it is None (the model's type map).
    notes : list of str, optional
        Receives lines saying how numbered types became elements.

    Raises
    ------
    StructureError
        The file is missing or unreadable, the frame does not exist, or the elements of
        numbered types cannot be told.
    """
    path = Path(path)
    if not path.exists():
        raise StructureError(f"structure file {path} does not exist")
    fmt = structure_format(path, format)
    if type_map is not None:
        try:
            type_map = parse_type_map(type_map)
        except ValueError as exc:
            raise StructureError(str(exc)) from None
    if path.is_dir() and fmt is None:
        raise StructureError(
            f"{path} is not a deepmd-kit system (no type.raw); give one system directory"
        )
    if fmt == "lammps/lmp":
        atoms = read_lammps_data(path, frame, type_map, default_type_map, notes)
    elif fmt in READ_FORMATS:
        atoms = _read_frames(path, frame, fmt, type_map, default_type_map, notes)
    else:
        if type_map is not None and notes is not None:
            notes.append(f"{path} names its elements; the type map is not needed")
        ase_fmt = fmt if fmt is None else {"ase/db": "db", "h5md": "mdband-h5md"}.get(fmt, fmt)
        atoms = _read_ase(path, frame, ase_fmt)
    if len(atoms) == 0:
        raise StructureError(f"structure {path} has no atoms")
    return atoms


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:160] if text else type(exc).__name__


def _read_ase(path: Path, frame: int, fmt: str | None) -> Atoms:
    import ase.io
    from ase.io.formats import filetype, ioformats

    try:
        single = ioformats[fmt or filetype(str(path))].single
    except Exception:  # noqa: BLE001 - unknown to ASE: its reader says so below
        single = False
    if single and frame not in (0, -1):
        raise StructureError(f"{path} holds one structure: there is no frame {frame}")
    # a one-frame slice: an out-of-range frame gives no image (an index raises StopIteration,
    # or wraps a negative one silently)
    try:
        images = ase.io.read(path, index=slice(frame, frame + 1 or None), format=fmt)
    except Exception as exc:  # noqa: BLE001 - ASE's readers raise many kinds
        raise StructureError(f"cannot read structure {path}: {_first_line(exc)}") from None
    if not isinstance(images, list):
        images = [images]
    if not images:
        raise StructureError(
            f"{path} has no frame {frame} (frames count from 0; -1 is the last): out of range"
        )
    return images[0]


def _read_frames(path: Path, frame: int, fmt: str, type_map, default_type_map, notes) -> Atoms:
    try:
        frames = read_systems(path, fmt, type_map, default_type_map=default_type_map, notes=notes)
    except DatasetError as exc:
        raise StructureError(f"cannot read {path}: {_first_line(exc)}") from None
    if not -len(frames) <= frame < len(frames):
        raise StructureError(f"{path} has {len(frames)} frames; no frame {frame}")
    f = frames[frame]
    return Atoms(symbols=f.species, positions=f.positions, cell=f.cell, pbc=f.pbc)


def read_images(
    path,
    *,
    format: str | None = None,
    type_map=None,
    default_type_map=None,
    notes: list[str] | None = None,
) -> list[Atoms]:
    """Read every image of ``path``, in order.

    :func:`read_structure` reads one of them; same formats, arguments and errors. ASE formats
    keep what ASE reads (constraints, info).
    """
    path = Path(path)
    if not path.exists():
        raise StructureError(f"structure file {path} does not exist")
    fmt = structure_format(path, format)
    if fmt is None or fmt not in (*READ_FORMATS, "lammps/lmp"):
        if path.is_dir():
            raise StructureError(
                f"{path} is not a deepmd-kit system (no type.raw); give one system directory"
            )
        if type_map is not None:
            try:
                parse_type_map(type_map)  # checked as read_structure checks it
            except ValueError as exc:
                raise StructureError(str(exc)) from None
        if type_map is not None and notes is not None:
            notes.append(f"{path} names its elements; the type map is not needed")
        import ase.io

        ase_fmt = fmt if fmt is None else {"ase/db": "db", "h5md": "mdband-h5md"}.get(fmt, fmt)
        try:
            images = cast(list[Atoms], ase.io.read(path, index=":", format=ase_fmt))
        except Exception as exc:  # noqa: BLE001 - ASE's readers raise many kinds
            raise StructureError(f"cannot read structure {path}: {_first_line(exc)}") from None
    elif fmt == "lammps/lmp":
        images = [read_structure(path, -1, format=fmt, type_map=type_map,
                                 default_type_map=default_type_map, notes=notes)]  # fmt: skip
    else:
        try:
            tm = None if type_map is None else parse_type_map(type_map)
            frames = read_systems(path, fmt, tm, default_type_map=default_type_map, notes=notes)
        except (DatasetError, ValueError) as exc:
            raise StructureError(f"cannot read {path}: {_first_line(exc)}") from None
        images = [Atoms(symbols=f.species, positions=f.positions, cell=f.cell, pbc=f.pbc)
                  for f in frames]  # fmt: skip
    for k, atoms in enumerate(images):
        if len(atoms) == 0:
            raise StructureError(f"structure {path} image {k} has no atoms")
    if not images:
        raise StructureError(f"structure file {path} holds no image")
    return images
