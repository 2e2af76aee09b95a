"""Potential.evaluate_many (mdband.batch): many systems as disjoint graphs in few model calls,
the numbers of one-by-one Potential.evaluate per system."""

from pathlib import Path

import ase.io
import numpy as np
import pytest
import torch
from ase import Atoms
from ase.build import bulk, molecule

import mdband
from mdband import batch as bt
from mdband.errors import MdbandError, StructureError, UnknownElementError
from mdband.io.frames import Frame
from mdband.model.factory import build_sezm, initialise_weights
from mdband.potential import Potential
from mdband.testing.sezm import small_config

# float64 acceptance tolerances of issue 43
E_REL, F_ABS, W_ABS = 1e-12, 1e-10, 1e-10


def make_potential(dtype="float64", **options):
    config = small_config()
    model = build_sezm(config, None, options)
    initialise_weights(model, seed=3, gain=0.5)
    return Potential(model, kind="sezm", type_map=["H", "C", "O"], cutoff=config["rcut"],
                     config=config, dtype=dtype)  # fmt: skip


def mixed_systems():
    """Periodic cubic, triclinic, a cell thinner than the cutoff, a slab, an open molecule
    (as a record), isolated atoms (no edge), no atoms (a Frame), of H, C and O."""
    cubic = bulk("C", "diamond", a=3.6, cubic=True)
    cubic.rattle(0.05, seed=1)
    cubic.symbols[[1, 6]] = ["O", "H"]
    tri = bulk("C", "fcc", a=3.9).repeat((2, 1, 1))
    tri.cell[1] += [0.4, 0.0, 0.3]
    tri.cell[2] += [0.2, 0.5, 0.0]
    tri.rattle(0.05, seed=2)
    tri.symbols[0] = "O"
    thin = Atoms("CO", positions=[[0, 0, 0], [1.1, 1.2, 0.9]], cell=[[2.2, 0, 0], [0.3, 2.5, 0],
                 [0, 0.4, 2.4]], pbc=True)  # fmt: skip
    slab = bulk("C", "diamond", a=3.6, cubic=True)
    slab.pbc = (True, True, False)
    slab.rattle(0.05, seed=3)
    mol = molecule("CH3OH")
    record = (mol.positions, None, False, mol.get_chemical_symbols())
    lone = Atoms("OH", positions=[[0, 0, 0], [9.0, 0, 0]])
    empty = Frame(species=[], positions=np.zeros((0, 3)), cell=np.eye(3) * 5, pbc=np.ones(3, bool))
    return [cubic, tri, record, thin, lone, slab, empty, cubic.copy()]


def one_by_one(pot, systems):
    out = []
    for s in systems:
        rec = bt.as_record(s)
        if len(rec.positions) == 0:
            out.append(None)
            continue
        out.append(pot.evaluate(rec.positions, rec.cell, rec.pbc, rec.species))
    return out


def assert_same(many, refs):
    assert len(many) == len(refs)
    for r, ref in zip(many, refs):
        if ref is None:  # no atoms: zeros
            assert r.energy == 0.0 and r.forces.shape == (0, 3) and not r.virial.any()
            continue
        assert abs(r.energy - ref.energy) <= E_REL * max(abs(ref.energy), 1e-300)
        np.testing.assert_allclose(r.forces, ref.forces, rtol=0, atol=F_ABS)
        np.testing.assert_allclose(r.virial, ref.virial, rtol=0, atol=W_ABS)
        np.testing.assert_allclose(r.atom_energy, ref.atom_energy, rtol=0, atol=1e-12)


def budget_for(pot, systems, factor=1.5):
    """A memory budget every system fits alone but their batch does not."""
    est = pot.model.descriptor.memory_estimate(torch.float64)
    sizes = []
    for s in systems:
        rec = bt.as_record(s)
        ev = bt.BatchEvaluator(pot)
        p = ev.prepare(0, rec)
        sizes.append(est.unchunked(p.n_atoms, p.n_edges))
    return int(factor * max(sizes))


@pytest.mark.parametrize("layout", ["band", "dense"])
def test_equals_one_by_one_with_budget_sub_batches(layout):
    """Mixed periodic/triclinic/thin/slab/open/edgeless/empty systems of H, C, O: float64
    equal to one-by-one evaluate, with a budget that forces several model calls."""
    systems = mixed_systems()
    probe = make_potential(rotation_layout=layout)
    budget = budget_for(probe, systems)
    pot = make_potential(rotation_layout=layout, memory_budget=f"{budget}b")
    assert pot.rotation_layout == layout
    refs = one_by_one(probe, systems)
    done = []
    many = pot.evaluate_many(systems, progress=done.append)
    assert_same(many, refs)
    assert len(done) >= 3 and done[-1] == len(systems)  # several calls, none chunked
    assert all(r.chunks == 1 for r in many)
    # without a budget: one model call
    done.clear()
    assert_same(probe.evaluate_many(systems, progress=done.append), refs)
    assert done == [len(systems)]


def test_empty_list_and_limits():
    pot = make_potential()
    assert pot.evaluate_many([]) == []
    systems = mixed_systems()
    done = []
    pot.evaluate_many(systems, batch_size=3, progress=done.append)
    assert done == [3, 6, 8]
    done.clear()
    n_atoms = [len(bt.as_record(s).positions) for s in systems]
    assert_same(pot.evaluate_many(systems, batch_atoms=10, progress=done.append),
                one_by_one(pot, systems))  # fmt: skip
    assert done == [2, 5, 7, 8] and n_atoms == [8, 2, 6, 2, 2, 8, 0, 8]
    for bad in (0, -2, 1.5, True):
        with pytest.raises(MdbandError, match="batch_size must be a positive integer"):
            pot.evaluate_many(systems, batch_size=bad)
    with pytest.raises(MdbandError, match="batch_atoms must be a positive integer"):
        pot.evaluate_many(systems, batch_atoms=0)


def test_only_edgeless_and_empty_systems():
    pot = make_potential()
    lone = Atoms("OHC", positions=[[0, 0, 0], [9.0, 0, 0], [0, 9.0, 0]])
    empty = (np.zeros((0, 3)), None, False, [])
    many = pot.evaluate_many([empty, lone, empty])
    ref = pot.evaluate(lone.positions, None, False, lone.numbers)
    assert many[0].energy == 0.0 and many[2].forces.shape == (0, 3)
    assert many[1].energy == pytest.approx(ref.energy, rel=1e-14)
    assert not many[1].forces.any() and not many[1].virial.any()


@pytest.mark.parametrize(
    ("item", "error", "message"),
    [
        ((np.zeros((2, 3)), None, False, ["H"]), MdbandError, "system 1: 2 positions but 1"),
        ((np.zeros((1, 3)), None, False, ["Fe"]), UnknownElementError, "system 1: element"),
        ((np.full((1, 3), np.nan), None, False, ["H"]), StructureError, "system 1: positions"),
        ((np.zeros((1, 3)), np.zeros((3, 3)), True, ["H"]), StructureError, "system 1: cell"),
        ((np.zeros((1, 3)), None, False, None), MdbandError, "system 1: no species"),
        ("H2O", MdbandError, "system 1: expected ase.Atoms"),
        ((np.zeros((1, 3)), None, "yes", ["H"]), StructureError, "system 1: pbc"),
    ],
)
def test_bad_systems_are_named(item, error, message):
    pot = make_potential()
    with pytest.raises(error, match=message):
        pot.evaluate_many([molecule("H2O"), item])


def test_cell_list_backend_and_tensor_inputs():
    """The cell list (the CUDA models' neighbour list, here with torch on the CPU) gives the
    numbers of vesin; tensor records are read on the host."""
    systems = mixed_systems()
    pot = make_potential(neighbour_list="cell_list")
    assert pot.neighbour_backend == "cell_list"
    refs = one_by_one(make_potential(), systems)
    assert_same(pot.evaluate_many(systems), refs)
    a = systems[0]
    rec = bt.BatchSystem(torch.tensor(a.positions), torch.tensor(a.cell.array), True, a.numbers)
    assert_same(pot.evaluate_many([rec]), refs[:1])


def test_padded_batch_graph_steps_equal_eager():
    """The CUDA-graph path (atoms padded to atom_capacity, edges to edge_capacity, one bucket
    per padded size) run eagerly on the CPU: same numbers as unpadded, buckets reused."""
    systems = mixed_systems()
    pot = make_potential()
    refs = one_by_one(pot, systems)
    graphs = bt.BatchGraphs(pot, capture=False)
    ev = bt.BatchEvaluator(pot, graphs=graphs, batch_size=4)
    out = [r for done in ev.run(systems) for _, r in done]
    assert_same(out, refs)
    assert len(graphs.steps) == 2
    keys = sorted(graphs.steps)
    assert all(k[1] == bt.atom_capacity(k[1]) and k[1] % bt.MIN_ATOM_GRANULE == 0 for k in keys)
    again = [r for done in ev.run(systems) for _, r in done]
    assert len(graphs.steps) == 2 and all(s.calls == 2 for s in graphs.steps.values())
    for x, y in zip(out, again):
        assert x.energy == y.energy and np.array_equal(x.forces, y.forces)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 255, 256, 257, 1000, 4097, 100_000])
def test_atom_capacity(n):
    cap = bt.atom_capacity(n)
    assert n <= cap < n + max(bt.MIN_ATOM_GRANULE, n / 8)
    assert bt.atom_capacity(cap) == cap and bt.atom_capacity(n + 1) >= cap
    assert bt.atom_capacity(0) == 0


def test_out_of_memory_splits_the_batch(monkeypatch):
    """A batch that runs out of GPU memory is split in halves (down to one system)."""
    pot = make_potential()
    systems = mixed_systems()[:4]
    real = bt.batch_forward
    sizes = []

    def tight(pot_, types, *args):
        sizes.append(int(types.shape[0]))
        if types.shape[0] > 10:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(pot_, types, *args)

    monkeypatch.setattr(bt, "batch_forward", tight)
    assert_same(pot.evaluate_many(systems), one_by_one(pot, systems))
    assert sizes == [18, 10, 8]  # 8 + 2 + 6 + 2 atoms: halves of 10 and 8
    monkeypatch.setattr(bt, "batch_forward", lambda *a: (_ for _ in ()).throw(
        torch.OutOfMemoryError("simulated")))  # fmt: skip
    with pytest.raises(torch.OutOfMemoryError):
        pot.evaluate_many(systems[:1])


def test_fused_ops_interpreted_float32():
    """The fused Triton ops (interpreted on the CPU) batch too: float32 rounding of one by one."""
    pot = make_potential(dtype="float32", kernels="ops")
    systems = [s for s in mixed_systems() if not isinstance(s, Frame)][:4]
    refs = one_by_one(pot, systems)
    for r, ref in zip(pot.evaluate_many(systems), refs):
        assert r.energy == pytest.approx(ref.energy, rel=1e-6)
        np.testing.assert_allclose(r.forces, ref.forces, rtol=0, atol=1e-5)
        np.testing.assert_allclose(r.virial, ref.virial, rtol=0, atol=1e-5)


def test_other_model_kinds_batch():
    """Any energy module on edges batches: the Lennard-Jones test kind."""
    from mdband.testing.lj import lennard_jones_potential

    pot = lennard_jones_potential(type_map=("H", "C", "O"), sigma=1.2, cutoff=4.0, r_on=3.0)
    systems = mixed_systems()
    assert_same(pot.evaluate_many(systems, compute_virial=True), one_by_one(pot, systems))
    assert not any(r.virial.any() for r in pot.evaluate_many(systems, compute_virial=False))


FIX = Path(__file__).resolve().parent / "fixtures"


def test_direct_force_model_batches():
    """deepmd-kit's dens mode (forces from the network, no virial): the forces of one by one,
    NaN virials as evaluate gives them (zeros without compute_virial)."""
    pot = mdband.load_model(FIX / "deepmd" / "dens.pt", dtype="float64")
    assert pot.direct_forces
    frames = ase.io.read(FIX / "deepmd" / "structures.extxyz", ":")
    many = pot.evaluate_many(frames, batch_size=2)
    for atoms, r in zip(frames, many):
        ref = pot.evaluate(atoms.positions, atoms.cell.array, atoms.pbc, atoms.numbers)
        assert r.energy == pytest.approx(ref.energy, rel=1e-12)
        np.testing.assert_allclose(r.forces, ref.forces, rtol=0, atol=1e-10)
        assert np.isnan(r.virial).all() and np.isnan(ref.virial).all()
    assert not pot.evaluate_many(frames[:1], compute_virial=False)[0].virial.any()


def test_spin_models_are_refused():
    pot = mdband.load_model(FIX / "deepmd_spin" / "spin_native.pt", dtype="float64")
    with pytest.raises(MdbandError, match="evaluate_many does not batch spin models"):
        pot.evaluate_many([])
