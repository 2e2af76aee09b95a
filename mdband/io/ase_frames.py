"""Frames of ASE files and ASE databases.

Read are anything ``ase.io.read`` understands (extxyz, ...) and ``.db`` files, with the labels
ASE attached (a single-point calculator) or stored under ``atoms.info`` / ``atoms.arrays``
keys, the MD step of ``info["step"]`` (mdband's exports) and the total charge and spin
multiplicity of ``info["charge"]`` / ``info["spin"]``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mdband.io.frames import DatasetError, Frame

ENERGY_KEYS = ("energy", "Energy", "REF_energy", "ref_energy", "dft_energy", "total_energy")
FORCES_KEYS = ("forces", "force", "REF_forces", "ref_forces", "dft_forces")
VIRIAL_KEYS = ("virial", "REF_virial", "ref_virial")
STRESS_KEYS = ("stress", "REF_stress", "ref_stress", "dft_stress")


def _first_key(mapping, keys, wanted: str | None):
    if wanted is not None:
        return mapping.get(wanted)
    for k in keys:
        if k in mapping:
            return mapping[k]
    return None


def _label(mapping, results: dict, keys, result_name: str, wanted: str | None):
    """Look up one label (energy, forces, virial ...) of a frame.

    An explicit key is looked up in ``mapping`` then in the calculator's results; without one,
    the calculator's result comes first, then the usual ``mapping`` keys.
    """
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
    *,
    labelled: bool = True,
) -> Frame:
    """Build a :class:`Frame` of an ``ase.Atoms``: energy and forces from its calculator or keys.

    With ``labelled`` (the default) a frame without energy or forces is a
    :class:`DatasetError`; without, it simply has none.
    """
    results = {}
    calc = getattr(atoms, "calc", None)
    if calc is not None and getattr(calc, "results", None):
        results = dict(calc.results)
    energy = _label(atoms.info, results, ENERGY_KEYS, "energy", energy_key)
    forces = _label(atoms.arrays, results, FORCES_KEYS, "forces", forces_key)
    if energy is None and labelled:
        raise DatasetError(f"{source}: no energy (looked for a calculator result and info keys)")
    if forces is None and labelled:
        raise DatasetError(f"{source}: no forces (looked for a calculator result and array keys)")
    n = len(atoms)
    forces = None if forces is None else np.asarray(forces, dtype=np.float64)
    if forces is not None and forces.shape != (n, 3):
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
        energy=None if energy is None else float(np.asarray(energy).reshape(())),
        forces=None if forces is None else forces.copy(),
        virial=virial,
        source=source,
        step=_step(atoms.info.get("step")),
        charge=atoms.info.get("charge"),
        spin=atoms.info.get("spin"),
    )


def _step(value) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def read_ase_db(path, **keys) -> list[Frame]:
    """Every row of the ASE database ``path`` (keys: see :func:`frame_from_atoms`)."""
    import ase.db

    path = Path(path)
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


def read_ase_file(path, fmt: str | None = None, **keys) -> list[Frame]:
    """Every image of ``path`` read by ``ase.io.read`` (format ``fmt`` or ASE's guess)."""
    import ase.io

    path = Path(path)
    try:
        images = ase.io.read(str(path), index=":", format=fmt)
    except Exception as exc:  # noqa: BLE001 - ase.io raises many types for a bad file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatasetError(f"cannot read {path} with ase.io: {first[:200]}") from None
    if not isinstance(images, list):
        images = [images]
    return [frame_from_atoms(a, f"{path}[{i}]", **keys) for i, a in enumerate(images)]
