"""Write the inputs of the NVT example: 108 argon atoms and a smooth Lennard-Jones model file.

Usage: python make_inputs.py [DIRECTORY]   (default: this script's directory)
"""

import sys
from pathlib import Path

import ase.io
from ase.build import bulk

from mdband.testing.lj import lennard_jones_potential


def main(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    atoms = bulk("Ar", "fcc", a=5.30, cubic=True).repeat(3)  # 108 atoms, 15.9 Å box
    atoms.rattle(0.02, seed=0)
    ase.io.write(directory / "argon.xyz", atoms)
    # argon-like LJ (epsilon 0.0104 eV, sigma 3.4 Å), switched smoothly to zero at 8.5 Å
    lennard_jones_potential(type_map=("Ar",)).save(directory / "lj-argon.mdband")
    print(f"wrote {directory / 'argon.xyz'} and {directory / 'lj-argon.mdband'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
