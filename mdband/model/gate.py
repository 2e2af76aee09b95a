"""The model's one rotation-layout decision (band or dense), made at construction.

Each rotation consumer the model selected declares the layouts it reads; the model uses the band
iff every consumer accepts it and the request is not ``"dense"``. Nothing can force the band past
a consumer that refuses it. The decision and the blocking consumers are kept on the model
(``rotation_layout``, ``rotation_layout_reason``).
"""

from __future__ import annotations

import os

from mdband.so3.storage import RotationLayout

ENV_VAR = "MDBAND_ROTATION_LAYOUT"
_VALID = ("auto", "band", "dense")


def requested_layout(explicit: str | None) -> str:
    """The requested layout: the explicit argument, else ``$MDBAND_ROTATION_LAYOUT``, else auto."""
    value = explicit if explicit is not None else os.environ.get(ENV_VAR, "auto")
    value = str(value).strip().lower() or "auto"
    if value not in _VALID:
        src = "rotation_layout" if explicit is not None else ENV_VAR
        raise ValueError(f"{src}={value!r} is not one of {', '.join(_VALID)}")
    return value


def model_consumers(cfg) -> list[tuple[str, frozenset]]:
    """(name, accepted layouts) of every rotation consumer the model selects on this host."""
    both = frozenset({RotationLayout.BAND, RotationLayout.DENSE})
    out = []
    if cfg.use_gie:
        out.append(("gie.zonal", both))
    for i, _ in enumerate(cfg.l_schedule):
        if cfg.mixing_layers > 0 or cfg.radial_so2_mode != "none":
            out.append((f"blocks.{i}.rotate_to_local", both))
            out.append((f"blocks.{i}.rotate_back", both))
    return out


def decide_model_layout(cfg, explicit: str | None) -> tuple[RotationLayout, str]:
    req = requested_layout(explicit)
    specs = model_consumers(cfg)
    blocking = [n for n, acc in specs if RotationLayout.BAND not in acc]
    if req == "dense":
        return RotationLayout.DENSE, "dense requested"
    if blocking:
        return RotationLayout.DENSE, "consumers without band support: " + ", ".join(blocking)
    if not specs:
        return RotationLayout.BAND, "no rotation consumers"
    return RotationLayout.BAND, "every rotation consumer reads the band"
