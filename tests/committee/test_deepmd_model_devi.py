"""Parity with deepmd-kit's own model deviation (``calc_model_devi``, deepmd-kit 3.2.0).

The fixture (``tests/fixtures/make_model_devi_fixture.py``) holds deepmd-kit's rows for a
committee of three random-init checkpoints (cutoffs 5.0, 5.0 and 4.5 Å) on the four frames of
``structures.extxyz`` (three periodic cells and a molecule).
"""

import json
from pathlib import Path

import ase.io
import numpy as np
import pytest

import mdband
from mdband.committee import Committee

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"
REF = np.load(FIX / "model_devi.npz")
MODELS = json.loads(str(REF["meta"]))["models"]
FRAMES = ase.io.read(FIX / "structures.extxyz", index=":")


@pytest.fixture(scope="module")
def committee():
    return Committee([mdband.load_model(FIX / f"{m}.pt", dtype="float64") for m in MODELS])


@pytest.mark.parametrize("i", range(len(FRAMES)))
def test_deviations_match_deepmd_kit(committee, i):
    atoms = FRAMES[i]
    ref = REF[f"devi_{i}"]
    devi = committee.evaluate(
        atoms.positions, atoms.cell.array, atoms.pbc, atoms.get_chemical_symbols()
    ).deviation
    assert ref[4] > 1e-3  # max_devi_f: the models disagree
    # deepmd-kit's row: step, max/min/avg_devi_v, max/min/avg_devi_f, devi_e, per-atom devi_f
    np.testing.assert_allclose(devi.row()[3:], ref[4:7], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(devi.devi_f, ref[8:], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(devi.devi_e, ref[7], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(devi.row()[:3], ref[1:4], rtol=1e-9, atol=1e-12)
