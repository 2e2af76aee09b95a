"""dpdata's readers and writers, as mdband :class:`~mdband.io.frames.Frame` lists.

dpdata (DeePMD-kit's data tool) reads and writes the formats of the deepmd-kit ecosystem; mdband
uses it for them rather than its own parsers. Format names are dpdata's:

``deepmd/npy``, ``deepmd/npy/mixed``, ``deepmd/hdf5``, ``deepmd/raw``
    deepmd-kit systems. A mixed-type system keeps a placeholder ``type.raw`` and the real types
    of every frame in ``set.*/real_atom_types.npy``; dpdata reads them (a reader that takes
    ``type.raw`` at its word gives every atom the first type).
``lammps/dump``
    LAMMPS text dumps (numbered types; the timestep of every frame is kept as its step).
``vasp/outcar``, ``vasp/xml``
    VASP ``OUTCAR`` and ``vasprun.xml``: the free energy (``TOTEN``, ``e_fr_energy``), forces
    and the virial from the stress, where printed. The frames are the ionic steps whose
    electronic loop converged (fewer than ``NELM`` steps; dpdata leaves the others out), every
    cell turned lower triangular (LAMMPS's convention), positions, forces and virial with it.

Type numbers become elements by one rule (:func:`element_names`): a file that names its types
(``type_map.raw``, VASP's species) keeps its names; one that only numbers them (a LAMMPS dump,
a deepmd system without ``type_map.raw``) takes ``type_map[k]`` for type k (LAMMPS type k+1),
else the ``default_type_map`` a caller gives (a model's), else it is an error asking for one.

A deepmd-kit system's ``set.*/charge_spin.npy`` (nframes, 2), the total charge and spin
multiplicity of every frame (deepmd-kit's data of ``add_chg_spin_ebd`` models, which ``dp test``
reads), is read as each frame's ``charge`` and ``spin`` and written when every frame has both.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from ase.data import atomic_numbers

from mdband.io.atomic import atomic_path, fsync_dir, umask_mode
from mdband.io.frames import DatasetError, Frame

READ_FORMATS = (
    "deepmd/npy",
    "deepmd/npy/mixed",
    "deepmd/hdf5",
    "deepmd/raw",
    "lammps/dump",
    "vasp/outcar",
    "vasp/xml",
)
WRITE_FORMATS = ("deepmd/npy", "deepmd/npy/mixed", "deepmd/hdf5", "deepmd/raw", "lammps/dump")
DIRECTORY_FORMATS = ("deepmd/npy", "deepmd/npy/mixed", "deepmd/raw")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def is_element(name: str) -> bool:
    """Tell whether ``name`` is a chemical element symbol (the placeholder "X" is not one)."""
    return name in atomic_numbers and name != "X"


#: dpdata's name of the frames' (charge, spin multiplicity) rows: deepmd-kit's charge_spin.npy
CHARGE_SPIN = "charge_spin"


def register_charge_spin() -> None:
    """Teach dpdata the optional per-frame ``charge_spin`` data of deepmd-kit systems.

    This is dpdata's way to add a data type, as it adds spins itself; every deepmd format
    reads and writes it.
    """
    import dpdata
    from dpdata.data_type import Axis, DataType

    dt = DataType(CHARGE_SPIN, np.ndarray, (Axis.NFRAMES, 2), required=False,
                  deepmd_name=CHARGE_SPIN)  # fmt: skip
    for cls in (dpdata.System, dpdata.LabeledSystem):
        if all(d.name != CHARGE_SPIN for d in cls.DTYPES):
            cls.register_data_type(dt)


# ---------------------------------------------------------------------------- reading
def element_names(
    names, types, source: str, type_map=None, default_type_map=None, notes=None
) -> list[str]:
    """Return the element of every type of a system whose types are called ``names``.

    See the module docstring for the rule; ``types`` are the type indices of its atoms.
    """
    names = [str(n) for n in names]
    used = sorted({int(t) for t in np.asarray(types).reshape(-1)})
    if all(is_element(names[t]) for t in used):
        if type_map is not None and notes is not None:
            notes.append(f"{source} names its elements; the type map is not needed")
        return names
    chosen, where = type_map, "type map"
    if chosen is None:
        chosen, where = default_type_map, "model type map"
    if chosen is None:
        raise DatasetError(
            f"{source} numbers its atom types without naming the elements; give them with "
            "--type-map (type_map), e.g. --type-map O,H for type 0 (LAMMPS type 1) = O"
        )
    chosen = list(chosen)
    if used and used[-1] >= len(chosen):
        raise DatasetError(
            f"{source} has {used[-1] + 1} atom types but the {where} lists {len(chosen)} "
            f"element(s) ({' '.join(chosen)}); give one element per type with --type-map"
        )
    if notes is not None:
        pairs = ", ".join(f"{t}={chosen[t]}" for t in used)
        notes.append(f"{source}: types {pairs} (counting from 0; from the {where})")
    return chosen + names[len(chosen) :]


def _system_frames(system, source: str, type_map, default_type_map, notes) -> list[Frame]:
    data = system.data
    types = np.asarray(data["atom_types"], dtype=np.int64)
    names = element_names(data["atom_names"], types, source, type_map, default_type_map, notes)
    species = [names[t] for t in types]
    nopbc = bool(data.get("nopbc", False))
    n = len(types)
    coords = np.asarray(data["coords"], dtype=np.float64).reshape(-1, n, 3)
    cells = np.asarray(data["cells"], dtype=np.float64).reshape(-1, 3, 3)
    energies = data.get("energies")
    forces = data.get("forces")
    virials = data.get("virials")
    cs = data.get(CHARGE_SPIN)
    cs = None if cs is None else np.asarray(cs, dtype=np.float64).reshape(-1, 2)
    frames = []
    for i in range(coords.shape[0]):
        frames.append(
            Frame(
                species=list(species),
                positions=coords[i],
                cell=np.zeros((3, 3)) if nopbc else cells[i],
                pbc=np.array([not nopbc] * 3),
                energy=None if energies is None else float(np.asarray(energies)[i]),
                forces=None if forces is None else np.asarray(forces[i], dtype=np.float64),
                virial=None if virials is None else np.asarray(virials[i], dtype=np.float64),
                source=f"{source}[{i}]",
                charge=None if cs is None else float(cs[i, 0]),
                spin=None if cs is None else float(cs[i, 1]),
            )
        )
    return frames


def _has_labels(path: Path, fmt: str) -> bool:
    """Whether a deepmd-kit system stores energies and forces (dpdata needs both)."""
    if fmt == "deepmd/raw":
        have = [(path / f"{k}.raw").is_file() for k in ("energy", "force")]
    elif fmt == "deepmd/hdf5":
        return True  # decided per group by _hdf5_systems
    else:
        sets = sorted(p for p in path.glob("set.*") if p.is_dir())
        if not sets:
            raise DatasetError(f"{path}: deepmd system has no set.* directories")
        have = [all((s / f"{k}.npy").is_file() for s in sets) for k in ("energy", "force")]
        if any((s / "energy.npy").is_file() for s in sets) and not have[0]:
            raise DatasetError(f"{path}: some set.* directories have no energy.npy")
    if have[0] != have[1]:
        missing, found = ("energy", "force") if not have[0] else ("force", "energy")
        ext = "raw" if fmt == "deepmd/raw" else "npy"
        raise DatasetError(
            f"{path}: {found}.{ext} without {missing}.{ext} (energies and forces go together)"
        )
    return have[0]


def _hdf5_systems(path: Path) -> list[tuple[str, bool]]:
    """List the systems of a deepmd/hdf5 file: (group, labelled) for every group with type.raw."""
    import h5py

    found = []
    with h5py.File(path, "r") as f:

        def visit(name, obj):
            if isinstance(obj, h5py.Group) and "type.raw" in obj:
                sets = [k for k in obj if k.startswith("set.")]
                labelled = bool(sets) and all(
                    "energy.npy" in obj[k] and "force.npy" in obj[k] for k in sets
                )
                found.append((name, labelled))

        if "type.raw" in f:
            visit("", f)
        f.visititems(visit)
    return sorted(set(found))


def step_numbers_of_dump(path) -> list[int]:
    """Return the ``ITEM: TIMESTEP`` value of every frame of a LAMMPS text dump, in order."""
    steps = []
    with open(path, errors="replace") as fh:
        take = False
        for line in fh:
            if take:
                steps.append(int(line.split()[0]))
                take = False
            elif line.startswith("ITEM: TIMESTEP"):
                take = True
    return steps


def read_dpdata(path, fmt: str, *, type_map=None, default_type_map=None, notes=None) -> list[Frame]:
    """Every frame of ``path`` in dpdata format ``fmt`` (one of :data:`READ_FORMATS`)."""
    import dpdata

    path = Path(path)
    if fmt not in READ_FORMATS:
        raise DatasetError(f"dpdata format {fmt!r} is not one mdband reads ({READ_FORMATS})")
    register_charge_spin()
    try:
        if fmt == "deepmd/npy/mixed":
            multi = dpdata.MultiSystems.from_file(
                str(path), fmt=fmt, labeled=_has_labels(path, fmt)
            )
            systems = [(s, f"{path}") for s in multi.systems.values()]
        elif fmt == "deepmd/hdf5":
            groups = _hdf5_systems(path)
            if not groups:
                raise DatasetError(f"{path} holds no deepmd system (no type.raw)")
            systems = []
            for group, labelled in groups:
                cls = dpdata.LabeledSystem if labelled else dpdata.System
                name = f"{path}#/{group}" if group else str(path)
                systems.append((cls(name, fmt=fmt), name))
        elif fmt in ("deepmd/npy", "deepmd/raw"):
            cls = dpdata.LabeledSystem if _has_labels(path, fmt) else dpdata.System
            systems = [(cls(str(path), fmt=fmt), str(path))]
        elif fmt == "lammps/dump":
            systems = [(dpdata.System(str(path), fmt=fmt), str(path))]
        else:  # VASP outputs are always labelled
            systems = [(dpdata.LabeledSystem(str(path), fmt=fmt), str(path))]
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 - dpdata's parsers raise many kinds
        raise DatasetError(f"cannot read {path} as {fmt}: {_first_line(exc)}") from None
    frames = []
    for system, source in systems:
        frames += _system_frames(system, source, type_map, default_type_map, notes)
    if fmt == "lammps/dump":
        steps = step_numbers_of_dump(path)
        if len(steps) != len(frames):
            raise DatasetError(f"{path}: {len(steps)} timesteps but {len(frames)} complete frames")
        for f, step in zip(frames, steps):
            f.step = step
    if not frames:
        raise DatasetError(f"{path} holds no frames")
    return frames


# ---------------------------------------------------------------------------- writing
def _system_data(frames: list[Frame], type_map: list[str]) -> tuple[dict, bool]:
    """Return dpdata's data dict of ``frames`` and whether every frame has energy and forces.

    The frames must have the same atoms in the same order.
    """
    species = frames[0].species
    if any(f.species != species for f in frames):
        raise DatasetError("the frames do not all have the same atoms in the same order")
    missing = sorted(set(species) - set(type_map))
    if missing:
        raise DatasetError(f"the type map {' '.join(type_map)} lacks {' '.join(missing)}")
    types = np.array([type_map.index(s) for s in species], dtype=np.int64)
    pbc = bool(np.all(frames[0].pbc))
    if any(bool(np.all(f.pbc)) != pbc or (np.any(f.pbc) and not np.all(f.pbc)) for f in frames):
        raise DatasetError("deepmd-kit formats hold fully periodic or fully open frames only")
    data = {
        "atom_names": list(type_map),
        "atom_numbs": [int((types == k).sum()) for k in range(len(type_map))],
        "atom_types": types,
        "orig": np.zeros(3),
        "cells": np.stack([np.asarray(f.cell, dtype=np.float64) for f in frames]),
        "coords": np.stack([np.asarray(f.positions, dtype=np.float64) for f in frames]),
    }
    if not pbc:
        data["nopbc"] = True
    labelled = all(f.labelled for f in frames)
    if labelled:
        data["energies"] = np.array([f.energy for f in frames], dtype=np.float64)
        data["forces"] = np.stack([np.asarray(f.forces, dtype=np.float64) for f in frames])
        if all(f.virial is not None for f in frames):
            data["virials"] = np.stack([np.asarray(f.virial, dtype=np.float64) for f in frames])
    if all(f.charge is not None and f.spin is not None for f in frames):
        data[CHARGE_SPIN] = np.array([[f.charge, f.spin] for f in frames], dtype=np.float64)
    return data, labelled


def dpdata_system(frames: list[Frame], type_map: list[str]):
    """Return a ``dpdata.LabeledSystem`` of ``frames``, types numbered by ``type_map``.

    A ``dpdata.System`` when a frame has no energy or forces.
    """
    import dpdata

    register_charge_spin()
    data, labelled = _system_data(frames, type_map)
    return (dpdata.LabeledSystem if labelled else dpdata.System)(data=data)


def _dump_text(system, steps: list[int], with_forces: bool) -> str:
    """Format a LAMMPS text dump of every frame (dpdata's box convention), forces if known."""
    from dpdata.formats.lammps.dump import box2dumpbox

    data = system.data
    out = []
    types = np.asarray(data["atom_types"]) + 1
    cols = "id type x y z" + (" fx fy fz" if with_forces else "")
    for i, step in enumerate(steps):
        bounds, tilt = box2dumpbox(np.zeros(3), data["cells"][i])
        out.append(f"ITEM: TIMESTEP\n{int(step)}\nITEM: NUMBER OF ATOMS\n{len(types)}\n")
        out.append("ITEM: BOX BOUNDS xy xz yz pp pp pp\n")
        out += [f"{b[0]:.10f} {b[1]:.10f} {t:.10f}\n" for b, t in zip(bounds, tilt)]
        out.append(f"ITEM: ATOMS {cols}\n")
        pos = data["coords"][i]
        force = data["forces"][i] if with_forces else None
        for k in range(len(types)):
            row = f"{k + 1} {types[k]} {pos[k, 0]:.10f} {pos[k, 1]:.10f} {pos[k, 2]:.10f}"
            if force is not None:
                row += f" {force[k, 0]:.10e} {force[k, 1]:.10e} {force[k, 2]:.10e}"
            out.append(row + "\n")
    return "".join(out)


def write_dpdata(frames: list[Frame], out, fmt: str, type_map: list[str], *, replace=False):
    """Write ``frames`` to ``out`` in dpdata format ``fmt`` (one of :data:`WRITE_FORMATS`).

    Types are numbered by ``type_map`` (``type_map.raw`` of deepmd-kit systems; LAMMPS type
    k+1 is ``type_map[k]``). A LAMMPS dump gets the frames' steps as timesteps and, rotated into
    LAMMPS's lower-triangular cell as LAMMPS itself would, positions and forces. The output
    appears whole or not at all (a temporary file or directory renamed into place), with the
    modes of the umask.
    """
    if fmt not in WRITE_FORMATS:
        raise DatasetError(f"dpdata format {fmt!r} is not one mdband writes ({WRITE_FORMATS})")
    if not frames:
        raise DatasetError("no frames to write")
    out = Path(out)
    system = dpdata_system(frames, list(type_map))
    if fmt == "lammps/dump":
        if "nopbc" in system.data:
            raise DatasetError("a LAMMPS dump holds periodic frames only")
        system = system.copy()
        system.rot_lower_triangular()
        steps = [k if f.step is None else int(f.step) for k, f in enumerate(frames)]
        text = _dump_text(system, steps, "forces" in system.data)
        with atomic_path(out, replace=replace) as tmp:
            tmp.write_text(text)
        return
    if fmt == "deepmd/hdf5":
        with atomic_path(out, replace=replace) as tmp:
            tmp.unlink()
            system.to(fmt, str(tmp))
        return
    _write_directory(system, out, fmt, replace)


def _write_directory(system, out: Path, fmt: str, replace: bool) -> None:
    """Write a deepmd-kit system directory beside ``out`` and rename it into place.

    An existing ``out`` is moved aside first with ``replace`` (and put back if the new one
    cannot take its place), else :class:`FileExistsError`.
    """
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    old = tmp / "old"
    try:
        system.to(fmt, str(tmp / "system"))
        _follow_umask(tmp / "system")
        if os.path.lexists(out):
            if not replace:
                raise FileExistsError(f"{out} exists")
            os.replace(out, old)
        try:
            os.rename(tmp / "system", out)
        except OSError as exc:
            if os.path.lexists(old) and not os.path.lexists(out):
                os.rename(old, out)
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                raise FileExistsError(f"{out} exists") from None  # another writer's
            raise
    finally:
        if not (os.path.lexists(old) and not os.path.lexists(out)):
            shutil.rmtree(tmp, ignore_errors=True)  # else the old data stay in ``tmp``
    fsync_dir(out.parent)


def _follow_umask(root: Path) -> None:
    """Directories 0777 & ~umask, files 0666 & ~umask (mkdtemp makes 0700)."""
    mode = umask_mode()
    os.chmod(root, mode | ((mode & 0o444) >> 2))
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), mode | ((mode & 0o444) >> 2))
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), mode)
