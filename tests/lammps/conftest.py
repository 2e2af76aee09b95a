"""Fixtures of the LAMMPS bridge tests (helpers live in ``lammps_harness.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from lammps_harness import ELEMENTS  # noqa: E402


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict[str, Path]:
    """Model files of the test potentials (LJ and the two-layer message-passing mp2)."""
    from mdband.testing.lj import lennard_jones_potential
    from mdband.testing.mp import message_passing_potential

    d = tmp_path_factory.mktemp("models")
    lj = lennard_jones_potential(type_map=ELEMENTS, cutoff=6.5, r_on=5.5)
    mp2 = message_passing_potential(type_map=ELEMENTS, cutoff=6.0, r_on=5.0)
    paths = {"lj": d / "lj.mdband", "mp2": d / "mp2.mdband"}
    lj.save(paths["lj"])
    mp2.save(paths["mp2"])
    return paths
