"""Launch records of the tuning table: how one kernel (or one pass) is launched.

The op records of :mod:`mdband.kernels.tuning.ops` hold these: a tl.dot kernel's edges per step
(:class:`DotLaunch`), the SO(2) linear kernel's (:class:`LinearLaunch`) and gate kernels'
(:class:`GateLaunch`) launches and those of one (L, C) that beat them (:class:`StackShape`),
grid_product's (:class:`GridLaunch`) and an op with one launch shape (:class:`BlockLaunch`).
Each is frozen and checks its fields when made.
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

#: tl.dot input precisions a launch may ask for ("auto": tf32x3 where TF32 tensor cores run it)
DOT_PRECISIONS = ("auto", "tf32x3", "ieee")
#: the split modes of the SO(2) linear kernel (``ieee`` is the exact cuBLAS path, no launch)
SPLIT_MODES = ("tf32x3", "fp16x3", "fp16")


@dataclass(frozen=True)
class DotLaunch:
    """A "dot" kernel's launch: edges per tl.dot step and warps per program (None: its own rule)."""

    edges: int
    warps: int | None = None

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field)."""
        power_of_two(self, "edges")
        power_of_two(self, "warps", allow_none=True)


@dataclass(frozen=True)
class LinearLaunch:
    """A launch of the SO(2) linear kernel (or of its pre-split variant).

    Edges per program, warps, software-pipeline stages and output rows per program (1 or 2).
    """

    edges: int
    warps: int
    stages: int
    rows: int = 1

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field)."""
        power_of_two(self, "edges", "warps")
        at_least_one(self, "stages")
        choice(self, "rows", (1, 2))


@dataclass(frozen=True)
class GateLaunch:
    """The gate kernels' launch: edges per program and the forward's and backward's warps."""

    edges: int
    fwd_warps: int
    bwd_warps: int

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field)."""
        power_of_two(self, "edges", "fwd_warps", "bwd_warps")


@dataclass(frozen=True)
class StackShape:
    """Launches of one (L, C) of the SO(2) stack that beat the defaults.

    The linear kernel's per split mode, and the gate kernels' (None: the default).
    """

    linear: Mapping[str, LinearLaunch] = field(default_factory=dict)
    gate: GateLaunch | None = None

    def __post_init__(self) -> None:
        """Check the fields and freeze the ``linear`` mapping (ValueError naming the field)."""
        linear = frozen(self, "linear", self.linear)
        check(set(linear) <= set(SPLIT_MODES), self, "linear", dict(linear), "split-mode keys")
        instances(self, "linear", linear.values(), LinearLaunch)
        ok = self.gate is None or isinstance(self.gate, GateLaunch)
        check(ok, self, "gate", self.gate, "a GateLaunch or None")


@dataclass(frozen=True)
class GridLaunch:
    """A grid_product launch: channels per program (one node, one channel block) and warps."""

    channels: int
    warps: int

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field)."""
        power_of_two(self, "channels", "warps")


@dataclass(frozen=True)
class BlockLaunch:
    """An op with one launch shape: edges per program (or per loop step) and warps per program.

    warps None: Triton's default. ``fwd_edges`` / ``bwd_edges`` where the passes differ.
    """

    fwd_edges: int
    bwd_edges: int
    warps: int | None = 4

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field)."""
        power_of_two(self, "fwd_edges", "bwd_edges")
        power_of_two(self, "warps", allow_none=True)
