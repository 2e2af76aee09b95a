"""Session set-up for the whole suite: the test model kinds reach every child process.

``lj`` and ``mp2`` (:mod:`mdband.testing`) are not mdband product kinds; a process that loads a
saved file of those kinds finds them through ``MDBAND_PLUGINS`` (see :mod:`mdband.kinds`).
Setting it here, before any test runs, covers ``mdband run`` subprocesses, ``mpirun``/``lmp``
runs of the LAMMPS plugin and in-process loads alike.
"""

from __future__ import annotations

import os

TEST_KINDS = ("mdband.testing.lj", "mdband.testing.mp")


def pytest_configure(config) -> None:
    have = [m.strip() for m in os.environ.get("MDBAND_PLUGINS", "").split(",") if m.strip()]
    os.environ["MDBAND_PLUGINS"] = ",".join(have + [m for m in TEST_KINDS if m not in have])
