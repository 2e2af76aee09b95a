"""The benchmarks' one harness: systems, model configs, a timer, shared flags, JSON lines.

* :mod:`~benchmarks.harness.systems`: rattled diamond, water boxes, argon, deepmd-kit npy frames;
* :mod:`~benchmarks.harness.models`: deepmd-kit's DPA4 sections, mdband configs (``default``,
  ``mini``, ``tiny``), random weights and potentials, deepmd-kit checkpoints;
* :mod:`~benchmarks.harness.timer`: one timer, wall/CPU/CUDA-event times per call
  (:func:`measure`, :func:`once`, :func:`timer`), the CUDA peak of a block
  (:class:`PeakMemory`);
* :mod:`~benchmarks.harness.flags`: ``--device``, ``--dtype``, ``--repeat``, ``--warmup``,
  ``--threads``, ``--sizes``, ``--configs``, ``--tiny``, ``--out`` (:func:`parser`);
* :mod:`~benchmarks.harness.results`: records appended as JSON lines (:class:`Results`);
* :mod:`~benchmarks.harness.commands`: benchmarks and ``mdband run`` in child processes;
* :mod:`~benchmarks.harness.profiling`: torch.profiler around one call, CUDA graphs off.

A script imports it as ``from benchmarks import harness``; run as a file (``python
benchmarks/NAME.py``) it finds the package beside itself as ``harness``.
"""

from . import commands, flags, models, profiling, results, systems, timer
from .flags import parser
from .results import Results
from .systems import diamond, evaluate_args
from .timer import PeakMemory, Timing, measure, once

__all__ = [
    "PeakMemory",
    "Results",
    "Timing",
    "commands",
    "diamond",
    "evaluate_args",
    "flags",
    "measure",
    "models",
    "once",
    "parser",
    "profiling",
    "results",
    "systems",
    "timer",
]
