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
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: tl.dot input precisions a launch may ask for ("auto": tf32x3 where TF32 tensor cores run it)
DOT_PRECISIONS = ("auto", "tf32x3", "ieee")
#: the split modes of the SO(2) linear kernel (``ieee`` is the exact cuBLAS path, no launch)
SPLIT_MODES = ("tf32x3", "fp16x3", "fp16")


# ---------------------------------------------------------------------------- checks
def _check(ok: bool, record: object, name: str, value: object, want: str) -> None:
    if not ok:
        raise ValueError(f"{type(record).__name__}.{name} must be {want}, got {value!r}")


def _power_of_two(record, *names: str, allow_none: bool = False) -> None:
    for name in names:
        value = getattr(record, name)
        if allow_none and value is None:
            continue
        ok = type(value) is int and value >= 1 and value & (value - 1) == 0
        _check(ok, record, name, value, "a power of two" + (" or None" if allow_none else ""))


def _at_least_one(record, *names: str) -> None:
    for name in names:
        value = getattr(record, name)
        _check(type(value) is int and value >= 1, record, name, value, "an int ≥ 1")


def _choice(record, name: str, choices: tuple) -> None:
    value = getattr(record, name)
    _check(value in choices, record, name, value, f"one of {choices}")


def _instances(record, name: str, values, cls: type) -> None:
    for value in values:
        _check(isinstance(value, cls), record, name, value, f"{cls.__name__} values")


def _frozen(record, name: str, mapping) -> MappingProxyType:
    """Return a read-only copy of a mapping field (stored back on the frozen record)."""
    _check(isinstance(mapping, Mapping), record, name, mapping, "a mapping")
    frozen = MappingProxyType(dict(mapping))
    object.__setattr__(record, name, frozen)
    return frozen


# ---------------------------------------------------------------------------- launch records
@dataclass(frozen=True)
class DotLaunch:
    """A "dot" kernel's launch: edges per tl.dot step and warps per program (None: its own rule)."""

    edges: int
    warps: int | None = None

    def __post_init__(self) -> None:
        _power_of_two(self, "edges")
        _power_of_two(self, "warps", allow_none=True)


@dataclass(frozen=True)
class LinearLaunch:
    """A launch of the SO(2) linear kernel (or of its pre-split variant): edges per program,
    warps, software-pipeline stages and output rows per program (1 or 2)."""

    edges: int
    warps: int
    stages: int
    rows: int = 1

    def __post_init__(self) -> None:
        _power_of_two(self, "edges", "warps")
        _at_least_one(self, "stages")
        _choice(self, "rows", (1, 2))


@dataclass(frozen=True)
class GateLaunch:
    """The gate kernels' launch: edges per program and the forward's and backward's warps."""

    edges: int
    fwd_warps: int
    bwd_warps: int

    def __post_init__(self) -> None:
        _power_of_two(self, "edges", "fwd_warps", "bwd_warps")


@dataclass(frozen=True)
class StackShape:
    """Launches of one (L, C) of the SO(2) stack that beat the defaults: the linear kernel's
    per split mode, and the gate kernels' (None: the default)."""

    linear: Mapping[str, LinearLaunch] = field(default_factory=dict)
    gate: GateLaunch | None = None

    def __post_init__(self) -> None:
        linear = _frozen(self, "linear", self.linear)
        _check(set(linear) <= set(SPLIT_MODES), self, "linear", dict(linear), "split-mode keys")
        _instances(self, "linear", linear.values(), LinearLaunch)
        ok = self.gate is None or isinstance(self.gate, GateLaunch)
        _check(ok, self, "gate", self.gate, "a GateLaunch or None")


@dataclass(frozen=True)
class GridLaunch:
    """A grid_product launch: channels per program (one node, one channel block) and warps."""

    channels: int
    warps: int

    def __post_init__(self) -> None:
        _power_of_two(self, "channels", "warps")


# ---------------------------------------------------------------------------- op records
@dataclass(frozen=True)
class AggregateTuning:
    """aggregate (BENCHMARKS.md "2026-12-03 (second session)": the tf32x3 dot backward;
    "2026-12-03": the forward's prefetch; "2026-12-02 (fifth session)": warps and stages; the
    one-warp programs and the statistics pass "2026-11-30 — H200, third session on issue #4").

    The forward is always the walk (``walk_*``); ``bwd`` picks the backward: "walk", "dot"
    (BLOCK_EDGES edges per step as tl.dot products) or "auto" ("dot" where its tl.dot is
    tf32x3 on TF32 tensor cores, i.e. float32 on sm80+; else the exact walk). ``walk_warps``
    None: one warp per 512 elements of a program's (JP × BC) tile, 1 to 8. ``dot_precision``:
    float32's tl.dot precision (float64 always "ieee"); ``dot_ieee`` / ``dot_tf32x3`` the
    launch of each (warps None: 8, 4 for C ≤ 16).
    """

    bwd: str = "auto"
    walk_warps: int | None = None
    walk_stages: int = 3
    fwd_prefetch: bool = True
    bwd_prefetch: bool = False
    stats_edges: int = 32
    dot_precision: str = "tf32x3"
    dot_ieee: DotLaunch = field(default_factory=lambda: DotLaunch(edges=4, warps=None))
    dot_tf32x3: DotLaunch = field(default_factory=lambda: DotLaunch(edges=16, warps=4))

    def __post_init__(self) -> None:
        _choice(self, "bwd", ("walk", "dot", "auto"))
        _power_of_two(self, "walk_warps", allow_none=True)
        _at_least_one(self, "walk_stages")
        _choice(self, "fwd_prefetch", (True, False))
        _choice(self, "bwd_prefetch", (True, False))
        _power_of_two(self, "stats_edges")
        _choice(self, "dot_precision", ("tf32x3", "ieee"))
        for name in ("dot_ieee", "dot_tf32x3"):
            launch = getattr(self, name)
            ok = isinstance(launch, DotLaunch) and launch.edges >= 4
            _check(ok, self, name, launch, "a DotLaunch of ≥ 4 edges (16 tl.dot rows)")

    def dot_launch(self, precision: str) -> DotLaunch:
        """Return the dot backward's launch at tl.dot precision ``precision``."""
        return self.dot_tf32x3 if precision == "tf32x3" else self.dot_ieee


@dataclass(frozen=True)
class RotateMixTuning:
    """rotate_mix (BENCHMARKS.md "2026-12-03 (second session)": the tf32x3 dot backward of
    radial rows; "2026-11-30 — H200, third session on issue #4": one warp per program;
    "2026-12-02 (fifth session)": the backward edge kernel's edges per program and stages).

    The forward is always the edge kernel (``fwd_warps``). ``bwd``: "edge" (an edge kernel of
    ``edge_block`` edges per program, ``edge_block_interpreter`` in the CPU interpreter, then
    a node kernel over the source CSR), "dot" (by source node, ``dot_edges`` edges per step as
    tl.dot products at ``dot_precision`` in float32; radial rows only: a mixer keeps the edge
    kernels) or "auto" ("dot" for radial rows where the tl.dot is tf32x3 on TF32 tensor cores).
    """

    bwd: str = "auto"
    fwd_warps: int = 1
    edge_warps: int = 1
    node_warps: int = 1
    edge_block: int = 16
    edge_block_interpreter: int = 4
    edge_stages: int = 3
    dot_edges: int = 4
    dot_warps: int = 1
    dot_precision: str = "tf32x3"

    def __post_init__(self) -> None:
        _choice(self, "bwd", ("edge", "dot", "auto"))
        _power_of_two(self, "fwd_warps", "edge_warps", "node_warps", "dot_warps", "dot_edges")
        _at_least_one(self, "edge_block", "edge_block_interpreter", "edge_stages")
        _check(self.dot_edges >= 4, self, "dot_edges", self.dot_edges, "≥ 4 (16 tl.dot rows)")
        _choice(self, "dot_precision", ("tf32x3", "ieee"))


@dataclass(frozen=True)
class ZonalTuning:
    """zonal_embed (BENCHMARKS.md "2026-12-03 (third session)": the tf32x3 dot backward).

    ``bwd``: "auto" (float32 on TF32 tensor cores: a node's edges ``dot_edges`` per step as
    tf32x3 dots, ``dot_warps`` warps; else the walk) or "walk" (one edge at a time, exact FMAs,
    every dtype). The forward is the walk at Triton's default warps.
    """

    bwd: str = "auto"
    dot_edges: int = 16
    dot_warps: int = 4

    def __post_init__(self) -> None:
        _choice(self, "bwd", ("walk", "auto"))
        _power_of_two(self, "dot_edges", "dot_warps")


def _stack_shapes() -> dict:
    fp16 = LinearLaunch(edges=64, warps=4, stages=2)
    return {
        (3, 64): StackShape(
            linear={"fp16x3": LinearLaunch(edges=64, warps=4, stages=2, rows=2), "fp16": fp16}
        ),
        (2, 32): StackShape(
            linear={
                "tf32x3": LinearLaunch(edges=256, warps=4, stages=3),
                "fp16x3": LinearLaunch(edges=64, warps=4, stages=3),
                "fp16": LinearLaunch(edges=256, warps=4, stages=3),
            },
            gate=GateLaunch(edges=16, fwd_warps=8, bwd_warps=2),
        ),
    }


@dataclass(frozen=True)
class So2StackTuning:
    """so2_mix_layer (BENCHMARKS.md "2026-11-30 — H200, fused SO(2) mixing layers": the linear
    kernel's launch; "2026-12-01 (evening)": the fp16 modes; "2026-12-02 (second session)":
    two rows per program; "2026-12-03 (second session)": the gate backward; "2026-12-04
    (fourth session)": the pre-split kernel).

    ``linear``: the linear kernel's launch per split mode; ``shapes``: per (L, C), launches
    that beat those; ``fallbacks``: smaller launches tried in turn where shared memory runs
    out; ``gate``: the gate kernels' default launch; ``presplit``: the pre-split fp16x3
    kernel's launches, tried in turn (the first that fits is kept).
    """

    linear: Mapping[str, LinearLaunch] = field(
        default_factory=lambda: {m: LinearLaunch(edges=128, warps=8, stages=2) for m in SPLIT_MODES}
    )
    shapes: Mapping[tuple[int, int], StackShape] = field(default_factory=_stack_shapes)
    fallbacks: tuple[LinearLaunch, ...] = (
        LinearLaunch(edges=64, warps=4, stages=2),
        LinearLaunch(edges=64, warps=4, stages=1),
    )
    gate: GateLaunch = field(default_factory=lambda: GateLaunch(edges=32, fwd_warps=4, bwd_warps=8))
    presplit: tuple[LinearLaunch, ...] = (
        LinearLaunch(edges=128, warps=8, stages=3, rows=2),
        LinearLaunch(edges=128, warps=8, stages=2, rows=1),
        LinearLaunch(edges=64, warps=4, stages=2, rows=1),
        LinearLaunch(edges=32, warps=4, stages=1, rows=1),
    )

    def __post_init__(self) -> None:
        linear = _frozen(self, "linear", self.linear)
        ok = set(linear) == set(SPLIT_MODES)
        _check(ok, self, "linear", dict(linear), f"a launch for each of {SPLIT_MODES}")
        _instances(self, "linear", linear.values(), LinearLaunch)
        shapes = _frozen(self, "shapes", self.shapes)
        for key in shapes:
            ok = isinstance(key, tuple) and len(key) == 2 and all(type(k) is int for k in key)
            _check(ok, self, "shapes", key, "keyed (L, C)")
        _instances(self, "shapes", shapes.values(), StackShape)
        for name in ("fallbacks", "presplit"):
            launches = getattr(self, name)
            ok = isinstance(launches, tuple) and len(launches) > 0
            _check(ok, self, name, launches, "a non-empty tuple")
            _instances(self, name, launches, LinearLaunch)
        _instances(self, "gate", [self.gate], GateLaunch)

    def linear_launch(self, precision: str, L: int, C: int) -> LinearLaunch:
        """Return the linear kernel's launch in split mode ``precision``, degree L, C channels."""
        shape = self.shapes.get((L, C))
        if shape is not None and precision in shape.linear:
            return shape.linear[precision]
        return self.linear[precision]

    def gate_launch(self, L: int, C: int) -> GateLaunch:
        """Return the gate kernels' launch for degree L, C channels."""
        shape = self.shapes.get((L, C))
        return shape.gate if shape is not None and shape.gate is not None else self.gate


@dataclass(frozen=True)
class GridProductTuning:
    """grid_product (BENCHMARKS.md "2026-12-02 (fourth session)": ``grid_sweep.py``).

    ``fwd`` / ``bwd``: each pass's launch; ``shapes``: per channel count C (per frame) the
    (forward, backward) launches that beat them.
    """

    fwd: GridLaunch = field(default_factory=lambda: GridLaunch(channels=32, warps=4))
    bwd: GridLaunch = field(default_factory=lambda: GridLaunch(channels=32, warps=4))
    shapes: Mapping[int, tuple[GridLaunch, GridLaunch]] = field(
        default_factory=lambda: {
            96: (GridLaunch(channels=32, warps=2), GridLaunch(channels=16, warps=2)),
            32: (GridLaunch(channels=32, warps=2), GridLaunch(channels=32, warps=8)),
        }
    )

    def __post_init__(self) -> None:
        _instances(self, "fwd, bwd", (self.fwd, self.bwd), GridLaunch)
        for key, pair in _frozen(self, "shapes", self.shapes).items():
            ok = type(key) is int and isinstance(pair, tuple) and len(pair) == 2
            _check(ok, self, "shapes", {key: pair}, "C → (forward, backward) launch pairs")
            _instances(self, "shapes", pair, GridLaunch)

    def launch(self, pass_: str, channels: int) -> GridLaunch:
        """Return the launch of pass ``"fwd"`` or ``"bwd"`` for C = ``channels`` per frame."""
        pair = self.shapes.get(channels)
        if pair is not None:
            return pair[0] if pass_ == "fwd" else pair[1]
        return self.fwd if pass_ == "fwd" else self.bwd


@dataclass(frozen=True)
class EdgeMlpTuning:
    """seed_mlp and radial_mlp, the edge MLPs in registers (BENCHMARKS.md "2026-12-04 (second
    session)").

    ``kernels``: "op" (the op where the fused ops run) or "torch" (the torch path);
    ``max_width``: the widest output the op takes (radial_mlp; wider tiles spill registers);
    ``edges`` per program, ``warps`` (1, 2 or 4: 8 faulted on a GPU with Triton 3.6) and the
    dots' ``precision`` (auto: tf32x3 on TF32 tensor cores, else ieee).
    """

    kernels: str = "op"
    max_width: int | None = None
    edges: int = 64
    warps: int = 4
    precision: str = "auto"

    def __post_init__(self) -> None:
        _choice(self, "kernels", ("op", "torch"))
        ok = self.max_width is None or (type(self.max_width) is int and self.max_width >= 1)
        _check(ok, self, "max_width", self.max_width, "≥ 1 or None")
        _power_of_two(self, "edges")
        _choice(self, "warps", (1, 2, 4))
        _choice(self, "precision", DOT_PRECISIONS)


@dataclass(frozen=True)
class CellPairsTuning:
    """cell_pairs (BENCHMARKS.md "2026-12-04 (third session)"): ``kernels`` "auto" (the
    kernels wherever Triton runs) or "torch" (the torch path); candidates per stencil slot and
    loop step (``width``) and warps per program."""

    kernels: str = "auto"
    width: int = 8
    warps: int = 4

    def __post_init__(self) -> None:
        _choice(self, "kernels", ("auto", "torch"))
        _power_of_two(self, "width", "warps")


@dataclass(frozen=True)
class BlockLaunch:
    """An op with one launch shape: edges per program (or per loop step) and warps per program
    (None: Triton's default). ``fwd_edges`` / ``bwd_edges`` where the passes differ."""

    fwd_edges: int
    bwd_edges: int
    warps: int | None = 4

    def __post_init__(self) -> None:
        _power_of_two(self, "fwd_edges", "bwd_edges")
        _power_of_two(self, "warps", allow_none=True)


@dataclass(frozen=True)
class TakeRowsTuning:
    """take_rows (BENCHMARKS.md "2026-12-02 (third session)"): ``items`` per program (edges ×
    row items), the widest row block per program and warps."""

    items: int = 4096
    max_width: int = 128
    warps: int = 4

    def __post_init__(self) -> None:
        _power_of_two(self, "items", "max_width", "warps")


@dataclass(frozen=True)
class BandProducerTuning:
    """band_producer (BENCHMARKS.md "2026-11-30 — NVIDIA H200"): edges and warps per program
    on a GPU; in the CPU interpreter at most ``interpreter_edges`` (the next power of two of
    E) and one warp."""

    edges: int = 64
    warps: int = 2
    interpreter_edges: int = 64

    def __post_init__(self) -> None:
        _power_of_two(self, "edges", "warps", "interpreter_edges")


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
