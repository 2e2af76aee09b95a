"""LAMMPS data files (``.lmp``, ``.data``; metal units) as :class:`ase.Atoms` with elements.

A data file carries type numbers, not elements. They are mapped, in this order, by

1. ``type_map`` — deepmd-kit's term: LAMMPS type k is element ``type_map[k-1]`` (what
   ``pair_coeff * * O H`` says in LAMMPS);
2. an ``Atom Type Labels`` section whose labels are all element symbols;
3. the ``Masses`` section, when every mass is within :data:`MASS_TOLERANCE` of exactly one
   element's standard atomic mass;
4. ``default_type_map`` (the model's type map: deepmd-kit's order for a ``pair_coeff * *``
   without names), only when the file has neither labels nor masses.

Anything else is a :class:`~mdband.errors.StructureError` that asks for ``type_map``. ASE reads
the atoms (any atom style it knows, velocities included); dpdata's reader knows fewer styles
and neither masses nor velocities, so it is not used here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

import numpy as np
from ase import Atoms
from ase.data import atomic_masses, atomic_numbers, chemical_symbols

from mdband.errors import StructureError

LAMMPS_FORMAT = "lammps-data"
MASS_TOLERANCE = 0.1  # u: a type's mass names an element when exactly one is this close
# atom styles ase.io.lammpsdata reads, and the column counts (without image flags) of each
_STYLE_COLUMNS = {"atomic": 5, "charge": 6, "molecular": 6, "bond": 6, "angle": 6, "full": 7}


def parse_type_map(text) -> list[str]:
    """``"O,H"``, ``"O H"`` or ``["O", "H"]`` as a list of element symbols (ValueError if bad)."""
    items = text if isinstance(text, (list, tuple)) else re.split(r"[,\s]+", str(text).strip())
    symbols = [str(s).strip() for s in items if str(s).strip()]
    if not symbols:
        raise ValueError("type_map is empty; give elements like O,H")
    unknown = [s for s in symbols if s not in atomic_numbers or s == "X"]
    if unknown:
        raise ValueError(f"type_map names unknown element(s) {', '.join(unknown)}")
    return symbols


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:160] if text else type(exc).__name__


# ---------------------------------------------------------------------------- LAMMPS data
def _scan_lammps(path: Path) -> dict:
    """Header facts ASE does not expose: type count, Masses, labels, the Atoms style."""
    info: dict = {"ntypes": None, "masses": {}, "labels": {}, "style": None, "columns": None}
    section = None
    with open(path, errors="replace") as fh:
        next(fh, None)  # the first line is a comment
        for raw in fh:
            comment = raw.split("#", 1)[1].strip() if "#" in raw else ""
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.match(r"(\d+)\s+atom\s+types\b", line)
            if m and section is None:
                info["ntypes"] = int(m.group(1))
                continue
            if re.fullmatch(r"[A-Z][A-Za-z0-9 ]*[a-z]", line):  # a section name
                section = " ".join(line.split())
                if section == "Atoms":
                    info["style"] = comment or None
                continue
            fields = line.split()
            if section == "Masses" and len(fields) >= 2 and fields[0].isdigit():
                info["masses"][int(fields[0])] = float(fields[1])
            elif section == "Atom Type Labels" and len(fields) >= 2 and fields[0].isdigit():
                info["labels"][int(fields[0])] = fields[1]
            elif section == "Atoms":
                info["columns"] = len(fields)
                break  # everything needed comes before the first atom line
    return info


def _atom_style(path: Path, info: dict) -> str:
    """Return the style named after ``Atoms #``, else the one the column count allows."""
    style, columns = info["style"], info["columns"]
    if style in _STYLE_COLUMNS:
        return style
    guesses = [s for s, n in _STYLE_COLUMNS.items() if columns in (n, n + 3)]
    if len(guesses) == 1:
        return guesses[0]
    raise StructureError(
        f"cannot tell the atom style of {path} ({columns} columns per atom"
        + (f", 'Atoms # {style}' is not a style ASE reads" if style else "")
        + "); write it after the section name, e.g. 'Atoms # atomic'"
    )


def _element_of_mass(mass: float) -> int | None:
    close = np.flatnonzero(np.abs(atomic_masses[1:] - mass) <= MASS_TOLERANCE) + 1
    return int(close[0]) if len(close) == 1 else None


def _z_of_type(path: Path, info: dict, used: list[int], type_map, default_type_map):
    """Atomic number of every LAMMPS type, and a note saying where it came from."""
    ntypes = info["ntypes"] or max(used)
    if type_map is not None:
        symbols = parse_type_map(type_map)
        if len(symbols) != ntypes:
            raise StructureError(
                f"type_map lists {len(symbols)} element(s) but {path} has {ntypes} atom types"
            )
        return {t: atomic_numbers[s] for t, s in enumerate(symbols, 1)}, "type map"
    labels = info["labels"]
    if labels and all(labels.get(t) in atomic_numbers for t in range(1, ntypes + 1)):
        return {t: atomic_numbers[labels[t]] for t in range(1, ntypes + 1)}, "Atom Type Labels"
    masses = info["masses"]
    if masses:
        z = {t: _element_of_mass(m) for t, m in masses.items()}
        bad = [t for t in sorted(z) if z[t] is None]
        if bad:
            raise StructureError(
                f"cannot tell the element of LAMMPS type {bad[0]} of {path} (mass "
                f"{masses[bad[0]]}); give the elements with --type-map, e.g. --type-map O,H"
            )
        return z, "Masses"
    if default_type_map is not None and len(default_type_map) >= ntypes:
        symbols = list(default_type_map)[:ntypes]
        return {t: atomic_numbers[s] for t, s in enumerate(symbols, 1)}, "model type map"
    raise StructureError(
        f"{path} has no Masses section to tell its {ntypes} atom type(s) apart; "
        "give the elements with --type-map, e.g. --type-map O,H"
    )


def read_lammps_data(
    path, frame: int = -1, type_map=None, default_type_map=None, notes=None
) -> Atoms:
    """Read the structure of LAMMPS data file ``path``.

    See the module docstring for its elements.
    """
    path = Path(path)
    import ase.io

    if frame not in (0, -1):
        raise StructureError(f"a LAMMPS data file holds one structure; frame {frame} is not 0")
    try:
        info = _scan_lammps(path)
    except (OSError, ValueError) as exc:
        raise StructureError(f"cannot read LAMMPS data file {path}: {_first_line(exc)}") from None
    if info["columns"] is None:
        raise StructureError(f"LAMMPS data file {path} has no Atoms section")
    style = _atom_style(path, info)
    lacking = [t for t in range(1, (info["ntypes"] or 0) + 1) if t not in info["masses"]]
    if info["masses"] and lacking:
        raise StructureError(f"the Masses section of {path} has no mass for type {lacking[0]}")
    try:
        # one image (the default index): an Atoms, not a list
        raw = cast(Atoms, ase.io.read(path, format=LAMMPS_FORMAT, atom_style=style, units="metal"))
    except Exception as exc:  # noqa: BLE001 - ASE's reader raises many kinds
        raise StructureError(f"cannot read LAMMPS data file {path}: {_first_line(exc)}") from None
    types = np.asarray(raw.arrays["type"], dtype=np.int64)
    z, source = _z_of_type(path, info, sorted(set(types.tolist())), type_map, default_type_map)
    missing = sorted(set(types.tolist()) - set(z))
    if missing:
        raise StructureError(f"{path} uses atom type {missing[0]} beyond its declared types")
    atoms = Atoms(
        numbers=[z[t] for t in types],
        positions=raw.get_positions(),
        cell=raw.get_cell(),
        pbc=True,
        masses=raw.get_masses() if info["masses"] else None,
    )
    if raw.has("momenta"):
        atoms.set_velocities(raw.get_velocities())
    if notes is not None:
        pairs = ", ".join(f"{t}={chemical_symbols[z[t]]}" for t in sorted(z))
        notes.append(f"LAMMPS types: {pairs} (from the {source})")
    return atoms
