"""Every structure file mdband reads, through one function: :func:`read_systems`.

``read_systems(paths, fmt=None, type_map=None)`` returns a list of
:class:`~mdband.io.frames.Frame` (species, positions, cell, pbc; energy, forces and virial
where the file has them; the MD step where the file records it). ``mdband run``, ``relax``,
``fit`` and ``model-devi`` read their structures with it, and so can any batched evaluation.

Formats, named as dpdata names them (:data:`FORMATS`; the format is found from the path when
``fmt`` is None, see :func:`detect_format`):

* dpdata's readers (:mod:`mdband.io.dpdata_io`): ``deepmd/npy``, ``deepmd/npy/mixed``,
  ``deepmd/hdf5``, ``deepmd/raw``, ``lammps/dump``, ``vasp/outcar``, ``vasp/xml``;
* ``lammps/lmp``: LAMMPS data files (:mod:`mdband.io.lammps_data`: type map, type labels or
  masses name the elements; ASE reads the atoms);
* ``h5md``: mdband trajectories (steps, energies, forces, and the virial from the recorded
  stress less its kinetic part);
* ``ase/db`` and every format ``ase.io.read`` knows (extxyz, ASE trajectories, POSCAR, CIF,
  ...), with labels from ASE's single-point calculator or ``info``/``arrays`` keys.

A directory that is not itself a deepmd-kit system is read as the deepmd-kit systems below it.

**The type map** (``type_map``, the ``--type-map`` flag of every command) is deepmd-kit's: the
element of each type number, in order, ``type_map[k]`` for type k (LAMMPS type k+1, as
``pair_coeff * * O H`` says). Files that only number their types (LAMMPS dumps and data files,
deepmd-kit systems without ``type_map.raw``) take their elements from it, else from
``default_type_map`` (a model's type map, where a command has one); files that name their
elements keep their names. ``mdband fit`` also orders a new model's types by it, as ``dp train``
does.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from mdband.io.ase_frames import frame_from_atoms, read_ase_db, read_ase_file
from mdband.io.dpdata_io import READ_FORMATS, read_dpdata
from mdband.io.frames import DatasetError, Frame, check_labelled

FORMATS = {
    "deepmd/npy": "deepmd-kit system directory (type.raw, set.*/*.npy)",
    "deepmd/npy/mixed": "deepmd-kit mixed-type system (set.*/real_atom_types.npy)",
    "deepmd/hdf5": "deepmd-kit systems in one HDF5 file",
    "deepmd/raw": "deepmd-kit system of .raw text files",
    "lammps/lmp": "LAMMPS data file",
    "lammps/dump": "LAMMPS text dump (timesteps kept)",
    "vasp/outcar": "VASP OUTCAR",
    "vasp/xml": "VASP vasprun.xml",
    "h5md": "mdband H5MD trajectory (steps kept)",
    "ase/db": "ASE database",
}
ALIASES = {
    "deepmd": "deepmd/npy",
    "npy": "deepmd/npy",
    "lammps-data": "lammps/lmp",
    "lmp": "lammps/lmp",
    "dump": "lammps/dump",
    "lammps-dump": "lammps/dump",
    "outcar": "vasp/outcar",
    "vasprun": "vasp/xml",
    "mdband-h5md": "h5md",
    "db": "ase/db",
}
_DUMP_SUFFIXES = (".dump", ".lammpstrj")


def format_name(fmt: str | None) -> str | None:
    """Return the canonical name of format ``fmt``.

    That is one of :data:`FORMATS` (aliases such as ``lammps-data`` resolved) or a format
    ``ase.io.read`` knows; :class:`DatasetError` for anything else.
    """
    if fmt is None:
        return None
    name = ALIASES.get(str(fmt).lower(), str(fmt))
    if name in FORMATS:
        return name
    from ase.io.formats import ioformats

    io = ioformats.get(name)
    if io is None or not io.can_read:
        known = ", ".join(FORMATS)
        raise DatasetError(f"format {fmt!r} is not one of {known} or a format ASE reads")
    return io.name


def _deepmd_dir_format(path: Path) -> str:
    if any(path.glob("set.*/real_atom_types.npy")):
        return "deepmd/npy/mixed"
    if any(p.is_dir() for p in path.glob("set.*")):
        return "deepmd/npy"
    if (path / "coord.raw").is_file():
        return "deepmd/raw"
    raise DatasetError(f"{path} has type.raw but neither set.* directories nor coord.raw")


def _hdf5_format(path: Path) -> str:
    import h5py

    try:
        with h5py.File(path, "r") as f:
            if "h5md" in f:
                return "h5md"
            found = []
            f.visit(lambda name: found.append(name) if name.endswith("type.raw") else None)
    except OSError as exc:
        if "already open for write" in str(exc):
            return "h5md"  # a trajectory a killed run left flagged: the H5MD reader copes
        raise DatasetError(f"cannot read HDF5 file {path}: {exc}") from None
    if found:
        return "deepmd/hdf5"
    raise DatasetError(f"{path} is an HDF5 file but neither H5MD nor deepmd/hdf5")


def detect_format(path, fmt: str | None = None) -> str | None:
    """Detect the format of ``path``: ``fmt`` when given (canonical name), else from the path.

    Directories with ``type.raw`` are deepmd-kit systems (``deepmd/npy/mixed`` when a set has
    ``real_atom_types.npy``, ``deepmd/raw`` without ``set.*``); HDF5 files are ``h5md`` or
    ``deepmd/hdf5`` by their contents; ``OUTCAR*``, ``vasprun*.xml``, ``*.dump``,
    ``*.lammpstrj``, ``dump.*``, ``*.lmp``, ``*.data`` and ``*.db`` by their names. None: a
    file for ``ase.io.read`` to recognise.
    """
    if fmt is not None:
        return format_name(fmt)
    p = Path(path)
    if p.is_dir():
        return _deepmd_dir_format(p) if (p / "type.raw").is_file() else None
    name, suffix = p.name.lower(), p.suffix.lower()
    if name.startswith("outcar"):
        return "vasp/outcar"
    if name.startswith("vasprun") and name.endswith(".xml"):
        return "vasp/xml"
    if suffix in _DUMP_SUFFIXES or name.startswith("dump."):
        return "lammps/dump"
    if suffix in (".lmp", ".data"):
        return "lammps/lmp"
    if suffix == ".db":
        return "ase/db"
    if p.is_file():
        import h5py

        if h5py.is_hdf5(p):
            return _hdf5_format(p)
    return None


def _natural(path: Path) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def deepmd_systems(root) -> list[Path]:
    """Find the deepmd-kit system directories at or below ``root`` (natural order)."""
    root = Path(root)
    if (root / "type.raw").is_file():
        return [root]
    return sorted({p.parent for p in root.rglob("type.raw")}, key=_natural)


def read_systems(
    paths,
    fmt: str | None = None,
    type_map=None,
    *,
    default_type_map=None,
    labelled: bool = False,
    energy_key: str | None = None,
    forces_key: str | None = None,
    virial_key: str | None = None,
    notes: list[str] | None = None,
) -> list[Frame]:
    """Every frame of every path in ``paths`` (one path or a list).

    Parameters
    ----------
    paths : path or list of paths
        Files or directories (see the module docstring for the formats).
    fmt : str, optional
        Format of every path (a name of :data:`FORMATS`, an alias or an ASE format); found
        from each path when None (:func:`detect_format`).
    type_map : str or list of str, optional
        Elements of numbered types (see the module docstring): ``"O,H"`` or ``["O", "H"]``.
    default_type_map : list of str, optional
        Used instead when ``type_map`` is None (a command passes its model's type map).
    labelled : bool
        Require an energy and forces in every frame (:class:`DatasetError` otherwise).
    energy_key, forces_key, virial_key : str, optional
        ``info``/``arrays`` keys of the labels in ASE-read files.
    notes : list of str, optional
        Receives lines saying where the elements of numbered types came from.

    Raises
    ------
    DatasetError
        A path is missing or unreadable, holds no frames, lacks labels asked for, or numbers
        types that no type map names.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if type_map is not None:
        from mdband.io.lammps_data import parse_type_map

        try:
            type_map = parse_type_map(type_map)
        except ValueError as exc:
            raise DatasetError(str(exc)) from None
    keys = {"energy_key": energy_key, "forces_key": forces_key, "virial_key": virial_key}
    frames: list[Frame] = []
    for path in paths:
        frames += _read_path(Path(path), fmt, type_map, default_type_map, labelled, keys, notes)
    if not frames:
        raise DatasetError("no frames to read")
    return check_labelled(frames) if labelled else frames


def _read_path(path: Path, fmt, type_map, default_type_map, labelled, keys, notes):
    if not path.exists():
        raise DatasetError(f"{path} does not exist")
    name = detect_format(path, fmt)
    if path.is_dir() and not (path / "type.raw").is_file():
        systems = deepmd_systems(path)
        if not systems:
            raise DatasetError(f"{path} is a directory without deepmd-kit systems (no type.raw)")
        out = []
        for s in systems:
            out += _read_path(s, fmt, type_map, default_type_map, labelled, keys, notes)
        return out
    if path.is_dir() and name not in ("deepmd/npy", "deepmd/npy/mixed", "deepmd/raw"):
        raise DatasetError(f"{path} is a deepmd-kit system directory, not format {name}")
    if name in READ_FORMATS:
        return read_dpdata(
            path, name, type_map=type_map, default_type_map=default_type_map, notes=notes
        )
    if name == "lammps/lmp":
        return [_lammps_data_frame(path, type_map, default_type_map, notes)]
    if name == "h5md":
        return read_h5md(path)
    label_keys = dict(keys, labelled=labelled)
    if type_map is not None and notes is not None:
        notes.append(f"{path} names its elements; the type map is not needed")
    if name == "ase/db":
        frames = read_ase_db(path, **label_keys)
    else:
        frames = read_ase_file(path, name, **label_keys)
    if not frames:
        raise DatasetError(f"{path} holds no frames")
    return frames


def _lammps_data_frame(path: Path, type_map, default_type_map, notes) -> Frame:
    from mdband.errors import StructureError
    from mdband.io.lammps_data import read_lammps_data

    try:
        atoms = read_lammps_data(path, -1, type_map, default_type_map, notes)
    except StructureError as exc:
        raise DatasetError(str(exc)) from None
    return frame_from_atoms(atoms, f"{path}[0]", labelled=False)


def read_h5md(path, indices=None) -> list[Frame]:
    """Read the frames of an mdband H5MD trajectory (all, or those numbered ``indices``).

    The frames have step, energy and forces, and the virial
    ``W = -(stress - kinetic stress) * V`` of periodic frames (the recorded stress includes
    the kinetic part, which the velocities give back).
    """
    from ase.data import chemical_symbols

    from mdband.io.h5md_reader import H5MDReader, potential_stress

    out = []
    with H5MDReader(path) as reader:
        species = [chemical_symbols[int(z)] for z in reader.species]
        masses = np.asarray(reader.masses, dtype=np.float64)
        pbc = np.asarray(reader.pbc, dtype=bool)
        for i in range(reader.n_frames) if indices is None else indices:
            fr = reader.frame(i)
            cell = np.asarray(fr.cell, dtype=np.float64)
            energy = fr.observables.get("potential_energy")
            virial = None
            stress = fr.observables.get("stress")
            if pbc.all() and stress is not None and np.all(np.isfinite(stress)):
                volume = abs(float(np.linalg.det(cell)))
                virial = -potential_stress(stress, fr.velocities, masses, cell) * volume
            out.append(
                Frame(
                    species=list(species),
                    positions=np.asarray(fr.positions, dtype=np.float64),
                    cell=cell,
                    pbc=pbc.copy(),
                    energy=None if energy is None else float(energy),
                    forces=None if fr.forces is None else np.asarray(fr.forces, np.float64),
                    virial=virial,
                    source=f"{path}[{i}]",
                    step=int(fr.step),
                )
            )
    return out


def read_dataset(paths, fmt: str | None = None, type_map=None, **keys) -> list[Frame]:
    """Labelled frames of every path (what ``mdband fit`` trains on); checked finite."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not list(paths):
        raise DatasetError("the dataset is empty")
    return read_systems(paths, fmt, type_map, labelled=True, **keys)


def read_frames(path, fmt: str | None = None, type_map=None, **keys) -> list[Frame]:
    """Labelled frames of one path (see :func:`read_systems`)."""
    return read_systems([path], fmt, type_map, labelled=True, **keys)
