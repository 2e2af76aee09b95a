"""Charge/spin conditioning (``add_chg_spin_ebd``) with what else a model or a call may carry,
against deepmd-kit 3.2.0 (tests/fixtures/make_chgspin_combo_fixtures.py and
make_chgspin_fixtures.py): ZBL bridging, native and deepspin spin models, per-atom virials
(``atom_virial=True``, the calculator's ``stresses``), and batches of a bridged model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ase import Atoms

import mdband
from mdband.charge_spin import ChargeSpinInputs, MissingChargeSpinError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# name -> (fixture folder, spin model)
COMBOS = {
    "chgspin_zbl": ("deepmd", False),
    "chgspin_spin_native": ("deepmd_spin", True),
    "chgspin_spin_deepspin": ("deepmd_spin", True),
}


def reference(name: str):
    folder, _ = COMBOS.get(name, ("deepmd", False))
    return np.load(FIXTURES / folder / f"{name}.npz")


def load(name: str, **kw):
    folder, _ = COMBOS.get(name, ("deepmd", False))
    return mdband.load_model(FIXTURES / folder / f"{name}.pt", dtype="float64", **kw)


def n_frames(ref) -> int:
    return sum(1 for k in ref.files if k.startswith("coord_"))


def frames_of(ref):
    """(index, positions, cell, pbc, symbols, moments or None) of every frame of ``ref``."""
    tm = [str(t) for t in ref["type_map"]]
    ids = sorted(int(k.split("_")[1]) for k in ref.files if k.startswith("coord_"))
    for i in ids:
        sym = [tm[t] for t in ref[f"atype_{i}"]]
        spin = ref[f"spin_{i}"] if f"spin_{i}" in ref.files else None
        yield i, ref[f"coord_{i}"], ref[f"cell_{i}"], ref[f"pbc_{i}"], sym, spin


def check(res, ref, k, i, atom_virial=False):
    e = float(ref[f"energy_{k}_{i}"])
    assert abs(res.energy - e) <= 1e-10 * abs(e), (k, i, res.energy, e)
    np.testing.assert_allclose(res.forces, ref[f"forces_{k}_{i}"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(res.virial.reshape(9), ref[f"virial_{k}_{i}"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(res.atom_energy, ref[f"atom_energy_{k}_{i}"], rtol=0, atol=1e-10)
    if f"magnetic_forces_{k}_{i}" in ref.files:
        np.testing.assert_allclose(res.magnetic_forces, ref[f"magnetic_forces_{k}_{i}"], rtol=0,
                                   atol=1e-8)  # fmt: skip
    if atom_virial:
        np.testing.assert_allclose(res.atom_virial.reshape(-1, 9), ref[f"atom_virial_{k}_{i}"],
                                   rtol=0, atol=1e-8)  # fmt: skip


@pytest.mark.parametrize(
    "name,layout",
    [("chgspin_zbl", "band"), ("chgspin_zbl", "dense"), ("chgspin_spin_native", "band"),
     ("chgspin_spin_deepspin", "band"), ("chgspin_spin_native", "dense")],
)  # fmt: skip
def test_parity_with_deepmd_kit(name, layout):
    """Every (charge, spin) case on every frame: close ZBL pairs (periodic, triclinic, open),
    the spin models' magnetic configurations (energy, forces, magnetic forces, virial)."""
    pot = load(name, rotation_layout=layout)
    assert pot.rotation_layout == layout
    assert pot.charge_spin == ChargeSpinInputs(None)
    assert (pot.spin is not None) == COMBOS[name][1]
    ref = reference(name)
    for k, case in enumerate(ref["cases"]):
        cs = {"charge": int(case[0]), "spin": int(case[1])}
        for i, pos, cell, pbc, sym, spin in frames_of(ref):
            extra = {} if spin is None else {"magmoms": spin}
            check(pot.evaluate(pos, cell, pbc, sym, **cs, **extra), ref, k, i)


@pytest.mark.parametrize("name", ["chgspin", "chgspin_zbl"])
def test_atom_virials_under_each_charge(name):
    """``atom_virial=True`` with a charge and spin: deepmd-kit's per-atom virials of that
    case (they sum to the virial), and the calculator's ``stresses`` from atoms.info."""
    pot, ref = load(name), reference(name)
    for k, case in enumerate(ref["cases"]):
        cs = {"charge": int(case[0]), "spin": int(case[1])}
        for i, pos, cell, pbc, sym, _ in frames_of(ref):
            res = pot.evaluate(pos, cell, pbc, sym, atom_virial=True, **cs)
            check(res, ref, k, i, atom_virial=True)
    i, pos, cell, pbc, sym, _ = next(frames_of(ref))  # a periodic frame
    atoms = Atoms(sym, positions=pos, cell=cell, pbc=pbc)
    atoms.info.update(charge=int(ref["cases"][1][0]), spin=int(ref["cases"][1][1]))
    atoms.calc = mdband.Calculator(pot)
    stresses = atoms.get_stresses()
    w = -stresses.sum(axis=0) * atoms.get_volume()  # Voigt xx yy zz yz xz xy
    v = ref[f"virial_1_{i}"].reshape(3, 3)
    sym_v = 0.5 * (v + v.T)
    np.testing.assert_allclose(w, sym_v[[0, 1, 2, 1, 0, 0], [0, 1, 2, 2, 2, 1]], atol=1e-8)
    with pytest.raises(MissingChargeSpinError):
        pot.evaluate(pos, cell, pbc, sym, atom_virial=True)


def test_spin_model_calculator_reads_moments_and_info():
    """mdband.Calculator on a spin model with the charge/spin embedding: the moments from the
    atoms' initial magnetic moments, charge and spin from info; a changed info re-evaluates."""
    name = "chgspin_spin_deepspin"
    pot, ref = load(name), reference(name)
    i, pos, cell, pbc, sym, spin = next(frames_of(ref))
    atoms = Atoms(sym, positions=pos, cell=cell, pbc=pbc)
    atoms.set_initial_magnetic_moments(spin)
    atoms.calc = mdband.Calculator(pot)
    for k, case in enumerate(ref["cases"]):
        atoms.info.update(charge=int(case[0]), spin=int(case[1]))
        e = float(ref[f"energy_{k}_{i}"])
        assert abs(atoms.get_potential_energy() - e) <= 1e-10 * abs(e)
        np.testing.assert_allclose(atoms.calc.results["magnetic_forces"],
                                   ref[f"magnetic_forces_{k}_{i}"], rtol=0, atol=1e-8)  # fmt: skip


def test_bridged_model_batches_each_systems_charge():
    """evaluate_many of the bridged charge/spin model: the compact frames, each under another
    case, in one call: deepmd-kit's numbers for each."""
    pot, ref = load("chgspin_zbl"), reference("chgspin_zbl")
    frames = list(frames_of(ref))
    plan = [(f, k % len(ref["cases"])) for k, f in enumerate(frames + frames)]
    systems = []
    for (_i, pos, cell, pbc, sym, _), k in plan:
        atoms = Atoms(sym, positions=pos, cell=cell, pbc=pbc)
        atoms.info.update(charge=int(ref["cases"][k][0]), spin=int(ref["cases"][k][1]))
        systems.append(atoms)
    done = []
    results = pot.evaluate_many(systems, progress=done.append)
    assert len(done) == 1
    for ((i, *_), k), res in zip(plan, results):
        check(res, ref, k, i)
