"""mdband.Calculator: ASE contract, finite differences, boundaries, neighbour reuse, errors,
spin models' moments."""

from pathlib import Path

import numpy as np
import pytest
import torch
from ase import Atoms
from ase.build import bulk
from ase.calculators.calculator import PropertyNotImplementedError
from ase.calculators.fd import calculate_numerical_forces, calculate_numerical_stress

import mdband
from mdband import Calculator, MdbandError, UnknownElementError
from mdband.testing.lj import lennard_jones_potential

FD_ATOL = 1e-6  # eV/Å and eV/Å³; central differences with eps=1e-5 in float64


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def lj():
    return lennard_jones_potential(type_map=("Ar", "Kr"))


def argon(seed=0, repeat=2):
    atoms = bulk("Ar", "fcc", a=5.3, cubic=True).repeat(repeat)
    atoms.rattle(0.1, seed=seed)
    return atoms


def triclinic():
    atoms = argon(seed=3)
    cell = atoms.cell.array.copy()
    cell[1, 0] += 1.1
    cell[2, 1] -= 0.7
    atoms.set_cell(cell, scale_atoms=True)
    atoms.numbers[::3] = 36  # Kr
    return atoms


def cluster():
    atoms = argon(seed=4)[:13]
    atoms.pbc = False
    atoms.cell = np.zeros((3, 3))
    return atoms


def slab():
    atoms = argon(seed=5)
    atoms.pbc = (True, True, False)
    cell = atoms.cell.array.copy()
    cell[2, 2] += 12.0
    atoms.set_cell(cell)
    return atoms


def test_exported_and_properties(lj):
    assert mdband.Calculator is Calculator
    assert set(Calculator.implemented_properties) == {
        "energy",
        "free_energy",
        "energies",
        "forces",
        "stress",
        "stresses",
        "magnetic_forces",  # spin models only
    }
    atoms = triclinic()
    atoms.calc = Calculator(lj)
    e = atoms.get_potential_energy()
    assert atoms.get_potential_energy(force_consistent=True) == e
    energies = atoms.get_potential_energies()
    assert energies.shape == (len(atoms),)
    assert abs(energies.sum() - e) < 1e-10 * max(1.0, abs(e))
    assert atoms.get_stress().shape == (6,)
    assert atoms.get_stress(voigt=False).shape == (3, 3)


@pytest.mark.parametrize("make", [triclinic, cluster, slab], ids=["periodic", "open", "slab"])
def test_forces_match_finite_differences(lj, make):
    atoms = make()
    atoms.calc = Calculator(lj)
    forces = atoms.get_forces()
    numeric = calculate_numerical_forces(atoms, eps=1e-5)
    assert np.abs(forces).max() > 1e-3  # not trivially zero
    np.testing.assert_allclose(forces, numeric, atol=FD_ATOL, rtol=0)


@pytest.mark.parametrize("make", [triclinic, slab], ids=["periodic", "slab"])
def test_stress_matches_finite_differences(lj, make):
    atoms = make()
    atoms.calc = Calculator(lj)
    stress = atoms.get_stress()
    numeric = calculate_numerical_stress(atoms, eps=1e-6)
    assert np.abs(stress).max() > 1e-5
    np.testing.assert_allclose(stress, numeric, atol=FD_ATOL * 1e-2, rtol=1e-5)


def test_open_system_without_cell_has_no_stress(lj):
    atoms = cluster()
    atoms.calc = Calculator(lj)
    atoms.get_forces()
    with pytest.raises(PropertyNotImplementedError):
        atoms.get_stress()


def test_unknown_element_is_named(lj):
    atoms = argon()
    atoms.numbers[0] = 54  # Xe
    atoms.calc = Calculator(lj)
    with pytest.raises(UnknownElementError, match="Xe"):
        atoms.get_potential_energy()


def test_model_path_and_dtype(lj, tmp_path):
    path = tmp_path / "lj.mdband"
    lj.save(path)
    calc = Calculator(str(path), device="cpu", dtype="float64")
    assert calc.potential.dtype == torch.float64
    atoms = argon()
    atoms.calc = calc
    ref = argon()
    ref.calc = Calculator(lj)
    np.testing.assert_array_equal(atoms.get_forces(), ref.get_forces())
    with pytest.raises(MdbandError, match="float32"):
        Calculator(lj, dtype="float32")
    with pytest.raises(mdband.ModelFileError):
        Calculator(str(tmp_path / "missing.pt"))


def test_model_kept_between_calls(lj):
    atoms = argon()
    calc = Calculator(lj)
    atoms.calc = calc
    e0 = atoms.get_potential_energy()
    atoms.positions[0] += 0.05
    e1 = atoms.get_potential_energy()
    assert calc.potential is lj and e0 != e1


@pytest.mark.parametrize("make", [triclinic, cluster, slab], ids=["periodic", "open", "slab"])
def test_skin_reuse_is_exact(lj, make):
    """With a skin the list is reused while atoms move < skin/2, and results agree with a
    fresh list to rounding (only the summation order can differ)."""
    rng = np.random.default_rng(0)
    a_skin, a_ref = make(), make()
    skin = Calculator(lj, skin=1.0)
    a_skin.calc, a_ref.calc = skin, Calculator(lj)
    for _ in range(12):
        step = rng.normal(scale=0.04, size=(len(a_skin), 3))
        a_skin.positions += step
        a_ref.positions += step
        e_skin, e_ref = a_skin.get_potential_energy(), a_ref.get_potential_energy()
        assert abs(e_skin - e_ref) < 1e-10 * max(1.0, abs(e_ref))
        np.testing.assert_allclose(a_skin.get_forces(), a_ref.get_forces(), atol=1e-11, rtol=0)
        np.testing.assert_allclose(
            a_skin.get_potential_energies(), a_ref.get_potential_energies(), atol=1e-12, rtol=0
        )
    assert 1 <= skin.n_neighbour_builds < 12
    # a move beyond skin/2 forces a rebuild
    builds = skin.n_neighbour_builds
    a_skin.positions[0] += 0.6
    a_skin.get_forces()
    assert skin.n_neighbour_builds == builds + 1


def test_skin_rebuilds_on_cell_change(lj):
    atoms = argon()
    calc = Calculator(lj, skin=0.5)
    atoms.calc = calc
    atoms.get_forces()
    atoms.set_cell(atoms.cell.array * 1.01, scale_atoms=True)
    f = atoms.get_forces()
    ref = atoms.copy()
    ref.calc = Calculator(lj)
    assert calc.n_neighbour_builds == 2
    np.testing.assert_allclose(f, ref.get_forces(), atol=1e-11, rtol=0)


def test_single_atom_and_negative_skin(lj):
    atoms = Atoms("Ar", positions=[[0, 0, 0]])
    atoms.calc = Calculator(lj)
    assert atoms.get_potential_energy() == 0.0
    np.testing.assert_array_equal(atoms.get_forces(), np.zeros((1, 3)))
    with pytest.raises(MdbandError, match="skin"):
        Calculator(lj, skin=-1.0)


def test_bad_structure_raises_structure_error(lj):
    atoms = argon()
    atoms.positions[1, 2] = np.nan
    atoms.calc = Calculator(lj)
    with pytest.raises(mdband.StructureError, match="NaN"):
        atoms.get_forces()


def test_dens_model_direct_forces_and_nan_stress():
    """A dens-trained deepmd-kit checkpoint: DeepPot's forces; its stress is NaN as deepmd-kit's
    virial (the model has none)."""
    import ase.io

    fix = Path(__file__).resolve().parent / "fixtures" / "deepmd"
    atoms = ase.io.read(fix / "structures.extxyz", index=1)
    ref = np.load(fix / "dens.npz")
    atoms.calc = Calculator(str(fix / "dens.pt"), device="cpu", dtype="float64")
    np.testing.assert_allclose(atoms.get_forces(), ref["forces_1"], atol=1e-8, rtol=0)
    assert atoms.get_potential_energy() == pytest.approx(float(ref["energy_1"]), rel=1e-10)
    assert np.isnan(atoms.get_stress()).all()


# ---------------------------------------------------------------------------- spin models
SPIN_FIX = Path(__file__).resolve().parent / "fixtures" / "deepmd_spin"


def spin_atoms(i=2):
    """Frame ``i`` of the spin fixtures with its (N, 3) initial magnetic moments."""
    ref = np.load(SPIN_FIX / "spin_native.npz")
    symbols = [str(ref["type_map"][t]) for t in ref[f"atype_{i}"]]
    atoms = Atoms(symbols, positions=ref[f"coord_{i}"], cell=ref[f"cell_{i}"], pbc=ref[f"pbc_{i}"])
    atoms.set_initial_magnetic_moments(ref[f"spin_{i}"])
    return atoms


@pytest.mark.parametrize("name", ["spin_native", "spin_deepspin"])
def test_spin_model_reads_moments_and_returns_magnetic_forces(name):
    """Energy, forces, stress and magnetic_forces are the single call's; a change of the
    moments is a change of the system (ASE recalculates)."""
    pot = mdband.load_model(SPIN_FIX / f"{name}.pt", device="cpu", dtype="float64")
    atoms = spin_atoms()
    atoms.calc = Calculator(pot, skin=0.5)
    assert "magnetic_forces" in atoms.calc.implemented_properties
    m = atoms.get_initial_magnetic_moments()
    ref = pot.evaluate(atoms.positions, atoms.cell.array, atoms.pbc,
                       atoms.get_chemical_symbols(), magmoms=m)  # fmt: skip
    assert atoms.get_potential_energy() == ref.energy
    np.testing.assert_array_equal(atoms.get_forces(), ref.forces)
    np.testing.assert_array_equal(atoms.calc.get_property("magnetic_forces"), ref.magnetic_forces)
    # with the moments fixed the virial is not symmetric (the lattice feels a torque); ASE's
    # stress is its symmetric part
    full = ref.stress(atoms.get_volume())
    assert np.abs(full - full.T).max() > 1e-4
    np.testing.assert_allclose(atoms.get_stress(voigt=False), (full + full.T) / 2, rtol=0,
                               atol=1e-14)  # fmt: skip
    m2 = m.copy()
    m2[0] *= 0.5
    atoms.set_initial_magnetic_moments(m2)
    assert atoms.get_potential_energy() != ref.energy


def test_spin_model_refuses_missing_or_collinear_moments():
    from mdband.errors import SpinInputError

    pot = mdband.load_model(SPIN_FIX / "spin_native.pt", device="cpu", dtype="float64")
    atoms = spin_atoms()
    atoms.set_initial_magnetic_moments(None)
    atoms.calc = Calculator(pot)
    with pytest.raises(SpinInputError, match="set_initial_magnetic_moments"):
        atoms.get_potential_energy()
    atoms.set_initial_magnetic_moments(np.ones(len(atoms)))
    with pytest.raises(SpinInputError, match="collinear"):
        atoms.get_potential_energy()


def test_model_without_spin_ignores_moments(lj):
    atoms = argon()
    atoms.calc = Calculator(lj)
    e = atoms.get_potential_energy()
    atoms.set_initial_magnetic_moments(np.ones(len(atoms)))
    atoms.calc = Calculator(lj)
    assert atoms.get_potential_energy() == e
    assert "magnetic_forces" not in atoms.calc.results
