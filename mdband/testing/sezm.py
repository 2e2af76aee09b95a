"""SeZM for tests: a small configuration and potentials with random weights.

The configuration has every consumer present and is fast on a CPU.
"""

from __future__ import annotations

from mdband.config import SeZMConfig
from mdband.model.factory import build_sezm, initialise_weights
from mdband.potential import Potential

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
    """Return the validated config dict of :data:`SMALL` with ``overrides`` applied."""
    return SeZMConfig.from_dict({**SMALL, **overrides}).to_dict()


def random_potential(
    config: dict,
    seed: int = 0,
    gain: float = 1.0,
    device="cpu",
    dtype="float64",
    rotation_layout=None,
) -> Potential:
    """Build a SeZM :class:`~mdband.potential.Potential` of ``config`` with random weights.

    The weights come from :func:`~mdband.model.factory.initialise_weights`; for tests, examples
    and benchmarks.
    """
    model = build_sezm(config, None, {"rotation_layout": rotation_layout})
    initialise_weights(model, seed, gain)
    return sezm_potential(config, model, device, dtype)


def sezm_potential(config: dict, model, device="cpu", dtype="float64") -> Potential:
    """Wrap the SeZM network ``model`` built from ``config`` in a Potential.

    The result is a :class:`~mdband.potential.Potential` (random or given weights: metadata
    source "random").
    """
    cfg = SeZMConfig.from_dict(config)
    return Potential(
        model,
        kind="sezm",
        type_map=list(cfg.type_map),
        cutoff=cfg.rcut,
        config=cfg.to_dict(),
        metadata={"source": "random"},
        device=device,
        dtype=dtype,
    )
