"""The bridge's Python side without LAMMPS: ghost exchange, the compute() buffer contract, the
mp2 test model and device selection. These run everywhere (no plugin needed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lammps_harness import ghost_layout, make_frame

from mdband.atom_virial import lammps_order
from mdband.errors import MdbandError
from mdband.lammps import bridge
from mdband.lammps.exchange import GhostExchange, owner_backend
from mdband.testing.lj import lennard_jones_potential
from mdband.testing.mp import message_passing_potential

ELEMENTS = ("Ar", "Kr")


@pytest.fixture(scope="module")
def frame():
    return make_frame(grid=(3, 3, 4), spacing=3.8, tilt=(0.1, 0.0, -0.1), seed=5)


def _compute(model, frame, x, owner, src, dst):
    n, n_all = len(frame.positions), len(x)
    ltypes = frame.types[owner].astype(np.int32)
    vec = np.ascontiguousarray(x[src] - x[dst])
    forces = np.zeros((n_all, 3))
    eatom = np.zeros(n)
    vatom = np.zeros((n_all, 9))  # LAMMPS' centroid columns
    out = np.zeros(7)
    model.compute(n, n_all - n, ltypes, src, dst, vec, forces, eatom, vatom, out)
    folded = np.zeros((n, 3))
    np.add.at(folded, owner, forces)
    vfold = np.zeros((n, 9))
    np.add.at(vfold, owner, vatom)
    return out, folded, eatom, vfold


@pytest.mark.parametrize("kind", ["lj", "mp2"])
def test_compute_buffers_match_evaluate(kind, frame):
    if kind == "lj":
        pot = lennard_jones_potential(type_map=ELEMENTS, cutoff=6.5, r_on=5.5)
    else:
        pot = message_passing_potential(type_map=ELEMENTS, cutoff=6.0, r_on=5.0)
    ref = pot.evaluate(frame.positions, frame.cell, True, frame.species, atom_virial=True)
    x, owner, src, dst = ghost_layout(frame.positions, frame.cell, pot.cutoff)
    assert len(x) > len(frame.positions)  # there are ghost atoms
    model = bridge.LammpsModel(pot, pot.types_of(ELEMENTS), backend=owner_backend(owner))
    out, forces, eatom, vatom = _compute(model, frame, x, owner, src, dst)
    assert out[0] == pytest.approx(ref.energy, rel=1e-12)
    np.testing.assert_allclose(forces, ref.forces, rtol=0, atol=1e-11)
    np.testing.assert_allclose(eatom, ref.atom_energy, rtol=0, atol=1e-12)
    voigt = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]
    w = np.array([ref.virial[a, b] for a, b in voigt])
    np.testing.assert_allclose(out[1:], w, rtol=0, atol=1e-10)
    np.testing.assert_allclose(vatom[:, :6].sum(0), w, rtol=0, atol=1e-10)
    # per atom (ghost rows folded onto their owners): the potential's deepmd-kit partition
    want = lammps_order(torch.as_tensor(ref.atom_virial)).numpy()
    np.testing.assert_allclose(vatom, want, rtol=0, atol=1e-11)
    # mp2: 2 forward exchanges, 1 backward (the embedding does not depend on positions)
    assert model.last_exchange_calls == (3 if kind == "mp2" else 0)


def test_mp2_needs_the_exchange(frame):
    """Without refreshing ghost rows the second layer reads wrong features: the parity tests
    of the exchange are not vacuous."""
    pot = message_passing_potential(type_map=ELEMENTS, cutoff=6.0, r_on=5.0)
    ref = pot.evaluate(frame.positions, frame.cell, True, frame.species)
    x, owner, src, dst = ghost_layout(frame.positions, frame.cell, pot.cutoff)
    no_comm = bridge.LammpsModel(pot, pot.types_of(ELEMENTS), backend=lambda rows, rev: None)
    out, forces, _, _ = _compute(no_comm, frame, x, owner, src, dst)
    assert abs(out[0] - ref.energy) > 1e-3  # parity tolerances are 1e-10 rel., 1e-8 eV/Å
    assert np.max(np.abs(forces - ref.forces)) > 1e-3


def test_exchange_autograd():
    owner = np.array([0, 1, 2, 0, 2, 2])  # rows 3..5 are ghosts of 0, 2, 2
    ex = GhostExchange(owner_backend(owner), n_all=6, n_local=3)
    x = torch.randn(6, 2, 3, dtype=torch.float32, requires_grad=True)
    y = ex(x)
    assert y.dtype == torch.float32 and y.shape == x.shape
    torch.testing.assert_close(y.detach(), x.detach()[torch.as_tensor(owner)])
    w = torch.randn(6, 2, 3)
    (grad,) = torch.autograd.grad((y * w).sum(), x)
    expected = torch.zeros(6, 2, 3)
    expected.index_add_(0, torch.as_tensor(owner), w)
    torch.testing.assert_close(grad, expected)
    assert ex.calls == 2
    with pytest.raises(ValueError, match="expects 6 rows"):
        ex(torch.zeros(5, 2))


def test_select_device(monkeypatch):
    assert bridge.select_device("cpu", 3).type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bridge.select_device("auto", 1).type == "cpu"
    with pytest.raises(MdbandError, match="CUDA is not available"):
        bridge.select_device("cuda", 0)
    with pytest.raises(MdbandError, match="unknown device"):
        bridge.select_device("tpu", 0)
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: chosen.append(d))
    assert bridge.select_device("auto", 6) == torch.device("cuda", 2)  # local rank 6 → GPU 6 % 4
    assert bridge.select_device("cuda", 3) == torch.device("cuda", 3)
    assert bridge.select_device("cuda:1", 3) == torch.device("cuda", 1)
    assert chosen == [torch.device("cuda", 2), torch.device("cuda", 3), torch.device("cuda", 1)]


def test_mp2_model_file_roundtrip(tmp_path):
    pot = message_passing_potential(type_map=ELEMENTS, seed=3)
    pot.save(tmp_path / "mp2.mdband")
    back = bridge.load_potential(str(tmp_path / "mp2.mdband"), torch.device("cpu"), "float64", None)
    assert back.kind == "mp2" and back.model_hash == pot.model_hash
    f = make_frame(grid=(3, 3, 3), seed=4)
    e1 = pot.evaluate(f.positions, f.cell, True, f.species).energy
    e2 = back.evaluate(f.positions, f.cell, True, f.species).energy
    assert e1 == e2


# ---------------------------------------------------------------------- one rank: ghost owners
def _raw_compute(model, frame, x, owner, src, dst):
    n, n_all = len(frame.positions), len(x)
    ltypes = frame.types[owner].astype(np.int32)
    vec = np.ascontiguousarray(x[src] - x[dst])
    buffers = dict(forces=np.zeros((n_all, 3)), eatom=np.zeros(n), vatom=np.zeros((n_all, 9)))
    out = np.zeros(7)
    model.compute(n, n_all - n, ltypes, src, dst, vec, buffers["forces"], buffers["eatom"],
                  buffers["vatom"], out)  # fmt: skip
    return out, buffers


def _sezm_potential():
    from mdband.model.factory import random_potential
    from mdband.testing.sezm import small_config

    cfg = small_config(type_map=ELEMENTS, rcut=5.0)
    return random_potential(cfg, seed=2, gain=0.5, dtype="float64")


@pytest.mark.parametrize("kind", ["mp2", "sezm"])
def test_one_rank_maps_ghosts_to_owners(kind, frame):
    """nprocs = 1: ghost neighbours are mapped to their owners (one forward exchange of the row
    indices) and only local atoms are evaluated; results equal Potential.evaluate and the
    per-layer exchange path, ghost rows of the buffers stay zero."""
    if kind == "mp2":
        pot = message_passing_potential(type_map=ELEMENTS, cutoff=6.0, r_on=5.0)
    else:
        pot = _sezm_potential()
    ref = pot.evaluate(frame.positions, frame.cell, True, frame.species)
    x, owner, src, dst = ghost_layout(frame.positions, frame.cell, pot.cutoff)
    n = len(frame.positions)
    types = pot.types_of(ELEMENTS)
    one = bridge.LammpsModel(pot, types, {"nprocs": 1}, backend=owner_backend(owner))
    out, buf = _raw_compute(one, frame, x, owner, src, dst)
    assert one.last_path == "owners" and one.last_exchange_calls == 1
    assert not buf["forces"][n:].any() and not buf["vatom"][n:].any()
    assert out[0] == pytest.approx(ref.energy, rel=1e-12)
    np.testing.assert_allclose(buf["forces"][:n], ref.forces, rtol=0, atol=1e-11)
    np.testing.assert_allclose(buf["eatom"], ref.atom_energy, rtol=0, atol=1e-12)
    voigt = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]
    np.testing.assert_allclose(out[1:], [ref.virial[a, b] for a, b in voigt], rtol=0, atol=1e-10)
    # per-atom virials once folded onto owners equal the exchange path's
    two = bridge.LammpsModel(pot, types, {"nprocs": 2}, backend=owner_backend(owner))
    out2, buf2 = _raw_compute(two, frame, x, owner, src, dst)
    assert two.last_path == "exchange"
    folded = np.zeros((n, 9))
    np.add.at(folded, owner, buf2["vatom"])
    np.testing.assert_allclose(buf["vatom"][:n], folded, rtol=0, atol=1e-11)
    np.testing.assert_allclose(out[1:], out2[1:], rtol=0, atol=1e-10)


def test_one_rank_through_step_graphs(frame):
    """The one-rank path hands edge vectors to StepGraphs (graphs on CUDA; here its eager padded
    path), with LAMMPS' virial components taken from the transposed assembly."""
    from mdband.step_graph import StepGraphs

    pot = _sezm_potential()
    pot._steps = StepGraphs(pot, capture=False)
    ref = pot.evaluate(frame.positions, frame.cell, True, frame.species)
    x, owner, src, dst = ghost_layout(frame.positions, frame.cell, pot.cutoff)
    n = len(frame.positions)
    model = bridge.LammpsModel(pot, pot.types_of(ELEMENTS), {"nprocs": 1},
                               backend=owner_backend(owner))  # fmt: skip
    vec = np.ascontiguousarray(x[src] - x[dst])
    forces, eatom, out = np.zeros((len(x), 3)), np.zeros(n), np.zeros(7)
    model.compute(n, len(x) - n, frame.types[owner].astype(np.int32), src, dst, vec, forces,
                  eatom, None, out)  # fmt: skip
    assert any(k[0] == "vectors" for k in pot._steps.steps)  # it went through run_vectors
    voigt = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]
    np.testing.assert_allclose(out[1:], [ref.virial[a, b] for a, b in voigt], rtol=0, atol=1e-10)
    np.testing.assert_allclose(forces[:n], ref.forces, rtol=0, atol=1e-11)
    assert not forces[n:].any()
    np.testing.assert_allclose(eatom, ref.atom_energy, rtol=0, atol=1e-12)


def test_one_rank_falls_back_to_the_exchange(frame):
    """Owners that are not local atoms (a backend that does not fill ghost rows) → exchange."""
    pot = message_passing_potential(type_map=ELEMENTS, cutoff=6.0, r_on=5.0)
    x, owner, src, dst = ghost_layout(frame.positions, frame.cell, pot.cutoff)
    model = bridge.LammpsModel(pot, pot.types_of(ELEMENTS), {"nprocs": 1},
                               backend=lambda rows, rev: None)  # fmt: skip
    assert model.owners(len(x), len(frame.positions)) is None
    _raw_compute(model, frame, x, owner, src, dst)
    assert model.last_path == "exchange"


def test_exchange_with_chunked_evaluation(frame):
    """Several ranks, SeZM evaluated in chunks of destination atoms (a memory budget): each
    rank chunks its local atoms and the per-layer exchange moves whole node tensors as before,
    so results and exchange calls equal the unchunked evaluation's."""
    from mdband.model.factory import build_sezm
    from mdband.potential import Potential

    pot = _sezm_potential()
    x, owner, src, dst = ghost_layout(frame.positions, frame.cell, pot.cutoff)
    est = pot.model.descriptor.memory_estimate(torch.float64)
    budget = est.chunked(len(x), len(src), len(src) // 5)
    model = build_sezm(pot.config, pot.model.state_dict(), {"memory_budget": budget})
    chunked = Potential(model, kind="sezm", type_map=pot.type_map, cutoff=pot.cutoff,
                        config=pot.config, dtype="float64")  # fmt: skip
    types = pot.types_of(ELEMENTS)
    results = []
    for p in (pot, chunked):
        lm = bridge.LammpsModel(p, types, {"nprocs": 2}, backend=owner_backend(owner))
        out, buf = _raw_compute(lm, frame, x, owner, src, dst)
        assert lm.last_path == "exchange"
        results.append((out, buf, lm.last_exchange_calls, p.last_chunks))
    (out0, buf0, calls0, n0), (out1, buf1, calls1, n1) = results
    assert n0 == 1 and n1 >= 4
    assert calls1 == calls0 > 0
    assert out1[0] == pytest.approx(out0[0], rel=1e-12)
    np.testing.assert_allclose(out1[1:], out0[1:], rtol=0, atol=1e-11)
    for key in ("forces", "eatom", "vatom"):
        np.testing.assert_allclose(buf1[key], buf0[key], rtol=0, atol=1e-11)
