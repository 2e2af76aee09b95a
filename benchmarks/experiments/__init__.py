"""Experiments whose conclusions BENCHMARKS.md records: launch sweeps and kernel variants.

Kept runnable (``python -m benchmarks.experiments.NAME`` from the repository root) so that a
recorded conclusion can be measured again; none of them is part of mdband.
"""
