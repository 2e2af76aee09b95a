"""The structures the benchmarks evaluate, built the same way in every script.

* :func:`diamond`: rattled cubic diamond, 8·n³ carbon atoms (the GPU and deepmd-kit comparisons);
* :func:`moved_copies`: MD-like frames, slightly moved copies of one structure;
* :func:`water_frames`: periodic water boxes at about 1 g/cm³ of random sizes (batched
  evaluation), and :func:`write_npy_systems` to hand them to ``dp test`` / ``mdband test``;
* :func:`argon`: an fcc argon crystal with small random displacements (LAMMPS on the CPU);
* :func:`npy_frame`: a frame of a deepmd-kit npy system (the shared water data).

:func:`evaluate_args` is ``Potential.evaluate``'s positional arguments for an ``ase.Atoms``.
ASE is imported where it is used, so that the harness loads in any interpreter.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: cubic diamond's lattice constant (Å)
DIAMOND_A = 3.567
#: Å of random displacement of :func:`diamond` (its ``rattle``)
DIAMOND_RATTLE = 0.03
OH = 0.9572  # Å
HOH = np.deg2rad(104.52)
VOLUME_PER_MOLECULE = 29.9  # Å³ per water molecule at 1 g/cm³
MIN_APART = 1.6  # Å between atoms of different molecules (an H-bond's H…O is ~1.8)


def diamond(n: int, seed: int = 0, rattle: float = DIAMOND_RATTLE):
    """Cubic diamond, ``n``×``n``×``n`` conventional cells (8·n³ atoms), every atom moved by
    ``ase.Atoms.rattle(rattle, seed)``."""
    from ase.build import bulk

    atoms = bulk("C", "diamond", a=DIAMOND_A, cubic=True) * (n, n, n)
    atoms.rattle(rattle, seed=seed)
    return atoms


def evaluate_args(atoms) -> tuple:
    """``(positions, cell, pbc, species)`` of ``atoms`` for ``Potential.evaluate`` (``pbc`` one
    bool when every axis agrees)."""
    pbc = bool(atoms.pbc[0]) if len(set(atoms.pbc.tolist())) == 1 else atoms.pbc.tolist()
    return atoms.positions, atoms.cell.array, pbc, atoms.get_chemical_symbols()


def moved_copies(atoms, count: int, scale: float = 0.005, seed: int = 1) -> list:
    """``count`` copies of ``atoms``, each moved by independent N(0, ``scale``²) Å steps."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        a = atoms.copy()
        a.positions += rng.normal(scale=scale, size=a.positions.shape)
        out.append(a)
    return out


def water_box(n_molecules: int, rng: np.random.Generator):
    """``(positions, cell, species)`` of ``n_molecules`` waters in a periodic cube at ~1 g/cm³:
    molecules placed one by one at random (random orientations), each kept when its atoms are
    at least :data:`MIN_APART` from every other molecule's (minimum image)."""
    length = (n_molecules * VOLUME_PER_MOLECULE) ** (1.0 / 3.0)
    local = np.array([[0.0, 0.0, 0.0], [OH, 0.0, 0.0], [OH * np.cos(HOH), OH * np.sin(HOH), 0.0]])
    placed = np.zeros((0, 3))
    while len(placed) < 3 * n_molecules:
        q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        mol = rng.uniform(0.0, length, 3) + local @ q.T
        d = mol[:, None, :] - placed[None, :, :]
        d -= length * np.round(d / length)
        if len(placed) == 0 or np.sqrt((d * d).sum(-1)).min() >= MIN_APART:
            placed = np.concatenate([placed, mol])
    return placed, np.eye(3) * length, ["O", "H", "H"] * n_molecules


def water_frames(n_frames: int, min_atoms: int, max_atoms: int, seed: int = 7) -> list:
    """``n_frames`` :func:`water_box` frames of sizes drawn uniformly between ``min_atoms`` and
    ``max_atoms`` (whole molecules: multiples of 3)."""
    rng = np.random.default_rng(seed)
    lo, hi = max(1, min_atoms // 3), max(1, max_atoms // 3)
    return [water_box(int(m), rng) for m in rng.integers(lo, hi + 1, n_frames)]


def write_npy_systems(frames, root: Path, type_map) -> list[str]:
    """``frames`` of ``(positions, cell, species)`` as deepmd-kit npy systems under ``root``,
    one per atom count (zero energies and forces: inputs, not labels); their paths."""
    by_size: dict[int, list] = {}
    for pos, cell, species in frames:
        by_size.setdefault(len(species), []).append((pos, cell, species))
    out = []
    for n, group in sorted(by_size.items()):
        d = Path(root) / f"n{n:04d}"
        (d / "set.000").mkdir(parents=True)
        types = [list(type_map).index(s) for s in group[0][2]]
        (d / "type.raw").write_text("\n".join(map(str, types)) + "\n")
        (d / "type_map.raw").write_text("\n".join(type_map) + "\n")
        np.save(d / "set.000" / "coord.npy", np.stack([g[0].reshape(-1) for g in group]))
        np.save(d / "set.000" / "box.npy", np.stack([g[1].reshape(-1) for g in group]))
        np.save(d / "set.000" / "energy.npy", np.zeros(len(group)))
        np.save(d / "set.000" / "force.npy", np.zeros((len(group), 3 * n)))
        out.append(str(d))
    return out


def npy_frame(system: Path, index: int = 0):
    """``(positions, cell, species)`` of frame ``index`` of the deepmd-kit npy system
    ``system`` (its ``set.000``)."""
    system = Path(system)
    coord = np.load(system / "set.000" / "coord.npy")[index].reshape(-1, 3)
    box = np.load(system / "set.000" / "box.npy")[index].reshape(3, 3)
    type_map = (system / "type_map.raw").read_text().split()
    types = np.loadtxt(system / "type.raw", dtype=int).reshape(-1)
    return coord, box, [type_map[t] for t in types]


def argon(cells: int, seed: int = 0, a: float = 5.26, displacement: float = 0.05):
    """fcc argon, ``cells``³ cubic cells (4·cells³ atoms, lattice constant ``a`` Å), every atom
    moved by N(0, ``displacement``²) Å and wrapped into the cell."""
    from ase.build import bulk

    atoms = bulk("Ar", "fcc", a=a, cubic=True).repeat(cells)
    rng = np.random.default_rng(seed)
    length = atoms.cell.array.diagonal()
    moved = atoms.positions + rng.normal(scale=displacement, size=atoms.positions.shape)
    atoms.positions = moved % length
    return atoms
