"""Write ``finetune.extxyz``: small Cu-Ni cells labelled by ASE's EMT, to fine-tune copies of the
built-in model ``emt-cuni`` (each copy sees another random subset, so the copies disagree where
the data are thin: a committee for the model deviation).

Usage::

    python make_data.py [--frames 24] [--seed 5] [--output finetune.extxyz]
"""

from __future__ import annotations

import argparse

import ase.io
import numpy as np
from ase.build import bulk
from ase.calculators.emt import EMT
from ase.calculators.singlepoint import SinglePointCalculator

LATTICE = {"Cu": 3.593, "Ni": 3.492}  # EMT lattice constants (Å); Vegard's law between


def frame(rng) -> ase.Atoms:
    """A 32-atom random Cu-Ni cell, strained up to ±3 % and rattled by 0.05-0.15 Å, with its
    EMT energy, forces and stress."""
    x = float(rng.uniform(0, 1))
    atoms = bulk("Cu", "fcc", a=(1 - x) * LATTICE["Cu"] + x * LATTICE["Ni"], cubic=True)
    atoms = atoms.repeat(2)
    atoms.set_chemical_symbols(np.where(rng.random(len(atoms)) < x, "Ni", "Cu").tolist())
    eps = rng.uniform(-0.03, 0.03, (3, 3))
    atoms.set_cell(atoms.cell.array @ (np.eye(3) + 0.5 * (eps + eps.T)), scale_atoms=True)
    atoms.positions += rng.normal(0.0, rng.uniform(0.05, 0.15), atoms.positions.shape)
    atoms.calc = EMT(asap_cutoff=True)
    res = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces()}
    res["stress"] = atoms.get_stress()
    atoms.calc = SinglePointCalculator(atoms, **res)
    return atoms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=24)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--output", default="finetune.extxyz")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    frames = [frame(rng) for _ in range(args.frames)]
    ase.io.write(args.output, frames, format="extxyz")
    print(f"{args.output}: {len(frames)} frames of {len(frames[0])} atoms")


if __name__ == "__main__":
    main()
