"""Builds the SeZM energy model from a config dict (registered as model kind "sezm").

The rotation layout is decided here, once per model, by the capability gate: band iff every
rotation consumer the model selected reads the band (see :mod:`mdband.model.gate`).
"""

from __future__ import annotations

import torch

from mdband.config import SeZMConfig
from mdband.errors import ModelFileError
from mdband.loader import register_kind
from mdband.model.energy import SeZMEnergyModel
from mdband.model.gate import decide_model_layout


def build_sezm(config: dict, state_dict: dict | None = None, options: dict | None = None):
    cfg = SeZMConfig.from_dict(config)
    layout, reason = decide_model_layout(cfg, (options or {}).get("rotation_layout"))
    model = SeZMEnergyModel(cfg, layout, reason)
    if state_dict is not None:
        sd = {k: v for k, v in state_dict.items()}
        try:
            model.load_state_dict(sd, strict=True)
        except RuntimeError as exc:
            msg = str(exc).splitlines()
            raise ModelFileError(
                "weights do not match the SeZM configuration: " + " ".join(m.strip() for m in msg[:3])[:400]
            ) from None
    return model


@register_kind("sezm")
def _build(config: dict, state_dict: dict, options: dict) -> torch.nn.Module:
    return build_sezm(config, state_dict, options)
