"""The model's one rotation-layout decision (band or dense), made at construction.

Each rotation consumer the model selected declares the layouts it reads; the model uses the band
iff every consumer accepts it and the request is not ``"dense"``. Nothing can force the band past
a consumer that refuses it. The decision and the blocking consumers are kept on the model
(``rotation_layout``, ``rotation_layout_reason``).
"""

from __future__ import annotations

from mdband.settings import EngineSettings
from mdband.so3.storage import RotationLayout

BOTH = frozenset({RotationLayout.BAND, RotationLayout.DENSE})


def model_consumers(cfg, settings: EngineSettings) -> list[tuple[str, frozenset]]:
    """(name, accepted layouts) of every rotation consumer the model selects."""
    out = []
    if cfg.use_gie:
        out.append(("gie.zonal", BOTH))
    for i, _ in enumerate(cfg.l_schedule):
        if cfg.mixing_layers > 0 or cfg.radial_so2_mode != "none":
            out.append((f"blocks.{i}.rotate_to_local", BOTH))
            out.append((f"blocks.{i}.rotate_back", BOTH))
    return out


def decide_model_layout(cfg, settings: EngineSettings) -> tuple[RotationLayout, str]:
    specs = model_consumers(cfg, settings)
    blocking = [n for n, acc in specs if RotationLayout.BAND not in acc]
    if settings.rotation_layout == "dense":
        return RotationLayout.DENSE, "dense requested"
    if blocking:
        return RotationLayout.DENSE, "consumers without band support: " + ", ".join(blocking)
    if not specs:
        return RotationLayout.BAND, "no rotation consumers"
    return RotationLayout.BAND, "every rotation consumer reads the band"
