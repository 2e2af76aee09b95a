"""Committees of models and their model deviation, in deepmd-kit's format.

* :class:`Committee`: several potentials evaluated on one frame (one neighbour list);
* :func:`model_deviation` and :class:`ModelDeviation`: deepmd-kit's definitions, float64;
* :class:`CommitteeCalculator`: ASE calculator (first model's results plus deviations);
* :class:`ModelDeviWriter` / :func:`read_model_devi`: the ``model_devi.out`` file;
* :func:`model_devi_frames`: ``dp model-devi`` for a list of frames (``mdband model-devi``).
"""

from mdband.committee.calculator import CommitteeCalculator
from mdband.committee.committee import Committee, CommitteeError, CommitteeResult
from mdband.committee.devi_file import ModelDeviFileError, ModelDeviWriter, read_model_devi
from mdband.committee.deviation import COLUMNS, ModelDeviation, model_deviation
from mdband.committee.frames import model_devi_frames

__all__ = [
    "COLUMNS",
    "Committee",
    "CommitteeCalculator",
    "CommitteeError",
    "CommitteeResult",
    "ModelDeviFileError",
    "ModelDeviWriter",
    "ModelDeviation",
    "model_devi_frames",
    "model_deviation",
    "read_model_devi",
]
