"""Potential.evaluate refuses bad frames and devices with one-line typed errors."""

import numpy as np
import pytest
import torch

from mdband.errors import MdbandError, StructureError
from mdband.potential import resolve_device
from mdband.testing.lj import lennard_jones_potential

POS = np.array([[0.0, 0.0, 0.0], [3.6, 0.0, 0.0], [0.0, 3.7, 0.0]])
CELL = np.eye(3) * 12.0


@pytest.fixture(scope="module")
def lj():
    return lennard_jones_potential()


@pytest.mark.parametrize(
    "positions, cell, pbc, message",
    [
        (np.zeros((6, 2)), None, False, r"shape \(N, 3\), got \(6, 2\)"),  # was read as (4, 3)
        (np.zeros((3, 4)), None, False, r"shape \(N, 3\), got \(3, 4\)"),
        (np.zeros(9), None, False, r"shape \(N, 3\), got \(9,\)"),
        (np.zeros((1, 3, 3)), None, False, r"got \(1, 3, 3\)"),
        ([[0, 0, 0], [np.nan, 0, 0], [1, 1, 1]], None, False, "NaN or inf"),
        ([[0, 0, 0], ["a", 0, 0], [1, 1, 1]], None, False, "must be numbers"),
        (POS, np.eye(2), True, r"cell must have shape \(3, 3\)"),
        (POS, np.full((3, 3), np.inf), True, "cell contains NaN or inf"),
        (POS, CELL, "False", "got the string 'False'"),  # bool("False") is True
        (POS, CELL, ["True", True, True], "True/False"),
        (POS, CELL, [True, 2, False], "True/False"),
        (POS, CELL, [True, True], "one bool or three"),
        (POS, CELL, None, "True/False"),
    ],
)
def test_bad_frames_are_refused(lj, positions, cell, pbc, message):
    with pytest.raises(StructureError, match=message) as info:
        lj.evaluate(positions, cell, pbc, species=["Ar"] * 3)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "pbc", [False, True, np.bool_(True), [1, 0, 1], np.array([True, False, True])]
)
def test_good_pbc_spellings(lj, pbc):
    want = lj.evaluate(
        POS, CELL, np.broadcast_to(np.asarray(pbc, dtype=bool), 3).tolist(), species=["Ar"] * 3
    )
    got = lj.evaluate(POS, CELL, pbc, species=["Ar"] * 3)
    assert got.energy == want.energy


def test_tensor_positions_pass_the_same_checks(lj):
    with pytest.raises(StructureError, match=r"got \(6, 2\)"):
        lj.evaluate(torch.zeros(6, 2), None, False, species=["Ar"] * 4)
    with pytest.raises(StructureError, match="NaN"):
        lj.evaluate(torch.full((3, 3), float("nan")), None, False, species=["Ar"] * 3)


@pytest.mark.parametrize(
    "device, message",
    [("tpu", "unknown device 'tpu'"), ("cuda:x", "unknown device"), ("mps", "not supported")],
)
def test_bad_device_names(device, message):
    with pytest.raises(MdbandError, match=message) as info:
        resolve_device(device)
    assert "\n" not in str(info.value)
    with pytest.raises(MdbandError, match=message):
        lennard_jones_potential(device=device)


def test_good_device_names():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device(torch.device("cpu")).type == "cpu"
    assert resolve_device("auto").type in ("cpu", "cuda")
