"""The model's one rotation-layout decision (band or dense), made at construction.

Every rotation consumer the model selects declares the layouts it reads through a
:class:`~mdband.kernels.capability.ConsumerSpec`, built from the same predicate that selects its
implementation: the fused op when it applies to the options (``backend(...)`` is not None) and
kernels are not disabled, else mdband's torch path. The model uses the band iff the request is not
``"dense"`` and every consumer accepts it; nothing can force the band past a consumer that
refuses it. Band and dense never coexist: the one storage is built per evaluation in the chosen
layout and every consumer reads it.
"""

from __future__ import annotations

import torch

from mdband.kernels import aggregate as _agg
from mdband.kernels import band_producer as _prod
from mdband.kernels import capability as cap
from mdband.kernels import grid_product as _grid
from mdband.kernels import rotate_mix as _rm
from mdband.kernels import so2_stack as _stack
from mdband.kernels import zonal as _zonal
from mdband.settings import EngineSettings
from mdband.so3.storage import RotationLayout

TORCH_PATH = "mdband torch path (so3.storage reads band and dense)"


def _torch_spec(name: str) -> cap.ConsumerSpec:
    return cap.ConsumerSpec(name, cap.BOTH, TORCH_PATH)


def mixer_of(cfg) -> tuple[str, int]:
    """Return the radial degree mixer of ``cfg``: (``radial_so2_mode``, ``radial_so2_rank``)."""
    return cfg.radial_so2_mode, cfg.radial_so2_rank


def op_applies(op: str, cfg, lmax: int, settings: EngineSettings) -> bool:
    """Whether consumer ``op`` of a block of degree ``lmax`` runs as a fused op (any device)."""
    if settings.kernels == "torch":
        return False
    dev, dt = torch.device("cpu"), torch.float32
    if op == "rotate_mix":
        mode, rank = mixer_of(cfg)
        sel = _rm.backend(dev, dt, lmax=lmax, mixer=mode, rank=rank, channels=cfg.hidden_channels)
    elif op == "aggregate":
        sel = _agg.backend(
            dev, dt, lmax=lmax, channels=cfg.hidden_channels,
            n_heads=cfg.n_focus * cfg.n_atten_head if cfg.n_atten_head else 0,
        )  # fmt: skip
    elif op == "zonal_embed":
        sel = _zonal.backend(dev, dt, lmax=lmax, channels=cfg.channels)
    elif op == "band_producer":
        sel = _prod.backend(dev, dt, lmax=lmax)
    elif op == "so2_mix_layer":  # reads no rotations: a kernel choice, not a gate consumer
        sel = _stack.backend(dev, dt, lmax=lmax, channels=cfg.focus_channels)
    elif op == "grid_product":  # the grid nets' product: reads no rotations either
        sel = _grid.backend(dev, dt)
    else:
        raise KeyError(op)
    return sel[0] is not None


def model_consumers(cfg, settings: EngineSettings, device="cpu", dtype=torch.float32):
    """ConsumerSpecs of every rotation consumer the model selects (in forward order)."""
    specs = []
    if op_applies("band_producer", cfg, cfg.lmax, settings):
        specs.append(cap.spec_for_band_producer(device, dtype, lmax=cfg.lmax))
    if cfg.use_gie:
        if op_applies("zonal_embed", cfg, cfg.lmax, settings):
            specs.append(cap.spec_for_zonal_embed(
                device, dtype, lmax=cfg.lmax, channels=cfg.channels, name="gie.zonal_embed"
            ))  # fmt: skip
        else:
            specs.append(_torch_spec("gie.zonal"))
    for i, lb in enumerate(cfg.l_schedule):
        if not (cfg.mixing_layers > 0 or cfg.radial_so2_mode != "none"):
            continue  # radial-only messages: this block reads no rotations
        name = f"blocks.{i}"
        if op_applies("rotate_mix", cfg, lb, settings):
            mode, rank = mixer_of(cfg)
            specs.append(cap.spec_for_rotate_mix(
                device, dtype, lmax=lb, mixer=mode, rank=rank, channels=cfg.hidden_channels,
                name=f"{name}.rotate_mix",
            ))  # fmt: skip
        else:
            specs.append(_torch_spec(f"{name}.rotate_to_local"))
        if op_applies("aggregate", cfg, lb, settings):
            heads = cfg.n_focus * cfg.n_atten_head if cfg.n_atten_head else 0
            specs.append(cap.spec_for_aggregate(
                device, dtype, lmax=lb, channels=cfg.hidden_channels, n_heads=heads,
                name=f"{name}.aggregate",
            ))  # fmt: skip
        else:
            specs.append(_torch_spec(f"{name}.rotate_back"))
    return specs


def decide_model_layout(cfg, settings: EngineSettings, specs=None) -> tuple[RotationLayout, str]:
    """Decide the model's rotation layout, and say why, from its rotation consumers.

    ``specs``: the consumers (default: :func:`model_consumers` of ``cfg``); with none the
    layout is the band, else :func:`mdband.kernels.capability.decide_layout` chooses under
    ``settings.rotation_layout``. The result is (layout, reason).
    """
    specs = model_consumers(cfg, settings) if specs is None else specs
    if not specs:
        return RotationLayout.BAND, "no rotation consumers"
    layout, blocking, reason = cap.decide_layout(specs, settings.rotation_layout)
    return layout, reason
