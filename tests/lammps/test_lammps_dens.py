"""pair_style mdband refuses a dens-trained checkpoint (direct forces, no virial) by name."""

from __future__ import annotations

from pathlib import Path

import pytest

import mdband
from mdband.errors import MdbandError
from mdband.lammps.model import LammpsModel

DENS = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd" / "dens.pt"


def test_dens_model_is_refused():
    pot = mdband.load_model(DENS, device="cpu", dtype="float64")
    with pytest.raises(MdbandError, match="dens model .*LAMMPS runs energy models"):
        LammpsModel(pot, pot.types_of(["H", "C", "O"]))
