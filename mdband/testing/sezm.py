"""A small SeZM configuration for tests: every consumer present, fast on a CPU."""

from __future__ import annotations

from mdband.config import SeZMConfig

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


def small_config(**overrides) -> dict:
    """The validated config dict of :data:`SMALL` with ``overrides`` applied."""
    return SeZMConfig.from_dict({**SMALL, **overrides}).to_dict()
