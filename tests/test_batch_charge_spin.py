"""Potential.evaluate_many and Committee.evaluate_many with charge/spin models
(``add_chg_spin_ebd``): every system its own total charge and spin multiplicity, deepmd-kit
3.2.0's numbers (``tests/fixtures/deepmd/chgspin*.npz``, make_chgspin_fixtures.py), the
padded CUDA-graph batches, defaults, and every refusal naming the system."""

from pathlib import Path

import numpy as np
import pytest
from ase import Atoms

import mdband
from mdband import batch as bt
from mdband.charge_spin import ChargeSpinError, MissingChargeSpinError
from mdband.committee import Committee
from mdband.io.frames import Frame
from mdband.model.factory import build_sezm, initialise_weights
from mdband.potential import Potential
from mdband.testing.sezm import small_config

FIX = Path(__file__).resolve().parent / "fixtures" / "deepmd"
REF = np.load(FIX / "chgspin.npz")
TYPE_MAP = [str(t) for t in REF["type_map"]]
CASES = [tuple(int(x) for x in c) for c in REF["cases"]]  # (charge, spin) of case k
# (frame, case) of every system of the batch: periodic cubic, triclinic and open frames, the
# same frame twice with other charges, so a row mixed up between systems shows
BATCH = [(0, 1), (1, 2), (3, 3), (0, 0), (3, 1)]


def atoms_of(i: int, case=None) -> Atoms:
    sym = [TYPE_MAP[t] for t in REF[f"atype_{i}"]]
    pbc = REF[f"pbc_{i}"]
    atoms = Atoms(sym, positions=REF[f"coord_{i}"], cell=REF[f"cell_{i}"], pbc=pbc)
    if case is not None:
        atoms.info["charge"], atoms.info["spin"] = CASES[case]
    return atoms


def check_reference(res, i: int, k: int) -> None:
    e = float(REF[f"energy_{k}_{i}"])
    assert abs(res.energy - e) <= 1e-10 * abs(e), (i, k, res.energy, e)
    np.testing.assert_allclose(res.forces, REF[f"forces_{k}_{i}"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(res.virial.reshape(9), REF[f"virial_{k}_{i}"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(res.atom_energy, REF[f"atom_energy_{k}_{i}"], rtol=0, atol=1e-10)


def same(a, b, tol=1e-10) -> None:
    assert abs(a.energy - b.energy) <= tol * max(1.0, abs(b.energy))
    np.testing.assert_allclose(a.forces, b.forces, rtol=0, atol=tol)
    np.testing.assert_allclose(a.virial, b.virial, rtol=0, atol=tol)


@pytest.fixture(scope="module")
def pot():
    return mdband.load_model(FIX / "chgspin.pt", dtype="float64")


def systems_as(kind: str):
    """BATCH as ASE atoms (info), mdband Frames, BatchSystem records or 6-tuples."""
    out = []
    for i, k in BATCH:
        a = atoms_of(i, k)
        c, s = CASES[k]
        if kind == "atoms":
            out.append(a)
        elif kind == "frame":
            out.append(Frame(a.get_chemical_symbols(), a.positions, a.cell.array, a.pbc,
                             charge=float(c), spin=float(s)))  # fmt: skip
        elif kind == "record":
            out.append(bt.BatchSystem(a.positions, a.cell.array, a.pbc, a.numbers, c, s))
        else:
            out.append((a.positions, a.cell.array, a.pbc, a.get_chemical_symbols(), c, s))
    return out


@pytest.mark.parametrize("kind", ["atoms", "frame", "record", "tuple"])
def test_each_system_its_own_charge_and_spin(pot, kind):
    """One batch of five systems with four (charge, spin) pairs: deepmd-kit's numbers for
    each, as one-by-one evaluate gives them."""
    done = []
    many = pot.evaluate_many(systems_as(kind), progress=done.append)
    assert done == [len(BATCH)]  # one model call
    for (i, k), res in zip(BATCH, many):
        check_reference(res, i, k)
        same(res, pot.evaluate(*atoms_args(i), charge=CASES[k][0], spin=CASES[k][1]))


def atoms_args(i):
    a = atoms_of(i)
    return a.positions, a.cell.array, a.pbc, a.get_chemical_symbols()


def test_padded_batch_graphs_follow_each_systems_row(pot):
    """The CUDA-graph path (padded atoms and edges, static charge/spin buffers) run eagerly
    on the CPU: the references for each system, and a second batch with other charges in
    the same bucket gets its own numbers."""
    graphs = bt.BatchGraphs(pot, capture=False)
    ev = bt.BatchEvaluator(pot, graphs=graphs)
    out = [r for done in ev.run(systems_as("atoms")) for _, r in done]
    for (i, k), res in zip(BATCH, out):
        check_reference(res, i, k)
    swapped = [(i, (k + 1) % len(CASES)) for i, k in BATCH]
    systems = [atoms_of(i, k) for i, k in swapped]
    again = [r for done in ev.run(systems) for _, r in done]
    assert len(graphs.steps) == 1 and next(iter(graphs.steps.values())).calls == 2
    for (i, k), res in zip(swapped, again):
        check_reference(res, i, k)


def test_default_fills_what_a_system_lacks():
    dflt = mdband.load_model(FIX / "chgspin_default.pt", dtype="float64")  # default (-1, 2)
    a0, a1, a3 = atoms_of(0), atoms_of(1, 2), atoms_of(3)
    a3.info["charge"] = 1  # spin from the default
    many = dflt.evaluate_many([a0, a1, a3])
    same(many[0], dflt.evaluate(*atoms_args(0), charge=-1, spin=2), 1e-10)
    check_reference(many[0], 0, CASES.index((-1, 2)))
    check_reference(many[1], 1, 2)
    same(many[2], dflt.evaluate(*atoms_args(3), charge=1, spin=2), 1e-10)


def test_missing_or_bad_values_name_the_system(pot):
    systems = systems_as("atoms")
    del systems[2].info["spin"]
    with pytest.raises(MissingChargeSpinError, match=r"^system 2: .*spin multiplicity") as info:
        pot.evaluate_many(systems)
    assert info.value.missing == ["spin"] and "\n" not in str(info.value)
    systems = systems_as("record")
    systems[1] = systems[1]._replace(charge=0.5)
    with pytest.raises(ChargeSpinError, match=r"^system 1: charge must be a whole number"):
        pot.evaluate_many(systems)


def plain_potential():
    config = small_config()
    model = build_sezm(config, None, {})
    initialise_weights(model, seed=3, gain=0.5)
    return Potential(model, kind="sezm", type_map=TYPE_MAP, cutoff=config["rcut"],
                     config=config, dtype="float64")  # fmt: skip


def test_model_without_embedding_ignores_data_refuses_records():
    """Atoms' info and frames' charge and spin are data a plain model ignores (as its
    calculator does); a record's explicit values are refused, as evaluate(charge=) is."""
    plain = plain_potential()
    systems = systems_as("atoms")
    many = plain.evaluate_many(systems)
    for (i, _), res in zip(BATCH, many):
        same(res, plain.evaluate(*atoms_args(i)), 1e-10)
    plain.evaluate_many(systems_as("frame"))
    with pytest.raises(ChargeSpinError, match=r"^system 0: this model takes no total charge"):
        plain.evaluate_many(systems_as("record"))


def test_committee_gives_charge_spin_to_the_models_that_take_it(pot):
    """A committee of a charge/spin model and a plain one: each model's results are its own
    evaluate's (the charge and spin of records too reach only the first), and the deviations
    those of Committee.evaluate."""
    plain = plain_potential()
    committee = Committee([pot, plain])
    for kind in ("atoms", "record"):
        out = committee.evaluate_many(systems_as(kind))
        for (i, k), res in zip(BATCH, out):
            c, s = CASES[k]
            check_reference(res.results[0], i, k)
            same(res.results[1], plain.evaluate(*atoms_args(i)), 1e-10)
            one = committee.evaluate(*atoms_args(i), charge=c, spin=s)
            assert res.deviation.max_devi_f == pytest.approx(one.deviation.max_devi_f, abs=1e-9)


def test_dens_model_batches_charge_spin():
    """A dens-trained charge/spin model (direct forces) in one batched call: each system's
    condition reaches its heads, as one-by-one evaluate."""
    cfg = small_config(channels=4, n_radial=4, l_schedule=(1,), mixing_layers=1,
                       active_mode="dens", sel=8, add_chg_spin_ebd=True)  # fmt: skip
    model = build_sezm(cfg, None, {})
    initialise_weights(model, seed=1, gain=0.5)
    dens = Potential(model, kind="sezm", type_map=["H", "C", "O"], cutoff=cfg["rcut"],
                     config=cfg, dtype="float64")  # fmt: skip
    assert dens.direct_forces
    many = dens.evaluate_many(systems_as("atoms"))
    for (i, k), res in zip(BATCH, many):
        one = dens.evaluate(*atoms_args(i), charge=CASES[k][0], spin=CASES[k][1])
        assert abs(res.energy - one.energy) <= 1e-10 * max(1.0, abs(one.energy))
        np.testing.assert_allclose(res.forces, one.forces, rtol=0, atol=1e-10)
    assert many[0].energy != many[3].energy  # frame 0 under two charges
