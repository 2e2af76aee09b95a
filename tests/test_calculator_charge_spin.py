"""The ASE calculator and committees with a charge/spin model: ``atoms.info["charge"]`` and
``atoms.info["spin"]`` give the single-call numbers, a change recomputes, defaults and the
missing-input error as ``Potential.evaluate``; other models ignore the keys."""

from __future__ import annotations

from pathlib import Path

import ase.io
import numpy as np
import pytest

import mdband
from mdband.charge_spin import MissingChargeSpinError
from mdband.committee import CommitteeCalculator

FIX = Path(__file__).resolve().parent / "fixtures" / "deepmd"
FRAMES = ase.io.read(FIX / "structures.extxyz", index=":")


@pytest.fixture(scope="module")
def pots():
    return {n: mdband.load_model(FIX / f"{n}.pt", device="cpu", dtype="float64")
            for n in ("chgspin", "chgspin_default", "s2ffn")}  # fmt: skip


def single(pot, atoms, **kw):
    return pot.evaluate(atoms.positions, atoms.cell.array, atoms.pbc,
                        atoms.get_chemical_symbols(), **kw)  # fmt: skip


@pytest.mark.parametrize("frame", [1, 3])  # triclinic periodic (stress), open molecule
def test_info_gives_single_call_numbers_and_changes_recompute(pots, frame):
    pot = pots["chgspin"]
    atoms = FRAMES[frame].copy()
    calc = mdband.Calculator(pot)
    atoms.calc = calc
    values = [(-1, 2), (-1, 2), (1, 3), (1, 1)]
    energies = []
    for charge, spin in values:
        atoms.info.update(charge=charge, spin=spin)
        ref = single(pot, atoms, charge=charge, spin=spin)
        assert atoms.get_potential_energy() == ref.energy
        np.testing.assert_array_equal(atoms.get_forces(), ref.forces)
        if atoms.pbc.all():
            stress = -ref.virial / atoms.get_volume()
            np.testing.assert_allclose(atoms.get_stress(voigt=False), stress, atol=1e-14)
        energies.append(ref.energy)
    assert calc.model_calls == 3  # the repeated (-1, 2) reused the results
    assert len(set(energies)) == 3
    assert calc.check_state(atoms) == []
    atoms.info["spin"] = 2
    assert calc.check_state(atoms) == ["info"]


def test_defaults_and_missing_input(pots):
    atoms = FRAMES[3].copy()
    atoms.calc = mdband.Calculator(pots["chgspin_default"])
    assert atoms.get_potential_energy() == single(pots["chgspin"], atoms, charge=-1, spin=2).energy
    atoms.info["charge"] = 2  # the spin from the default
    assert atoms.get_potential_energy() == single(pots["chgspin"], atoms, charge=2, spin=2).energy
    atoms.calc = mdband.Calculator(pots["chgspin"])
    with pytest.raises(MissingChargeSpinError, match=r"spin multiplicity \(spin\)") as info:
        atoms.get_potential_energy()
    assert info.value.missing == ["spin"]


def test_other_models_ignore_the_info_keys(pots):
    atoms = FRAMES[1].copy()
    atoms.calc = mdband.Calculator(pots["s2ffn"])
    e0 = atoms.get_potential_energy()
    atoms.info.update(charge=-1, spin=2)  # metadata many files carry
    assert atoms.calc.check_state(atoms) == []
    atoms.calc.reset()
    assert atoms.get_potential_energy() == e0


def test_committee_passes_charge_spin_to_every_model(pots):
    """Same weights, one with a default: with the info given both see the same inputs, so the
    first model's numbers are the single call's and the deviations vanish."""
    atoms = FRAMES[1].copy()
    atoms.info.update(charge=2, spin=1)
    calc = CommitteeCalculator([pots["chgspin_default"], pots["chgspin"]])
    atoms.calc = calc
    ref = single(pots["chgspin"], atoms, charge=2, spin=1)
    assert atoms.get_potential_energy() == ref.energy
    assert calc.results["max_devi_f"] <= 1e-12 and abs(calc.results["devi_e"]) <= 1e-12
    atoms.info["charge"] = 0
    atoms.get_potential_energy()
    assert calc.results["max_devi_f"] <= 1e-12
    plain = CommitteeCalculator([pots["s2ffn"], pots["chgspin"]])  # only one takes them
    atoms.calc = plain
    atoms.get_potential_energy()
    assert plain.results["max_devi_f"] > 1e-3
