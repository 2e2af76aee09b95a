"""Fixtures of the MD tests: a small argon crystal and the smooth LJ potential."""

import ase.io
import pytest
import torch
from ase.build import bulk

from mdband.testing.lj import lennard_jones_potential


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: fast on a shared 2-core machine and the same numbers every run."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def lj():
    return lennard_jones_potential()


@pytest.fixture
def argon_xyz(tmp_path):
    """32 argon atoms (fcc, 2x2x2 cubic cells), slightly rattled, as extended XYZ."""
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=1)
    path = tmp_path / "ar.xyz"
    ase.io.write(path, atoms)
    return path


@pytest.fixture
def lj_file(tmp_path, lj):
    path = tmp_path / "lj.mdband"
    lj.save(path)
    return path
