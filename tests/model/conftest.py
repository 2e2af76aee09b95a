import pytest

from mdband.config import SeZMConfig
from mdband.model.factory import random_potential

SMALL = dict(
    type_map=("H", "C", "O"),
    rcut=4.0,
    channels=8,
    n_radial=6,
    l_schedule=(2, 2),
    mixing_layers=2,
    n_focus=1,
    n_atten_head=1,
    radial_so2_mode="degree_channel",
    radial_so2_rank=1,
)


def small_config(**kw) -> dict:
    d = dict(SMALL)
    d.update(kw)
    return SeZMConfig.from_dict(d).to_dict()


@pytest.fixture
def small_potential():
    return random_potential(small_config(), seed=3, gain=0.5, dtype="float64")
