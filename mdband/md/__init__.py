"""Molecular dynamics with mdband potentials: configuration, ensembles and the run loop.

>>> from mdband.md import RunConfig, run
>>> result = run(RunConfig(structure="ar.xyz", model="lj.pt", ensemble="nvt-nhc", steps=100))
"""

from mdband.md.config import ENSEMBLES, RunConfig
from mdband.md.errors import (
    ConfigError,
    OutputExistsError,
    RunInterrupted,
    SimulationDivergedError,
)
from mdband.md.runner import RunResult, run

__all__ = [
    "ENSEMBLES",
    "ConfigError",
    "OutputExistsError",
    "RunConfig",
    "RunInterrupted",
    "RunResult",
    "SimulationDivergedError",
    "run",
]
