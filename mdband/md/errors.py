"""Errors of the MD driver.

All are :class:`~mdband.errors.MdbandError`, so front ends report them as one line.
"""

from __future__ import annotations

from mdband.errors import MdbandError, OutputExistsError

__all__ = [
    "ConfigError",
    "OutputExistsError",
    "RunInterrupted",
    "SimulationDivergedError",
]


class ConfigError(MdbandError, ValueError):
    """A run setting is missing, out of range, or conflicts with another one."""


class SimulationDivergedError(MdbandError):
    """The energy, forces, positions or momenta became NaN or infinite during a run."""


class RunInterrupted(MdbandError):
    """SIGINT or SIGTERM stopped a run at a step boundary (after writing a checkpoint)."""
