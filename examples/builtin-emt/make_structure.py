"""Write ``cuni-2048.xyz``: a 2048-atom random Cu50Ni50 fcc crystal (8x8x8 cubic cells).

Usage::

    python make_structure.py [--reps 8] [--x-ni 0.5] [--output cuni-2048.xyz]
"""

from __future__ import annotations

import argparse

import ase.io
import numpy as np
from ase.build import bulk

LATTICE = {"Cu": 3.593, "Ni": 3.492}  # EMT lattice constants (Å); Vegard's law between


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=8, help="cubic cells along each axis")
    ap.add_argument("--x-ni", type=float, default=0.5, help="Ni fraction")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--output", default="cuni-2048.xyz")
    args = ap.parse_args()
    a0 = (1 - args.x_ni) * LATTICE["Cu"] + args.x_ni * LATTICE["Ni"]
    atoms = bulk("Cu", "fcc", a=a0, cubic=True).repeat((args.reps,) * 3)
    rng = np.random.default_rng(args.seed)
    symbols = np.array(["Cu"] * len(atoms))
    n_ni = int(round(args.x_ni * len(atoms)))
    symbols[rng.choice(len(atoms), n_ni, replace=False)] = "Ni"
    atoms.set_chemical_symbols(symbols.tolist())
    ase.io.write(args.output, atoms, format="extxyz")
    print(f"{args.output}: {len(atoms)} atoms, a = {a0:.4f} Å, {n_ni} Ni")


if __name__ == "__main__":
    main()
