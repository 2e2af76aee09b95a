"""mdband's benchmarks and device checks (not part of the installed package).

Run a script from the repository root as a module, ``python -m benchmarks.vs_deepmd ...``, or
as a file, ``python benchmarks/vs_deepmd.py ...``; experiments whose conclusions BENCHMARKS.md
records live in :mod:`benchmarks.experiments` (``python -m benchmarks.experiments.gpu_warps``).
Every script builds on :mod:`benchmarks.harness`: the systems and model configs, one timer,
the shared flags and results as JSON lines.
"""
