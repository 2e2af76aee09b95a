"""CommitteeCalculator: the first model's results bit for bit, deviations in results."""

import numpy as np
import pytest
from ase.build import bulk

from mdband import Calculator, UnknownElementError
from mdband.committee import Committee, CommitteeCalculator, CommitteeError
from mdband.testing.lj import lennard_jones_potential


def argon(seed=0):
    atoms = bulk("Ar", "fcc", a=5.3, cubic=True).repeat(2)
    atoms.rattle(0.1, seed=seed)
    return atoms


@pytest.fixture(scope="module")
def lj_models():
    return [
        lennard_jones_potential(),
        lennard_jones_potential(epsilon=0.0110),
        lennard_jones_potential(sigma=3.45),
    ]


@pytest.mark.parametrize("skin", [0.0, 1.0])
def test_first_model_results_are_bitwise_single_model(lj_models, skin):
    single, committee = argon(), argon()
    single.calc = Calculator(lj_models[0], skin=skin)
    committee.calc = CommitteeCalculator(lj_models, skin=skin)
    for step in range(3):
        for atoms in (single, committee):
            atoms.positions += 0.02 * np.sin(np.arange(atoms.positions.size) + step).reshape(-1, 3)
        for name in ("energy", "forces", "stress", "energies"):
            a = np.asarray(single.calc.get_property(name, single))
            b = np.asarray(committee.calc.get_property(name, committee))
            assert a.tobytes() == b.tobytes(), name
    assert committee.calc.results["max_devi_f"] > 1e-4


def test_results_hold_deviations(lj_models):
    atoms = argon(1)
    atoms.calc = CommitteeCalculator(lj_models)
    atoms.get_forces()
    r = atoms.calc.results
    direct = (
        Committee(lj_models)
        .evaluate(atoms.positions, atoms.cell.array, atoms.pbc, atoms.numbers)
        .deviation
    )
    for name, value in direct.as_dict().items():
        assert r[name] == value, name
    assert r["devi_f"].shape == (len(atoms),)
    np.testing.assert_array_equal(r["devi_f"], direct.devi_f)
    assert atoms.calc.get_property("avg_devi_f", atoms) == r["avg_devi_f"]


def test_deviations_on_demand_only(lj_models):
    atoms = argon(2)
    calc = CommitteeCalculator(lj_models, deviations=False)
    atoms.calc = calc
    atoms.get_forces()
    assert "max_devi_f" not in calc.results and calc.n_committee_evaluations == 0
    devi = calc.model_deviation()
    assert calc.n_committee_evaluations == 1 and calc.results["max_devi_f"] == devi.max_devi_f
    assert calc.model_deviation().row() == devi.row()  # cached for this frame
    assert calc.n_committee_evaluations == 1


def test_different_cutoffs_and_type_maps_are_handled():
    """Members with other cutoffs get the largest-cutoff list filtered to their own; type maps
    in another order map the same elements."""
    a = lennard_jones_potential(type_map=("Ar", "Kr"), cutoff=8.5)
    b = lennard_jones_potential(type_map=("Kr", "Ar"), cutoff=7.5, r_on=6.5, epsilon=0.011)
    c = lennard_jones_potential(type_map=("Ar", "Kr"), cutoff=9.5, r_on=8.0, sigma=3.45)
    atoms = argon(3)
    atoms.numbers[::4] = 36
    args = (atoms.positions, atoms.cell.array, atoms.pbc, atoms.numbers)
    out = Committee([a, b, c]).evaluate(*args)
    for pot, res in zip((a, b, c), out.results):
        alone = pot.evaluate(*args)
        np.testing.assert_allclose(res.forces, alone.forces, rtol=0, atol=1e-13)
        np.testing.assert_allclose(res.virial, alone.virial, rtol=0, atol=1e-12)
    assert out.results[0].forces.tobytes() == a.evaluate(*args).forces.tobytes()


def test_refusals(lj_models):
    with pytest.raises(CommitteeError, match="at least two models"):
        CommitteeCalculator(lj_models[:1])
    kr = lennard_jones_potential(type_map=("Kr",))
    atoms = argon()
    with pytest.raises(UnknownElementError, match="committee model 2: element"):
        Committee([lj_models[0], kr]).evaluate(
            atoms.positions, atoms.cell.array, atoms.pbc, atoms.numbers
        )


def test_committees_of_spin_models_are_refused():
    """A committee's evaluations carry no magnetic moments: spin models are refused by name."""
    from pathlib import Path

    import mdband

    fix = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd_spin" / "spin_native.pt"
    pot = mdband.load_model(fix, device="cpu", dtype="float64")
    with pytest.raises(CommitteeError, match="member 0 is a spin model"):
        Committee([pot, pot])
