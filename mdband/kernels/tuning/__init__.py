"""The kernels' tuning table: which kernels each op runs and how it launches them.

One frozen record per op; :class:`Tuning` holds one of each. The defaults are what the GPU
measurements of ``BENCHMARKS.md`` chose (each record names the dated section that measured it;
the figures live there, not here). The ops read the table at each launch (at trace time when
compiled) through :func:`current`; it changes only inside :func:`override`, which checks every
value, for tests and benchmark sweeps::

    from mdband.kernels import tuning

    with tuning.override(aggregate={"bwd": "walk"}, rotate_mix={"edge_warps": 2}):
        ...  # every op launched here reads the changed records

``tests/kernels/test_launch_pins.py`` pins the launches the defaults select (kernels, grids,
warps, stages and constexprs per dtype, device and shape).

Modules: :mod:`.launches` (the launch records), :mod:`.ops` (one record per op) and
:mod:`._checks` (the checks of their fields); this package holds the table (:class:`Tuning`,
:data:`DEFAULTS`), :func:`current` and :func:`override`, and names every record.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from mdband.kernels.tuning.launches import (
    DOT_PRECISIONS,
    SPLIT_MODES,
    BlockLaunch,
    DotLaunch,
    GateLaunch,
    GridLaunch,
    LinearLaunch,
    StackShape,
)
from mdband.kernels.tuning.ops import (
    AggregateTuning,
    BandProducerTuning,
    CellPairsTuning,
    EdgeMlpTuning,
    GridProductTuning,
    RotateMixTuning,
    So2StackTuning,
    TakeRowsTuning,
    ZonalTuning,
)

__all__ = [
    "DEFAULTS",
    "DOT_PRECISIONS",
    "SPLIT_MODES",
    "AggregateTuning",
    "BandProducerTuning",
    "BlockLaunch",
    "CellPairsTuning",
    "DotLaunch",
    "EdgeMlpTuning",
    "GateLaunch",
    "GridLaunch",
    "GridProductTuning",
    "LinearLaunch",
    "RotateMixTuning",
    "So2StackTuning",
    "StackShape",
    "TakeRowsTuning",
    "Tuning",
    "ZonalTuning",
    "current",
    "override",
]


@dataclass(frozen=True)
class Tuning:
    """The whole table: one record per op."""

    aggregate: AggregateTuning = field(default_factory=AggregateTuning)
    rotate_mix: RotateMixTuning = field(default_factory=RotateMixTuning)
    zonal: ZonalTuning = field(default_factory=ZonalTuning)
    so2_stack: So2StackTuning = field(default_factory=So2StackTuning)
    grid_product: GridProductTuning = field(default_factory=GridProductTuning)
    seed_mlp: EdgeMlpTuning = field(default_factory=EdgeMlpTuning)
    radial_mlp: EdgeMlpTuning = field(default_factory=lambda: EdgeMlpTuning(max_width=128))
    cell_pairs: CellPairsTuning = field(default_factory=CellPairsTuning)
    #: segment_outer (BENCHMARKS.md "2026-12-03 (third session)")
    segment_outer: BlockLaunch = field(default_factory=lambda: BlockLaunch(32, 32, warps=4))
    #: edge_dot (BENCHMARKS.md "2026-12-01 (afternoon)"): Triton's default warps
    edge_dot: BlockLaunch = field(default_factory=lambda: BlockLaunch(64, 64, warps=None))
    #: radial_basis (BENCHMARKS.md "2026-12-04")
    radial_basis: BlockLaunch = field(default_factory=lambda: BlockLaunch(128, 128, warps=4))
    take_rows: TakeRowsTuning = field(default_factory=TakeRowsTuning)
    band_producer: BandProducerTuning = field(default_factory=BandProducerTuning)


DEFAULTS = Tuning()
_CURRENT = [DEFAULTS]  # process-wide (autograd runs CUDA backwards on threads of its own)


def current() -> Tuning:
    """Return the table in force (the defaults outside :func:`override`)."""
    return _CURRENT[0]


def _changed(table: Tuning, op: str, change) -> Any:
    if op not in {f.name for f in dataclasses.fields(Tuning)}:
        ops = ", ".join(f.name for f in dataclasses.fields(Tuning))
        raise ValueError(f"tuning.override: no op {op!r} (ops: {ops})")
    old = getattr(table, op)
    if isinstance(change, type(old)):
        return change
    if not isinstance(change, Mapping):
        raise ValueError(
            f"tuning.override: {op} takes a {type(old).__name__} or a mapping of its fields, "
            f"got {change!r}"
        )
    names = {f.name for f in dataclasses.fields(old)}
    unknown = sorted(set(change) - names)
    if unknown:
        raise ValueError(
            f"tuning.override: {type(old).__name__} has no field {unknown} "
            f"(fields: {', '.join(sorted(names))})"
        )
    return dataclasses.replace(old, **change)


@contextlib.contextmanager
def override(**changes) -> Iterator[Tuning]:
    """Put the table with ``changes`` in force inside the block (nested blocks stack).

    Each keyword is an op of :class:`Tuning`; its value a whole record of that op or a mapping
    of the fields to change. Every value is checked before anything changes (ValueError
    naming the op and the field). Yields the table in force.
    """
    table = current()
    new = dataclasses.replace(table, **{op: _changed(table, op, c) for op, c in changes.items()})
    _CURRENT[0] = new
    try:
        yield new
    finally:
        _CURRENT[0] = table
