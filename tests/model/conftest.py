import pytest

from mdband.testing.sezm import random_potential, small_config


@pytest.fixture
def small_potential():
    return random_potential(small_config(), seed=3, gain=0.5, dtype="float64")
