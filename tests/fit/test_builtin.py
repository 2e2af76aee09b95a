"""The built-in model: loads by name, is small, matches EMT, has a model card."""

import re

import numpy as np
import pytest
from ase.build import bulk
from ase.calculators.emt import EMT
from click.testing import CliRunner

import mdband
from mdband.builtin import builtin_models, builtin_path, model_card
from mdband.cli import main
from mdband.errors import ModelFileError

NAME = "emt-cuni"


def test_listed_small_and_loadable():
    assert NAME in builtin_models() and NAME in mdband.builtin_models()
    path = builtin_path(NAME)
    assert path.stat().st_size <= 5 * 1024 * 1024
    pot = mdband.load_model(f"builtin:{NAME}")
    assert pot.type_map == ["Ni", "Cu"] and pot.kind == "sezm"
    assert pot.metadata["source"] == "mdband fit"


def test_unknown_name_lists_the_available_ones():
    with pytest.raises(ModelFileError, match=NAME):
        mdband.load_model("builtin:no-such-model")
    with pytest.raises(ModelFileError, match="unknown built-in"):
        builtin_path("../emt-cuni")


def test_model_card_states_validation_errors():
    card = model_card(NAME)
    m = re.search(r"Validation force RMSE: ([0-9.]+) meV/Å", card)
    assert m, "the model card must state the validation force RMSE"
    assert float(m.group(1)) <= 50.0
    assert "EMT" in card and "asap_cutoff=True" in card


def test_agrees_with_emt_on_a_fresh_alloy_cell():
    """A configuration the model never saw: 32-atom Cu-Ni cell, thermal-size displacements."""
    rng = np.random.default_rng(123)
    atoms = bulk("Cu", "fcc", a=3.57, cubic=True).repeat(2)
    atoms.set_chemical_symbols(rng.choice(["Cu", "Ni"], len(atoms)).tolist())
    atoms.positions += rng.normal(0.0, 0.06, atoms.positions.shape)
    atoms.calc = EMT(asap_cutoff=True)
    e_ref, f_ref = atoms.get_potential_energy(), atoms.get_forces()
    pot = mdband.load_model(f"builtin:{NAME}", dtype="float64")
    r = pot.evaluate(atoms.positions, atoms.cell.array, True, atoms.numbers)
    assert abs(r.energy - e_ref) / len(atoms) < 0.02  # eV/atom
    rmse = float(np.sqrt(np.mean((r.forces - f_ref) ** 2)))
    assert rmse < 0.1 * float(np.sqrt(np.mean(f_ref**2))) + 0.05  # eV/Å
    np.testing.assert_allclose(r.forces.sum(axis=0), 0.0, atol=1e-9)


def test_info_shows_the_builtin():
    res = CliRunner().invoke(main, ["info", f"builtin:{NAME}"])
    assert res.exit_code == 0, res.output
    assert "type map         Ni Cu" in res.output
    res = CliRunner().invoke(main, ["info", "builtin:nope"])
    assert res.exit_code == 2 and NAME in res.output
