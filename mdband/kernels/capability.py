"""The capability gate: one layout decision per model, from what every consumer declares.

Each consumer of the rotation storage declares a :class:`ConsumerSpec` built from the SAME
predicate that selects its implementation (the op module's ``backend(...)``: kernel present,
device, dtype, option values). :func:`decide_layout` picks BAND iff the request is not "dense"
and every consumer accepts BAND; otherwise DENSE everywhere (no mixing), with the blocking
consumers named. Requesting "band" never forces it past a consumer that refuses it.

mdband's ops (Triton kernels and torch references alike) read both layouts, so an op that
*applies* accepts BAND on every device; an op that does not apply (e.g. mmax ≠ 1, heads not
dividing channels) is replaced by the model's dense fallback and its spec accepts DENSE only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mdband.kernels import _common as cm
from mdband.kernels import aggregate as _aggregate
from mdband.kernels import band_producer as _band_producer
from mdband.kernels import force_assembly as _force_assembly
from mdband.kernels import rotate_mix as _rotate_mix
from mdband.kernels import zonal as _zonal
from mdband.so3.storage import RotationLayout

#: the layouts a model may request (``EngineSettings.rotation_layout``, which also reads
#: ``MDBAND_ROTATION_LAYOUT``: settings.py owns the environment)
REQUESTS = ("auto", "dense", "band")

BOTH = frozenset({RotationLayout.DENSE, RotationLayout.BAND})
DENSE_ONLY = frozenset({RotationLayout.DENSE})


@dataclass(frozen=True)
class ConsumerSpec:
    """What one consumer of the rotation storage reads, and why."""

    name: str
    accepts: frozenset[RotationLayout]
    reason: str

    def accepts_band(self) -> bool:
        """Tell whether this consumer accepts the BAND layout."""
        return RotationLayout.BAND in self.accepts


def triton_available(device) -> bool:
    """Triton importable and (device is CUDA or TRITON_INTERPRET=1)."""
    return cm.triton_available(device)


def _spec(name: str, selection: tuple[str | None, str]) -> ConsumerSpec:
    backend, why = selection
    if backend is None:
        return ConsumerSpec(name, DENSE_ONLY, f"op not applicable ({why}); dense fallback path")
    return ConsumerSpec(name, BOTH, f"{why}; reads band and dense")


def spec_for_band_producer(device, dtype, *, lmax: int, name: str = "band_producer"):
    """Return the consumer spec of the band producer.

    It builds BAND storage directly; DENSE comes from wigner.py.
    """
    return _spec(name, _band_producer.backend(device, dtype, lmax=lmax))


def spec_for_rotate_mix(
    device,
    dtype,
    *,
    lmax: int,
    mmax: int = 1,
    mixer: str = "degree_channel",
    rank: int = 1,
    channels: int | None = None,
    name: str = "rotate_mix",
) -> ConsumerSpec:
    """Return the consumer spec of the rotate-mix value path.

    ``mixer`` "degree_channel" with ``rank``, or "none".
    """
    sel = _rotate_mix.backend(
        device, dtype, lmax=lmax, mmax=mmax, mixer=mixer, rank=rank, channels=channels
    )
    return _spec(name, sel)


def spec_for_aggregate(
    device,
    dtype,
    *,
    lmax: int,
    channels: int,
    n_heads: int,
    mmax: int = 1,
    name: str = "aggregate",
) -> ConsumerSpec:
    """Return the consumer spec of the flash aggregation.

    ``n_heads`` = 0: plain envelope scatter.
    """
    sel = _aggregate.backend(
        device, dtype, lmax=lmax, channels=channels, n_heads=n_heads, mmax=mmax
    )
    return _spec(name, sel)


def spec_for_zonal_embed(
    device, dtype, *, lmax: int, channels: int | None = None, name: str = "zonal_embed"
) -> ConsumerSpec:
    """Return the consumer spec of the geometric initial embedding's zonal read."""
    return _spec(name, _zonal.backend(device, dtype, lmax=lmax, channels=channels))


def spec_for_force_assembly(device, dtype, *, name: str = "force_assembly") -> ConsumerSpec:
    """Force/virial assembly (reads no rotations: accepts either layout)."""
    return _spec(name, _force_assembly.backend(device, dtype))


def requested_layout(requested: str) -> str:
    """Return the requested layout, normalised: "auto", "dense" or "band" (ValueError otherwise).

    The request comes from ``EngineSettings.rotation_layout`` (the setting, or its environment
    override parsed by :mod:`mdband.settings`); this gate reads no environment.
    """
    value = str(requested).strip().lower()
    if value not in REQUESTS:
        raise ValueError(f"rotation layout must be one of {', '.join(REQUESTS)}; got {requested!r}")
    return value


def decide_layout(
    specs: Iterable[ConsumerSpec], requested: str = "auto"
) -> tuple[RotationLayout, list[str], str]:
    """(layout, blocking consumer names, reason) for one model.

    BAND iff ``requested`` != "dense" and every spec accepts BAND (and there is at least one
    consumer); "band" is a request, never a force.
    """
    req = requested_layout(requested)
    specs = list(specs)
    if req == "dense":
        return RotationLayout.DENSE, [], "dense requested"
    if not specs:
        return RotationLayout.DENSE, [], "no rotation consumer declared; dense by default"
    blocking = [s for s in specs if not s.accepts_band()]
    if blocking:
        names = [s.name for s in blocking]
        why = "; ".join(f"{s.name}: {s.reason}" for s in blocking)
        verb = "requested" if req == "band" else "not chosen"
        return RotationLayout.DENSE, names, f"band {verb} but refused by {why}"
    return RotationLayout.BAND, [], f"every consumer accepts band ({len(specs)} consumers)"
