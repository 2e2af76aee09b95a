"""Generate the training data of the built-in model ``emt-cuni`` with ASE's EMT calculator.

Fcc Cu, Ni and random Cu-Ni alloys, labelled by ``EMT(asap_cutoff=True)`` (energy, forces,
stress), written as extxyz:

* rattled and strained crystals (Gaussian displacements of 0.02-0.12 Å, strains up to ±5 %,
  no pair closer than 1.9 Å);
* snapshots of short Langevin MD runs with EMT at 300-1500 K (32- and 108-atom cells, some
  under ±3 % volumetric strain);
* the same for cells with a vacancy and for (100) / (111) slabs with 8 Å of vacuum.

Usage::

    python make_data.py                 # writes emt-cuni.extxyz (+ emt-cuni-test.extxyz)
    python make_data.py --scale 0.2     # a small version for a quick try
"""

from __future__ import annotations

import argparse

import ase.io
import numpy as np
from ase import units
from ase.build import bulk, fcc100, fcc111
from ase.calculators.emt import EMT
from ase.calculators.singlepoint import SinglePointCalculator
from ase.md import velocitydistribution as _vd
from ase.md.langevin import Langevin

LATTICE = {"Cu": 3.61, "Ni": 3.52}  # experimental (Å); EMT gives 3.593 / 3.492, inside ±5 %
# ASE >= 3.29 renamed MaxwellBoltzmannDistribution to thermalize_momenta
thermalize = getattr(_vd, "thermalize_momenta", None) or _vd.MaxwellBoltzmannDistribution


def emt():
    return EMT(asap_cutoff=True)


def labelled(atoms):
    """A copy of ``atoms`` carrying its EMT energy, forces and (periodic cells) stress."""
    a = atoms.copy()
    a.calc = emt()
    res = {"energy": a.get_potential_energy(), "forces": a.get_forces()}
    if a.pbc.all():
        res["stress"] = a.get_stress()
    a.calc = SinglePointCalculator(a, **res)
    return a


def crystal(rng, x_ni: float, reps: int):
    """Cubic fcc cell (4·reps³ atoms) with a random Cu/Ni occupation, Vegard lattice."""
    a0 = (1 - x_ni) * LATTICE["Cu"] + x_ni * LATTICE["Ni"]
    atoms = bulk("Cu", "fcc", a=a0, cubic=True).repeat((reps, reps, reps))
    n = len(atoms)
    n_ni = int(round(x_ni * n))
    symbols = np.array(["Cu"] * n)
    symbols[rng.choice(n, n_ni, replace=False)] = "Ni"
    atoms.set_chemical_symbols(symbols.tolist())
    return atoms


def strain(rng, atoms, max_strain: float):
    eps = rng.uniform(-max_strain, max_strain, (3, 3))
    eps = 0.5 * (eps + eps.T)
    atoms.set_cell(atoms.cell.array @ (np.eye(3) + eps), scale_atoms=True)
    return atoms


def min_distance(atoms) -> float:
    d = atoms.get_all_distances(mic=True)
    return float(d[np.triu_indices(len(atoms), 1)].min())


def md_snapshots(rng, atoms, temperature: float, n_frames: int, every: int = 25):
    """Snapshots of a Langevin EMT run (4 fs steps; first 100 steps discarded)."""
    atoms = atoms.copy()
    atoms.calc = emt()
    thermalize(atoms, temperature_K=temperature, rng=rng)
    dyn = Langevin(
        atoms, 4 * units.fs, temperature_K=temperature, friction=0.05, rng=rng, fixcm=False
    )
    dyn.run(100)
    out = []
    for _ in range(n_frames):
        dyn.run(every)
        out.append(labelled(atoms))
    return out


def compositions(rng, k):
    base = [0.0, 1.0, 0.5, 0.25, 0.75]
    return [base[i % len(base)] if i < len(base) else float(rng.uniform(0, 1)) for i in range(k)]


def generate(seed: int, scale: float) -> list:
    rng = np.random.default_rng(seed)

    def count(n):
        return max(1, int(round(n * scale)))

    frames = []
    # rattled + strained crystals (no pair closer than 1.9 Å)
    for x in compositions(rng, count(40)):
        for reps in (2, 2, 3):
            while True:
                atoms = strain(rng, crystal(rng, x, reps), 0.05)
                atoms.positions += rng.normal(0, rng.uniform(0.02, 0.12), atoms.positions.shape)
                if min_distance(atoms) > 1.9:
                    break
            frames.append(labelled(atoms))
    # MD of bulk crystals, some strained
    for temp in (300, 600, 900, 1200, 1500):
        for x in compositions(rng, count(6)):
            atoms = crystal(rng, x, 2)
            if rng.random() < 0.5:
                atoms = strain(rng, atoms, 0.03)
            frames += md_snapshots(rng, atoms, temp, 4)
        for x in compositions(rng, count(2)):
            frames += md_snapshots(rng, crystal(rng, x, 3), temp, 3)
    # vacancies
    for temp in (300, 600, 900):
        for x in compositions(rng, count(6)):
            atoms = crystal(rng, x, 2)
            del atoms[int(rng.integers(len(atoms)))]
            frames += md_snapshots(rng, atoms, temp, 3)
    # surfaces (periodic in-plane, 8 Å vacuum on each side)
    for maker in (fcc100, fcc111):
        for x in compositions(rng, count(4)):
            a0 = (1 - x) * LATTICE["Cu"] + x * LATTICE["Ni"]
            slab = maker("Cu", (2, 2, 5), a=a0, vacuum=8.0, periodic=True)
            n_ni = int(round(x * len(slab)))
            sym = np.array(["Cu"] * len(slab))
            sym[rng.choice(len(slab), n_ni, replace=False)] = "Ni"
            slab.set_chemical_symbols(sym.tolist())
            slab.info.pop("adsorbate_info", None)
            frames += md_snapshots(rng, slab, float(rng.choice([300, 700])), 3)
    order = rng.permutation(len(frames))
    return [frames[i] for i in order]


def test_set(seed: int) -> list:
    """Independent frames for the model card: 256-atom cells from EMT MD at 300 and 900 K."""
    rng = np.random.default_rng(seed)
    frames = []
    for temp in (300, 900):
        for x in (0.0, 0.5, 1.0):
            frames += md_snapshots(rng, crystal(rng, x, 4), temp, 2, every=50)
    return frames


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", default="emt-cuni.extxyz")
    ap.add_argument("--test-output", default="emt-cuni-test.extxyz")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the number of frames")
    args = ap.parse_args()
    frames = generate(args.seed, args.scale)
    ase.io.write(args.output, frames, format="extxyz")
    n_atoms = sum(len(a) for a in frames)
    print(f"{args.output}: {len(frames)} frames, {n_atoms} atoms")
    if args.test_output:
        test = test_set(args.seed + 1)
        ase.io.write(args.test_output, test, format="extxyz")
        print(f"{args.test_output}: {len(test)} frames, {sum(len(a) for a in test)} atoms")


if __name__ == "__main__":
    main()
