"""The op records of the tuning table: one frozen record per op.

Each names the dated ``BENCHMARKS.md`` section that measured its defaults (the figures live
there) and says which kernel variants its op runs and how it launches them; launches are the
records of :mod:`mdband.kernels.tuning.launches`. Each checks its fields when made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mdband.kernels.tuning._checks import (
    at_least_one,
    check,
    choice,
    frozen,
    instances,
    power_of_two,
)
from mdband.kernels.tuning.launches import (
    DOT_PRECISIONS,
    SPLIT_MODES,
    DotLaunch,
    GateLaunch,
    GridLaunch,
    LinearLaunch,
    StackShape,
)


@dataclass(frozen=True)
class AggregateTuning:
    """The tuning record of aggregate.

    BENCHMARKS.md "2026-12-03 (second session)": the tf32x3 dot backward; "2026-12-03": the
    forward's prefetch; "2026-12-02 (fifth session)": warps and stages; the one-warp programs and
    the statistics pass "2026-11-30 — H200, third session on issue #4".

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
        """Check the fields (ValueError naming the field)."""
        choice(self, "bwd", ("walk", "dot", "auto"))
        power_of_two(self, "walk_warps", allow_none=True)
        at_least_one(self, "walk_stages")
        choice(self, "fwd_prefetch", (True, False))
        choice(self, "bwd_prefetch", (True, False))
        power_of_two(self, "stats_edges")
        choice(self, "dot_precision", ("tf32x3", "ieee"))
        for name in ("dot_ieee", "dot_tf32x3"):
            launch = getattr(self, name)
            ok = isinstance(launch, DotLaunch) and launch.edges >= 4
            check(ok, self, name, launch, "a DotLaunch of ≥ 4 edges (16 tl.dot rows)")

    def dot_launch(self, precision: str) -> DotLaunch:
        """Return the dot backward's launch at tl.dot precision ``precision``."""
        return self.dot_tf32x3 if precision == "tf32x3" else self.dot_ieee


@dataclass(frozen=True)
class RotateMixTuning:
    """The tuning record of rotate_mix.

    BENCHMARKS.md "2026-12-03 (second session)": the tf32x3 dot backward of radial rows;
    "2026-11-30 — H200, third session on issue #4": one warp per program; "2026-12-02 (fifth
    session)": the backward edge kernel's edges per program and stages.

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
        """Check the fields (ValueError naming the field)."""
        choice(self, "bwd", ("edge", "dot", "auto"))
        power_of_two(self, "fwd_warps", "edge_warps", "node_warps", "dot_warps", "dot_edges")
        at_least_one(self, "edge_block", "edge_block_interpreter", "edge_stages")
        check(self.dot_edges >= 4, self, "dot_edges", self.dot_edges, "≥ 4 (16 tl.dot rows)")
        choice(self, "dot_precision", ("tf32x3", "ieee"))


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
        """Check the fields (ValueError naming the field)."""
        choice(self, "bwd", ("walk", "auto"))
        power_of_two(self, "dot_edges", "dot_warps")


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
    """The tuning record of so2_mix_layer.

    BENCHMARKS.md "2026-11-30 — H200, fused SO(2) mixing layers": the linear kernel's launch;
    "2026-12-01 (evening)": the fp16 modes; "2026-12-02 (second session)": two rows per program;
    "2026-12-03 (second session)": the gate backward; "2026-12-04 (fourth session)": the pre-split
    kernel.

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
        """Check the fields and freeze ``linear`` and ``shapes`` (ValueError naming the field)."""
        linear = frozen(self, "linear", self.linear)
        ok = set(linear) == set(SPLIT_MODES)
        check(ok, self, "linear", dict(linear), f"a launch for each of {SPLIT_MODES}")
        instances(self, "linear", linear.values(), LinearLaunch)
        shapes = frozen(self, "shapes", self.shapes)
        for key in shapes:
            ok = isinstance(key, tuple) and len(key) == 2 and all(type(k) is int for k in key)
            check(ok, self, "shapes", key, "keyed (L, C)")
        instances(self, "shapes", shapes.values(), StackShape)
        for name in ("fallbacks", "presplit"):
            launches = getattr(self, name)
            ok = isinstance(launches, tuple) and len(launches) > 0
            check(ok, self, name, launches, "a non-empty tuple")
            instances(self, name, launches, LinearLaunch)
        instances(self, "gate", [self.gate], GateLaunch)

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
        """Check the fields and freeze the ``shapes`` mapping (ValueError naming the field)."""
        instances(self, "fwd, bwd", (self.fwd, self.bwd), GridLaunch)
        for key, pair in frozen(self, "shapes", self.shapes).items():
            ok = type(key) is int and isinstance(pair, tuple) and len(pair) == 2
            check(ok, self, "shapes", {key: pair}, "C → (forward, backward) launch pairs")
            instances(self, "shapes", pair, GridLaunch)

    def launch(self, pass_: str, channels: int) -> GridLaunch:
        """Return the launch of pass ``"fwd"`` or ``"bwd"`` for C = ``channels`` per frame."""
        pair = self.shapes.get(channels)
        if pair is not None:
            return pair[0] if pass_ == "fwd" else pair[1]
        return self.fwd if pass_ == "fwd" else self.bwd


@dataclass(frozen=True)
class EdgeMlpTuning:
    """The tuning record of seed_mlp and radial_mlp, the edge MLPs in registers.

    BENCHMARKS.md "2026-12-04 (second session)".

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
        """Check the fields (ValueError naming the field)."""
        choice(self, "kernels", ("op", "torch"))
        ok = self.max_width is None or (type(self.max_width) is int and self.max_width >= 1)
        check(ok, self, "max_width", self.max_width, "≥ 1 or None")
        power_of_two(self, "edges")
        choice(self, "warps", (1, 2, 4))
        choice(self, "precision", DOT_PRECISIONS)


@dataclass(frozen=True)
class CellPairsTuning:
    """The tuning record of cell_pairs (BENCHMARKS.md "2026-12-04 (third session)").

    ``kernels`` "auto" (the kernels wherever Triton runs) or "torch" (the torch path); candidates
    per stencil slot and loop step (``width``) and warps per program.
    """

    kernels: str = "auto"
    width: int = 8
    warps: int = 4

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field)."""
        choice(self, "kernels", ("auto", "torch"))
        power_of_two(self, "width", "warps")


@dataclass(frozen=True)
class TakeRowsTuning:
    """The tuning record of take_rows (BENCHMARKS.md "2026-12-02 (third session)").

    ``items`` per program (edges × row items), the widest row block per program and warps.
    """

    items: int = 4096
    max_width: int = 128
    warps: int = 4

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field)."""
        power_of_two(self, "items", "max_width", "warps")


@dataclass(frozen=True)
class BandProducerTuning:
    """The tuning record of band_producer (BENCHMARKS.md "2026-11-30 — NVIDIA H200").

    Edges and warps per program on a GPU; in the CPU interpreter at most ``interpreter_edges`` (the
    next power of two of E) and one warp.
    """

    edges: int = 64
    warps: int = 2
    interpreter_edges: int = 64

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field)."""
        power_of_two(self, "edges", "warps", "interpreter_edges")
