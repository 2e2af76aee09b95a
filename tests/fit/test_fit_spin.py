"""``mdband fit --init`` refuses a spin model by name (no moments, no magnetic-force labels)."""

from pathlib import Path

import ase.io
import pytest
from ase.build import bulk
from ase.calculators.emt import EMT
from ase.calculators.singlepoint import SinglePointCalculator

import mdband
from mdband.errors import ModelFileError

SPIN = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd_spin" / "spin_native.pt"


def test_fit_refuses_to_start_from_a_spin_model(tmp_path):
    frames = []
    for seed in (1, 2):
        atoms = bulk("Ni", "fcc", a=3.52, cubic=True)
        atoms.rattle(0.05, seed=seed)
        atoms.calc = EMT()
        e, f = atoms.get_potential_energy(), atoms.get_forces()
        atoms.calc = SinglePointCalculator(atoms, energy=e, forces=f)
        frames.append(atoms)
    data = tmp_path / "ni.extxyz"
    ase.io.write(data, frames, format="extxyz")
    with pytest.raises(ModelFileError, match="native spin model; mdband fit does not train"):
        mdband.fit(data, tmp_path / "x.pt", init=SPIN, epochs=1)
    assert not (tmp_path / "x.pt").exists()
