"""Benchmarks and ``mdband run`` in child processes: command lines, environment, summaries.

A benchmark that runs parts of itself elsewhere (another interpreter, a fresh process per
engine) starts them as modules of this package: :func:`module` is the command line,
:func:`environment` the environment that lets any interpreter import ``benchmarks`` (the
repository root first on ``PYTHONPATH``). :func:`run_summary` reads the times out of the
summary ``mdband run`` prints and logs.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_RATE = re.compile(r"in ([0-9.]+) s, ([0-9,.]+) steps/s")
_SPLIT = re.compile(r"Time per step: ([0-9.]+) ms, of which ([0-9.]+) ms in the model")
_STEADY = re.compile(r"after the first \d+ steps [^:]*: ([0-9.]+) ms per step, ([0-9.]+) ms in")


def module(name: str, *args: str, python: str | None = None) -> list[str]:
    """The command line running ``benchmarks.NAME`` with ``args`` (``python``: the
    interpreter, this one by default)."""
    return [python or sys.executable, "-m", f"benchmarks.{name}", *map(str, args)]


def environment(extra: dict | None = None) -> dict:
    """This process's environment with ``extra`` and the repository root first on
    ``PYTHONPATH`` (so that an interpreter without mdband installed imports this checkout)."""
    env = dict(os.environ, **(extra or {}))
    paths = [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_summary(text: str) -> dict:
    """The times in ``mdband run``'s summary (its output or log): ``step_ms`` and
    ``model_ms`` (every step: the model's share of a step), ``steady_step_ms`` and
    ``steady_model_ms`` (after the first steps, which compile kernels and capture CUDA graphs),
    ``steps_per_s`` and ``ms_per_step`` (the whole run); keys absent where the text lacks them."""
    out = {}
    if m := _SPLIT.search(text):
        out["step_ms"], out["model_ms"] = float(m.group(1)), float(m.group(2))
    if m := _STEADY.search(text):
        out["steady_step_ms"], out["steady_model_ms"] = float(m.group(1)), float(m.group(2))
    if m := _RATE.search(text):
        rate = float(m.group(2).replace(",", ""))
        out["steps_per_s"] = rate
        out["ms_per_step"] = 1e3 / rate if rate else None
    return out
