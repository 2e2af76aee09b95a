"""``mdband.fit``: train or fine-tune SeZM models on labelled frames.

The package itself is callable, so ``mdband.fit(data, output, ...)`` is
:func:`mdband.fit.train.fit`; see that function for the parameters and
:class:`mdband.fit.config.FitConfig` for every setting.
"""

from __future__ import annotations

import sys
import types

from mdband.fit.checkpoint import CheckpointMismatchError, OutputExistsError
from mdband.fit.config import DEFAULT_MODEL, FitConfig, FitConfigError
from mdband.fit.data import DatasetError, Frame, read_dataset, read_frames
from mdband.fit.loss import Metrics, evaluate_metrics
from mdband.fit.train import FitResult, TrainingDivergedError, fit

__all__ = [
    "DEFAULT_MODEL",
    "CheckpointMismatchError",
    "DatasetError",
    "FitConfig",
    "FitConfigError",
    "FitResult",
    "Frame",
    "Metrics",
    "OutputExistsError",
    "TrainingDivergedError",
    "evaluate_metrics",
    "fit",
    "read_dataset",
    "read_frames",
]


class _CallableModule(types.ModuleType):
    """Lets ``mdband.fit(...)`` call :func:`fit` while ``mdband.fit.data`` stays a module."""

    def __call__(self, *args, **kwargs):
        return fit(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
