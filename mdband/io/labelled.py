"""Labelled frames (structures with energy, forces, virial) from ASE files, ASE databases and
deepmd npy systems: what ``mdband fit`` trains on and ``mdband run --structure`` reads.

A :class:`Frame` is one labelled structure (species, positions, cell, periodicity, energy,
forces and, when known, the virial). :func:`read_frames` reads

* deepmd-kit npy systems: a directory holding ``type.raw`` (and ``type_map.raw``) with
  ``set.*/{coord,box,energy,force}.npy`` (``virial.npy`` optional, a ``nopbc`` file for open
  boundaries), or a directory whose sub-directories are such systems;
* ASE databases (``.db``), rows with stored energy and forces;
* anything ``ase.io.read`` understands (extxyz, ...), labels from the attached single-point
  calculator or from ``atoms.info`` / ``atoms.arrays`` keys.

Virials are in eV with mdband's sign convention, ``W = -stress * volume`` (ASE stress).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ase.data import atomic_numbers

from mdband.errors import MdbandError

ENERGY_KEYS = ("energy", "Energy", "REF_energy", "ref_energy", "dft_energy", "total_energy")
FORCES_KEYS = ("forces", "force", "REF_forces", "ref_forces", "dft_forces")
VIRIAL_KEYS = ("virial", "REF_virial", "ref_virial")
STRESS_KEYS = ("stress", "REF_stress", "ref_stress", "dft_stress")


class DatasetError(MdbandError, ValueError):
    """Training data are missing, unreadable, unlabelled or inconsistent."""


@dataclass
class Frame:
    """One labelled structure (eV, Å)."""

    species: list[str]
    positions: np.ndarray  # (N, 3)
    cell: np.ndarray  # (3, 3), rows are cell vectors
    pbc: np.ndarray  # (3,) bool
    energy: float
    forces: np.ndarray  # (N, 3)
    virial: np.ndarray | None = None  # (3, 3), eV
    source: str = ""

    @property
    def n_atoms(self) -> int:
        return int(self.positions.shape[0])


# ---------------------------------------------------------------------------- readers
def _is_deepmd_system(path: Path) -> bool:
    return path.is_dir() and (path / "type.raw").is_file()


def _read_deepmd_system(path: Path) -> list[Frame]:
    types = np.loadtxt(path / "type.raw", dtype=np.int64, ndmin=1)
    tm_file = path / "type_map.raw"
    if tm_file.is_file():
        type_map = tm_file.read_text().split()
    else:
        raise DatasetError(f"{path}: deepmd system without type_map.raw (element names unknown)")
    if types.size == 0:
        raise DatasetError(f"{path}/type.raw lists no atoms")
    if types.min() < 0 or types.max() >= len(type_map):
        raise DatasetError(f"{path}: type.raw has indices outside type_map.raw {type_map}")
    for name in type_map:
        if name not in atomic_numbers:
            raise DatasetError(f"{path}: type_map.raw names an unknown element {name!r}")
    species = [type_map[t] for t in types]
    n = len(species)
    nopbc = (path / "nopbc").exists()
    sets = sorted(p for p in path.glob("set.*") if p.is_dir())
    if not sets:
        raise DatasetError(f"{path}: deepmd system has no set.* directories")
    frames: list[Frame] = []
    for s in sets:
        files = {k: s / f"{k}.npy" for k in ("coord", "box", "energy", "force", "virial")}
        for key in ("coord", "energy", "force"):
            if not files[key].is_file():
                what = {"coord": "coordinates", "energy": "energies", "force": "forces"}[key]
                raise DatasetError(f"{s}: no {key}.npy (the data need {what})")
        coord = np.load(files["coord"]).reshape(-1, n, 3).astype(np.float64)
        nf = coord.shape[0]
        energy = np.load(files["energy"]).reshape(-1).astype(np.float64)
        force = np.load(files["force"]).reshape(-1, n, 3).astype(np.float64)
        if files["box"].is_file():
            box = np.load(files["box"]).reshape(-1, 3, 3).astype(np.float64)
        elif nopbc:
            box = np.zeros((nf, 3, 3))
        else:
            raise DatasetError(f"{s}: no box.npy and no nopbc marker")
        virial = None
        if files["virial"].is_file():
            virial = np.load(files["virial"]).reshape(-1, 3, 3).astype(np.float64)
        sizes = {coord.shape[0], energy.shape[0], force.shape[0], box.shape[0]}
        if virial is not None:
            sizes.add(virial.shape[0])
        if len(sizes) != 1:
            raise DatasetError(f"{s}: coord/box/energy/force have different numbers of frames")
        pbc = np.array([not nopbc] * 3)
        for i in range(nf):
            frames.append(
                Frame(
                    species=list(species),
                    positions=coord[i],
                    cell=box[i],
                    pbc=pbc.copy(),
                    energy=float(energy[i]),
                    forces=force[i],
                    virial=None if virial is None else virial[i],
                    source=f"{s}[{i}]",
                )
            )
    return frames


def _first_key(mapping, keys, wanted: str | None):
    if wanted is not None:
        return mapping.get(wanted)
    for k in keys:
        if k in mapping:
            return mapping[k]
    return None


def _label(mapping, results: dict, keys, result_name: str, wanted: str | None):
    """An explicit key is looked up in ``mapping`` then in the calculator's results; without
    one, the calculator's result comes first, then the usual ``mapping`` keys."""
    if wanted is not None:
        value = mapping.get(wanted)
        return results.get(wanted) if value is None else value
    value = results.get(result_name)
    if value is None and result_name == "energy":
        value = results.get("free_energy")
    return _first_key(mapping, keys, None) if value is None else value


def frame_from_atoms(
    atoms,
    source: str = "",
    energy_key: str | None = None,
    forces_key: str | None = None,
    virial_key: str | None = None,
) -> Frame:
    """A :class:`Frame` from an ``ase.Atoms`` with energy and forces (calculator or keys)."""
    results = {}
    calc = getattr(atoms, "calc", None)
    if calc is not None and getattr(calc, "results", None):
        results = dict(calc.results)
    energy = _label(atoms.info, results, ENERGY_KEYS, "energy", energy_key)
    forces = _label(atoms.arrays, results, FORCES_KEYS, "forces", forces_key)
    if energy is None:
        raise DatasetError(f"{source}: no energy (looked for a calculator result and info keys)")
    if forces is None:
        raise DatasetError(f"{source}: no forces (looked for a calculator result and array keys)")
    n = len(atoms)
    forces = np.asarray(forces, dtype=np.float64)
    if forces.shape != (n, 3):
        raise DatasetError(f"{source}: forces have shape {forces.shape}, expected ({n}, 3)")
    pbc = np.asarray(atoms.pbc, dtype=bool)
    cell = np.asarray(atoms.cell.array, dtype=np.float64)
    virial = _first_key(atoms.info, VIRIAL_KEYS, virial_key)
    stress = results.get("stress") if virial is None else None
    if virial is None and stress is None and virial_key is None:
        stress = _first_key(atoms.info, STRESS_KEYS, None)
    if virial is None and stress is not None and pbc.all():
        s = np.asarray(stress, dtype=np.float64).reshape(-1)
        if s.size == 6:
            from ase.stress import voigt_6_to_full_3x3_stress

            s3 = voigt_6_to_full_3x3_stress(s)
        elif s.size == 9:
            s3 = s.reshape(3, 3)
        else:
            raise DatasetError(f"{source}: stress has {s.size} components, expected 6 or 9")
        virial = -s3 * abs(float(np.linalg.det(cell)))
    if virial is not None:
        virial = np.asarray(virial, dtype=np.float64).reshape(-1)
        if virial.size != 9:
            raise DatasetError(f"{source}: virial has {virial.size} components, expected 9")
        virial = virial.reshape(3, 3)
    return Frame(
        species=list(atoms.get_chemical_symbols()),
        positions=np.asarray(atoms.positions, dtype=np.float64).copy(),
        cell=cell.copy(),
        pbc=pbc.copy(),
        energy=float(np.asarray(energy).reshape(())),
        forces=forces.copy(),
        virial=virial,
        source=source,
    )


def _read_ase_db(path: Path, **keys) -> list[Frame]:
    import ase.db

    frames = []
    try:
        with ase.db.connect(str(path)) as db:
            for row in db.select():
                frames.append(frame_from_atoms(row.toatoms(), f"{path}[id={row.id}]", **keys))
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 - sqlite/ase raise many types for a bad file
        raise DatasetError(f"cannot read ASE database {path}: {exc}") from None
    return frames


def _read_ase_file(path: Path, **keys) -> list[Frame]:
    import ase.io

    try:
        images = ase.io.read(str(path), index=":")
    except Exception as exc:  # noqa: BLE001 - ase.io raises many types for a bad file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatasetError(f"cannot read {path} with ase.io: {first[:200]}") from None
    if not isinstance(images, list):
        images = [images]
    return [frame_from_atoms(a, f"{path}[{i}]", **keys) for i, a in enumerate(images)]


def read_frames(
    path,
    energy_key: str | None = None,
    forces_key: str | None = None,
    virial_key: str | None = None,
) -> list[Frame]:
    """Every labelled frame in ``path`` (deepmd system(s), ``.db`` or an ASE-readable file)."""
    path = Path(path)
    keys = {"energy_key": energy_key, "forces_key": forces_key, "virial_key": virial_key}
    if not path.exists():
        raise DatasetError(f"data path {path} does not exist")
    if path.is_dir():
        if _is_deepmd_system(path):
            return _read_deepmd_system(path)
        systems = sorted(p.parent for p in path.rglob("type.raw"))
        if not systems:
            raise DatasetError(f"{path} is a directory without deepmd systems (no type.raw)")
        return [f for s in systems for f in _read_deepmd_system(s)]
    if path.suffix == ".db":
        frames = _read_ase_db(path, **keys)
    else:
        frames = _read_ase_file(path, **keys)
    if not frames:
        raise DatasetError(f"{path} holds no frames")
    return frames


def read_dataset(paths, **keys) -> list[Frame]:
    """Frames of every path in ``paths``; checks they are finite and consistent."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    frames: list[Frame] = []
    for p in paths:
        frames.extend(read_frames(p, **keys))
    if not frames:
        raise DatasetError("the dataset is empty")
    for f in frames:
        if f.n_atoms == 0:
            raise DatasetError(f"{f.source}: frame has no atoms")
        if not np.isfinite(f.energy) or not np.all(np.isfinite(f.forces)):
            raise DatasetError(f"{f.source}: energy or forces are not finite")
        if f.virial is not None and not np.all(np.isfinite(f.virial)):
            raise DatasetError(f"{f.source}: virial is not finite")
    return frames


def elements_of(frames: list[Frame]) -> list[str]:
    """Elements in ``frames`` ordered by atomic number."""
    found = {s for f in frames for s in f.species}
    return sorted(found, key=lambda s: atomic_numbers.get(s, 0))
