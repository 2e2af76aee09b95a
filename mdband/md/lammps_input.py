"""The LAMMPS input of ``--engine lammps``: box, species, pair style, fixes (``units metal``).

Numbers are written with :func:`num` so LAMMPS reads back exactly the float mdband holds.
"""

from __future__ import annotations

import re

import numpy as np
from ase.data import chemical_symbols

from mdband.md.config import RunConfig

BAR_PER_GPA = 1.0e4
PRESSURE_KEYS = ("pxx", "pyy", "pzz", "pxy", "pxz", "pyz")
DIVERGED = re.compile(r"lost atoms|\bnan\b|\binf\b|out of range|non-numeric|too many", re.I)


def lammps_cell(cell: np.ndarray, rotation: np.ndarray | None) -> np.ndarray:
    """Return ``cell`` rotated by ``rotation`` into LAMMPS' form (a copy when None).

    The components that LAMMPS' form has zero (a ∥ x, b in the xy plane) are set to exactly 0.
    """
    if rotation is None:
        return np.array(cell, dtype=np.float64)
    out = cell @ rotation
    out[0, 1:] = 0.0
    out[1, 2] = 0.0
    return out


def species_types(numbers: np.ndarray, masses: np.ndarray):
    """LAMMPS types: one per (element, mass); returns (types 1.., symbols, masses per type)."""
    keys = sorted({(int(z), float(m)) for z, m in zip(numbers, masses)})
    index = {k: i + 1 for i, k in enumerate(keys)}
    types = np.array([index[(int(z), float(m))] for z, m in zip(numbers, masses)], dtype=np.int32)
    return types, [chemical_symbols[z] for z, _ in keys], [m for _, m in keys]


def fix_seed(seed: int, step: int, what: int) -> int:
    """Return a LAMMPS random seed (1 ≤ s < 8e8, room for + rank) for a fix started at ``step``."""
    state = np.random.SeedSequence([int(seed), int(step), what]).generate_state(1)[0]
    return 1 + int(state) % 800_000_000


def box_commands(cell: np.ndarray, c: RunConfig, type_masses: list[float]) -> list[str]:
    """``region``, ``create_box`` and ``mass`` lines for a box of LAMMPS form ``cell``."""
    (lx, _, _), (xy, ly, _), (xz, yz, lz) = cell
    triclinic = xy != 0 or xz != 0 or yz != 0
    if c.ensemble == "npt-mtk" and c.barostat == "full":
        triclinic = True
    bounds = f"0 {num(lx)} 0 {num(ly)} 0 {num(lz)}"
    tilts = f"{num(xy)} {num(xz)} {num(yz)}"
    region = f"prism {bounds} {tilts}" if triclinic else f"block {bounds}"
    lines = ["boundary p p p", f"region mdband_box {region}"]
    lines.append(f"create_box {len(type_masses)} mdband_box")
    lines += [f"mass {t} {num(m)}" for t, m in enumerate(type_masses, start=1)]
    return lines


def fix_commands(c: RunConfig, step: int) -> list[str]:
    """Return the integrator and thermostat fixes of ``c.ensemble`` for a run from ``step``."""
    t = num(c.temperature)
    assert c.tdamp is not None and c.pdamp is not None  # a resolved config (RunConfig.resolved)
    tdamp, pdamp = c.tdamp / 1000.0, c.pdamp / 1000.0
    seed = c.seed if c.seed is not None else 0
    nhc = f"tchain {c.tchain} tloop {c.tloop}"
    if c.ensemble == "nve":
        return ["fix mdband_integrate all nve"]
    if c.ensemble == "nvt-langevin":
        damp = 1.0 / c.friction
        return [
            "fix mdband_integrate all nve",
            f"fix mdband_bath all langevin {t} {t} {num(damp)} {fix_seed(seed, step, 1)}",
        ]
    if c.ensemble == "nvt-bussi":
        return [
            "fix mdband_integrate all nve",
            f"fix mdband_bath all temp/csvr {t} {t} {num(tdamp)} {fix_seed(seed, step, 2)}",
        ]
    if c.ensemble == "nvt-nhc":
        return [f"fix mdband_integrate all nvt temp {t} {t} {num(tdamp)} {nhc}"]
    p = num(c.pressure * BAR_PER_GPA)
    style = "iso" if c.barostat == "isotropic" else "tri"
    return [
        f"fix mdband_integrate all npt temp {t} {t} {num(tdamp)} {style} {p} {p} "
        f"{num(pdamp)} {nhc} pchain {c.pchain} ploop {c.ploop}"
    ]


def num(value) -> str:
    """Format a float as LAMMPS reads it back exactly (shortest round-trip repr)."""
    return repr(float(value))


def lammps_message(exc: BaseException) -> str:
    """LAMMPS' error text without the ``ERROR on proc N:`` prefix and the source location."""
    text = " ".join(str(exc).split())
    text = re.sub(r"^ERROR(?: on proc \d+)?:\s*", "", text)
    text = re.sub(r"\s*\((?:src/)+[^()]*\.(?:cpp|h):\d+\).*$", "", text)
    return text or type(exc).__name__
