"""Fixtures of the fitting tests: tiny EMT copper datasets and the shared water data."""

from pathlib import Path

import ase.io
import numpy as np
import pytest
import torch
from ase.build import bulk
from ase.calculators.emt import EMT
from ase.calculators.singlepoint import SinglePointCalculator

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
WATER_CKPT = SHARED / "data" / "dpa4-water-smoke" / "pretrained.pt"
WATER_DATA = SHARED / "data" / "deepmd-water"

# a tiny, fast architecture for tests (about 10k parameters)
TINY = {"channels": 8, "lmax": 1, "n_radial": 6, "rcut": 4.0}


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def emt_frames(n: int, seed: int = 0, symbols=("Cu",), reps=(2, 1, 1)) -> list:
    """``n`` rattled, strained fcc cells labelled by EMT (energy, forces, stress)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        atoms = bulk("Cu", "fcc", a=3.61 * rng.uniform(0.97, 1.03), cubic=True).repeat(reps)
        atoms.set_chemical_symbols(rng.choice(list(symbols), len(atoms)).tolist())
        atoms.positions += rng.normal(0.0, 0.08, atoms.positions.shape)
        atoms.calc = EMT()
        res = {
            "energy": atoms.get_potential_energy(),
            "forces": atoms.get_forces(),
            "stress": atoms.get_stress(),
        }
        atoms.calc = SinglePointCalculator(atoms, **res)
        out.append(atoms)
    return out


@pytest.fixture
def cu_xyz(tmp_path):
    path = tmp_path / "cu.extxyz"
    ase.io.write(path, emt_frames(16, seed=1), format="extxyz")
    return path
