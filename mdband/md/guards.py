"""Runaway-dynamics guard: stop a run whose temperature explodes or whose atoms collapse.

A timestep far too long for the potential (or a model evaluated far outside its training
data) heats the system without bound while every number stays finite, so the NaN check never
fires. Before a frame (every ``traj_every`` steps) or a checkpoint is written, the guard
compares the temperature with ``max_temperature`` and the closest pair with
``guard_distance`` (a neighbour list with that cutoff), so neither holds a runaway state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from ase import Atoms

from mdband.md.config import RunConfig
from mdband.md.system import closest_pair

DEFAULT_MAX_TEMPERATURE = 10_000.0  # K; the default limit is max(10 × target, this)


@dataclass(frozen=True)
class RunawayGuard:
    """Limits of one run.

    ``max_temperature`` in K (inf: none), ``min_distance`` in Å (0: none).
    """

    max_temperature: float
    min_distance: float

    @classmethod
    def from_config(cls, c: RunConfig) -> RunawayGuard:
        """Build the limits of ``c``'s run.

        Without ``max_temperature``, the limit is ``max(10 × temperature,
        DEFAULT_MAX_TEMPERATURE)``; a ``max_temperature`` of 0 or less means no limit.
        ``min_distance`` is ``guard_distance``.
        """
        if c.max_temperature is None:
            limit = max(10.0 * c.temperature, DEFAULT_MAX_TEMPERATURE)
        else:
            limit = c.max_temperature if c.max_temperature > 0 else math.inf
        return cls(float(limit), float(c.guard_distance))

    def temperature_problem(self, temperature: float) -> str | None:
        """Why ``temperature`` (K) stops the run, or None."""
        if temperature > self.max_temperature:
            return (
                f"the temperature {temperature:.4g} K exceeds max_temperature "
                f"{self.max_temperature:g} K (runaway dynamics: is the timestep too long?)"
            )
        return None

    def distance_problem(self, atoms: Atoms) -> str | None:
        """Why the closest pair of ``atoms`` stops the run, or None."""
        if self.min_distance <= 0 or len(atoms) < 2:
            return None
        pbc = np.asarray(atoms.get_pbc(), dtype=bool)
        cell = atoms.get_cell().array
        i, j, d = closest_pair(atoms.get_positions(), cell, pbc, self.min_distance)
        if i is None:
            return None
        return (
            f"atoms {i} and {j} are {d:.3f} Å apart, closer than guard_distance "
            f"{self.min_distance:g} Å (runaway dynamics)"
        )
