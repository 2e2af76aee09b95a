"""Parity with deepmd-kit 3.2.0 for multi-task heads (case embeddings, FiLM or concatenated) and
a dens-trained checkpoint (fixtures of tests/fixtures/make_heads_fixtures.py; README there)."""

import dataclasses
import json
from pathlib import Path

import ase.io
import numpy as np
import pytest
import torch

import mdband
from mdband.model.dens import nearest_edges

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"
META = json.loads((FIX / "heads.json").read_text())
FRAMES = ase.io.read(FIX / META["structures"], index=":")
HEADS = [(name, head) for name, m in META["multitask"].items() for head in m["heads"]]


def evaluate(pot, frames=FRAMES):
    return [
        pot.evaluate(a.positions, a.cell.array, a.pbc, a.get_chemical_symbols()) for a in frames
    ]


def check(results, ref, e_rel=1e-10, f_abs=1e-8, v_abs=1e-8):
    for i, r in enumerate(results):
        e = float(ref[f"energy_{i}"])
        assert abs(r.energy - e) <= e_rel * max(abs(e), 1.0), (i, r.energy, e)
        f = ref[f"forces_{i}"]
        assert np.abs(f).max() > 1e-2  # the reference is not trivially zero
        np.testing.assert_allclose(r.forces, f, rtol=0, atol=f_abs)
        np.testing.assert_allclose(
            r.atom_energy, ref[f"atom_energy_{i}"], rtol=0, atol=e_rel * max(abs(e), 1.0)
        )
        v = ref[f"virial_{i}"].reshape(3, 3)
        if np.isnan(v).all():  # deepmd-kit's dens mode has no virial
            assert np.isnan(r.virial).all()
        else:
            np.testing.assert_allclose(r.virial, v, rtol=0, atol=v_abs)


def same(a, b, tol):
    for x, y in zip(a, b):
        assert abs(x.energy - y.energy) <= tol * max(abs(y.energy), 1.0)
        np.testing.assert_allclose(x.forces, y.forces, rtol=0, atol=tol)
        np.testing.assert_allclose(x.virial, y.virial, rtol=0, atol=tol)


@pytest.mark.parametrize("name,head", HEADS)
def test_multitask_heads_float64_band_and_dense(name, head):
    ref = np.load(FIX / f"{name}.{head}.npz")
    out = {}
    for layout in ("band", "dense"):
        pot = mdband.load_model(FIX / f"{name}.pt", dtype="float64", head=head,
                                rotation_layout=layout)  # fmt: skip
        assert pot.rotation_layout == layout and pot.metadata["head"] == head
        out[layout] = evaluate(pot)
        check(out[layout], ref)
    same(out["band"], out["dense"], 1e-12)


def test_heads_differ_by_their_case_embedding():
    """The two FiLM heads share every weight but bias_atom_e and the case one-hot; with the
    biases swapped the difference left is the case embedding's (and it is not small)."""
    a = mdband.load_model(FIX / "multitask_film.pt", dtype="float64", head="water_1")
    b = mdband.load_model(FIX / "multitask_film.pt", dtype="float64", head="water_2")
    fa, fb = a.model.fitting_net, b.model.fitting_net
    assert fa.film and torch.equal(fa.case_embd, torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert torch.equal(fb.case_embd, torch.tensor([0.0, 1.0], dtype=torch.float64))
    fb.bias_atom_e.copy_(fa.bias_atom_e)
    b.model.out_bias.copy_(a.model.out_bias)
    ra, rb = evaluate(a, FRAMES[:1]), evaluate(b, FRAMES[:1])
    assert np.abs(ra[0].forces - rb[0].forces).max() > 1e-3
    fb.case_embd.copy_(fa.case_embd)
    same(ra, evaluate(b, FRAMES[:1]), 1e-12)


@pytest.mark.parametrize("name,head", [HEADS[0], HEADS[-1]])
def test_multitask_float32(name, head):
    p64 = mdband.load_model(FIX / f"{name}.pt", dtype="float64", head=head)
    p32 = mdband.load_model(FIX / f"{name}.pt", dtype="float32", head=head)
    for a, b in zip(evaluate(p32, FRAMES[1:3]), evaluate(p64, FRAMES[1:3])):
        np.testing.assert_allclose(a.forces, b.forces, rtol=0, atol=1e-5)
        assert abs(a.energy - b.energy) <= 1e-5 * max(abs(b.energy), 1.0)


def test_dens_float64_band_and_dense():
    ref = np.load(FIX / "dens.npz")
    out = {}
    for layout in ("band", "dense"):
        pot = mdband.load_model(FIX / "dens.pt", dtype="float64", rotation_layout=layout)
        assert pot.rotation_layout == layout
        assert pot.direct_forces and pot.config["active_mode"] == "dens"
        assert pot.config["sel"] == json.loads(str(ref["meta"]))["sel"]
        out[layout] = evaluate(pot)
        check(out[layout], ref)
    for a, b in zip(out["band"], out["dense"]):
        np.testing.assert_allclose(a.forces, b.forces, rtol=0, atol=1e-12)
        assert abs(a.energy - b.energy) <= 1e-12 * max(abs(b.energy), 1.0)


def test_dens_float32():
    p64 = mdband.load_model(FIX / "dens.pt", dtype="float64")
    p32 = mdband.load_model(FIX / "dens.pt", dtype="float32")
    for a, b in zip(evaluate(p32, FRAMES[:2]), evaluate(p64, FRAMES[:2])):
        np.testing.assert_allclose(a.forces, b.forces, rtol=0, atol=1e-5)
        assert abs(a.energy - b.energy) <= 1e-5 * max(abs(b.energy), 1.0)


def test_dens_keeps_the_sel_nearest_neighbours():
    """With every neighbour kept (sel raised) the numbers leave deepmd-kit's on the frames the
    fixture truncates (0-2) and not on the molecule (7 neighbours at most, sel 11)."""
    pot = mdband.load_model(FIX / "dens.pt", dtype="float64")
    ref = np.load(FIX / "dens.npz")
    pot.model.cfg = dataclasses.replace(pot.model.cfg, sel=1000)
    moved = [
        float(np.abs(r.forces - ref[f"forces_{i}"]).max()) for i, r in enumerate(evaluate(pot))
    ]
    assert min(moved[:3]) > 1e-7 and moved[3] < 1e-12, moved


def test_dens_chunked_equals_unchunked():
    whole = mdband.load_model(FIX / "dens.pt", dtype="float64")
    chunked = mdband.load_model(FIX / "dens.pt", dtype="float64", memory_budget="3MB")
    a = FRAMES[0]
    r = chunked.evaluate(a.positions, a.cell.array, a.pbc, a.get_chemical_symbols())
    assert r.chunks > 1
    same([r], evaluate(whole, FRAMES[:1]), 1e-12)


def test_nearest_edges():
    dst = torch.tensor([2, 0, 2, 2, 0, 1, 2])
    r = torch.tensor([3.0, 1.0, 1.0, 2.0, 0.5, 9.0, 2.0])
    # atom 2: lengths 3, 1, 2, 2 (edges 0, 2, 3, 6): the two shortest are 2 and the first 2.0
    assert nearest_edges(dst, r, 2).tolist() == [False, True, True, True, True, True, False]
    assert nearest_edges(dst, r, 1).tolist() == [False, False, True, False, True, True, False]
    assert nearest_edges(dst, r, 5).all()
    assert nearest_edges(dst[:0], r[:0], 3).shape == (0,)
