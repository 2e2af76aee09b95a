"""Fixtures of the committee tests: small SeZM committees and frames (H, C, O)."""

import numpy as np
import pytest
import torch
from ase import Atoms

from mdband.testing.sezm import random_potential, small_config


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def sezm_models():
    """Three small float64 SeZM models (same config, different random weights)."""
    return [random_potential(small_config(), seed=s, gain=0.5, dtype="float64") for s in (1, 2, 3)]


def periodic_frame(seed=0) -> Atoms:
    rng = np.random.default_rng(seed)
    cell = np.array([[6.0, 0.0, 0.0], [0.8, 6.2, 0.0], [-0.5, 0.4, 5.8]])
    grid = np.stack(np.meshgrid(*[np.arange(2)] * 3, indexing="ij"), -1).reshape(-1, 3)
    frac = (grid + 0.5) / 2 + rng.normal(scale=0.03, size=grid.shape)
    numbers = rng.choice([1, 6, 8], size=len(frac))
    return Atoms(numbers=numbers, scaled_positions=frac, cell=cell, pbc=True)


def open_frame(seed=1) -> Atoms:
    rng = np.random.default_rng(seed)
    pos = np.array([[0, 0, 0], [1.4, 0, 0], [0, 1.5, 0], [0, 0, 1.3], [1.3, 1.2, 1.1]], float)
    pos += rng.normal(scale=0.05, size=pos.shape)
    return Atoms(numbers=[6, 8, 1, 1, 8], positions=pos, pbc=False)


FRAMES = {"periodic": periodic_frame, "open": open_frame}


@pytest.fixture(params=list(FRAMES))
def frame(request) -> Atoms:
    """A periodic triclinic cell of 8 atoms and an open 5-atom cluster."""
    return FRAMES[request.param]()
