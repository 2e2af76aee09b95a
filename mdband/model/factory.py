"""Builds the SeZM energy model from a config dict (model kind "sezm", see :mod:`mdband.kinds`).

The rotation layout is decided here, once per model, by the capability gate: band iff every
rotation consumer the model selected reads the band (see :mod:`mdband.model.gate`).
"""

from __future__ import annotations

import torch

from mdband.config import SeZMConfig
from mdband.errors import ModelFileError
from mdband.model.dens import SeZMDensModel
from mdband.model.energy import SeZMEnergyModel
from mdband.model.gate import decide_model_layout
from mdband.settings import EngineSettings


def build_sezm(config: dict, state_dict: dict | None = None, options: dict | None = None):
    """Build the SeZM network of ``config`` (float64) with ``state_dict``'s weights.

    ``state_dict`` None: as initialised; ``options`` are :class:`~mdband.settings.EngineSettings`
    fields.
    """
    cfg = SeZMConfig.from_dict(config)
    settings = EngineSettings.resolve(**(options or {}))
    layout, reason = decide_model_layout(cfg, settings)
    cls = SeZMDensModel if cfg.direct_forces else SeZMEnergyModel
    model = cls(cfg, layout, reason, settings).double()  # load without rounding
    if state_dict is not None:
        sd = {k: v for k, v in state_dict.items()}
        try:
            model.load_state_dict(sd, strict=True)
        except RuntimeError as exc:
            msg = str(exc).splitlines()
            raise ModelFileError(
                "weights do not match the SeZM configuration: "
                + " ".join(m.strip() for m in msg[:3])[:400]
            ) from None
    return model


def initialise_weights(model: torch.nn.Module, seed: int = 0, gain: float = 1.0) -> None:
    """Initialise the parameters of ``model`` in place, from the random seed ``seed``.

    N(0, gain²/fan_in) for matrices (fan_in = size of the input axis), N(0, 0.1²) for vectors, ones
    for norm scales, zeros for the energy offsets.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("adam_scale"):
                p.fill_(1.0)
                continue
            if p.dim() >= 2:
                fan_in = p.shape[-2] if p.dim() == 2 else p.shape[-2]
                std = gain / max(fan_in, 1) ** 0.5
            else:
                std = 0.1
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype) * std)
