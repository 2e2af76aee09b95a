"""Charge/spin conditioning (deepmd-kit's ``add_chg_spin_ebd``): parity with deepmd-kit 3.2.0 on
``chgspin*.pt`` (tests/fixtures/make_chgspin_fixtures.py) for several (charge, spin) on periodic,
triclinic and open frames, band == dense, float32, chunks, the fused ops, the CUDA-graph buffers,
two systems in one call, defaults and every refusal."""

from __future__ import annotations

import json
from pathlib import Path

import ase.io
import numpy as np
import pytest
import torch
from chunk_helpers import plan_for, sezm, tensors

import mdband
from mdband import step_graph as sg
from mdband.charge_spin import ChargeSpinError, ChargeSpinInputs, MissingChargeSpinError
from mdband.config import SeZMConfig
from mdband.graph import build_edge_graph
from mdband.kernels import _common as cm
from mdband.kernels import force_triton
from mdband.testing.sezm import small_config

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"
FRAMES = ase.io.read(FIX / "structures.extxyz", index=":")


def case_kwargs(case) -> dict:
    return {} if np.isnan(case[0]) else {"charge": int(case[0]), "spin": int(case[1])}


def run(pot, i, **kw):
    ref = np.load(FIX / "chgspin.npz")
    tm = list(ref["type_map"])
    sym = [tm[t] for t in ref[f"atype_{i}"]]
    return pot.evaluate(ref[f"coord_{i}"], ref[f"cell_{i}"], ref[f"pbc_{i}"], sym, **kw)


@pytest.mark.parametrize(
    "name,layout",
    [("chgspin", "band"), ("chgspin", "dense"), ("chgspin_default", "band")],
)
def test_parity_float64(name, layout):
    pot = mdband.load_model(FIX / f"{name}.pt", dtype="float64", rotation_layout=layout)
    assert pot.rotation_layout == layout
    ref = np.load(FIX / f"{name}.npz")
    assert list(ref["frames"]) == [0, 1, 3]  # cubic, triclinic (periodic), molecule (open)
    energies = []
    for k, case in enumerate(ref["cases"]):
        for i in ref["frames"]:
            r = run(pot, i, **case_kwargs(case))
            e = float(ref[f"energy_{k}_{i}"])
            assert abs(r.energy - e) <= 1e-10 * abs(e), (k, i, r.energy, e)
            np.testing.assert_allclose(r.forces, ref[f"forces_{k}_{i}"], rtol=0, atol=1e-8)
            np.testing.assert_allclose(r.virial.reshape(9), ref[f"virial_{k}_{i}"], atol=1e-8)
            np.testing.assert_allclose(r.atom_energy, ref[f"atom_energy_{k}_{i}"], atol=1e-10)
            energies.append(r.energy)
    assert len(set(np.round(energies, 6))) == len(energies)  # every case is its own


def test_float32_within_1e5_of_float64():
    p64 = mdband.load_model(FIX / "chgspin.pt", dtype="float64")
    p32 = mdband.load_model(FIX / "chgspin.pt", dtype="float32")
    for i, cs in ((1, (-1, 2)), (3, (2, 1))):  # triclinic periodic, open
        a = run(p64, i, charge=cs[0], spin=cs[1])
        b = run(p32, i, charge=cs[0], spin=cs[1])
        assert np.abs(a.forces).max() > 0.1
        np.testing.assert_allclose(b.forces, a.forces, rtol=0, atol=1e-5)
        assert abs(b.energy - a.energy) <= 1e-6 * abs(a.energy)


def test_inputs_declared_and_defaults():
    plain = mdband.load_model(FIX / "chgspin.pt", dtype="float64")
    dflt = mdband.load_model(FIX / "chgspin_default.pt", dtype="float64")
    assert plain.charge_spin == ChargeSpinInputs(None)
    assert dflt.charge_spin == ChargeSpinInputs((-1.0, 2.0))
    assert "defaults: charge -1, spin 2" in dflt.charge_spin.describe()
    assert "required" in plain.charge_spin.describe()
    assert mdband.load_model(FIX / "s2ffn.pt", dtype="float64").charge_spin is None
    # the default fills what is not given, one value at a time
    for kw, full in [({}, (-1, 2)), ({"charge": 2}, (2, 2)), ({"spin": 3}, (-1, 3))]:
        got = run(dflt, 3, **kw)
        want = run(plain, 3, charge=full[0], spin=full[1])
        assert got.energy == want.energy
        np.testing.assert_array_equal(got.forces, want.forces)
    row = dflt.charge_spin_of(spin=np.int64(3))
    assert row.dtype == torch.int64 and row.tolist() == [[-1, 3]]


@pytest.mark.parametrize("kw,missing", [({}, ["charge", "spin"]), ({"charge": 0}, ["spin"]),
                                        ({"spin": 1}, ["charge"])])  # fmt: skip
def test_missing_input_says_which(kw, missing):
    pot = mdband.load_model(FIX / "chgspin.pt", dtype="float64")
    with pytest.raises(MissingChargeSpinError) as info:
        run(pot, 3, **kw)
    assert info.value.missing == missing
    msg = str(info.value)
    assert "\n" not in msg and "default_chg_spin" in msg
    for name in ("charge", "spin"):
        assert (f"--{name}" in msg) == (name in missing)
    with pytest.raises(MissingChargeSpinError):  # the lower-level calls resolve the same way
        t, src, dst, ev = tensors(pot, FRAMES[3])
        pot.evaluate_edges(t, src, dst, ev)


@pytest.mark.parametrize("kw,match", [
    ({"charge": 0.5}, "whole number"), ({"charge": True}, "whole number"),
    ({"spin": "1"}, "whole number"), ({"spin": float("nan")}, "whole number"),
    ({"charge": 100}, "outside"), ({"charge": -101}, "outside"), ({"spin": -1}, "outside"),
    ({"spin": 100}, "outside"),
])  # fmt: skip
def test_bad_values_refused(kw, match):
    pot = mdband.load_model(FIX / "chgspin_default.pt", dtype="float64")
    with pytest.raises(ChargeSpinError, match=match):
        run(pot, 3, **kw)


def test_integral_floats_and_numpy_accepted():
    pot = mdband.load_model(FIX / "chgspin.pt", dtype="float64")
    a = run(pot, 3, charge=-1, spin=2)
    b = run(pot, 3, charge=-1.0, spin=np.float32(2.0))
    assert a.energy == b.energy
    assert run(pot, 3, charge=-100, spin=0).energy != a.energy  # the tables' ends
    assert np.isfinite(run(pot, 3, charge=99, spin=99).energy)


def test_model_without_embedding_refuses_charge_spin():
    pot = mdband.load_model(FIX / "s2ffn.pt", dtype="float64")
    atoms = FRAMES[3]
    args = (atoms.positions, None, False, atoms.get_chemical_symbols())
    pot.evaluate(*args)
    for kw in ({"charge": 0}, {"spin": 1}, {"charge": 0, "spin": 1}):
        with pytest.raises(ChargeSpinError, match="takes no total charge"):
            pot.evaluate(*args, **kw)
    t, src, dst, ev = tensors(pot, atoms)
    with pytest.raises(ChargeSpinError):
        pot.evaluate_edges(t, src, dst, ev, charge_spin=torch.tensor([[0, 1]]))


def test_config_keys_only_when_on():
    """Models without the embedding keep their config dict (and so their model hash)."""
    cfg = small_config()
    assert "add_chg_spin_ebd" not in cfg and "default_chg_spin" not in cfg
    on = small_config(add_chg_spin_ebd=True, default_chg_spin=(0, 1))
    assert on["default_chg_spin"] == [0, 1]
    assert SeZMConfig.from_dict(on).default_chg_spin == (0, 1)
    with pytest.raises(mdband.UnsupportedModelError, match="default_chg_spin"):
        small_config(default_chg_spin=(0, 1))
    with pytest.raises(mdband.UnsupportedModelError, match="default_chg_spin"):
        small_config(add_chg_spin_ebd=True, default_chg_spin=(0, 1, 2))


def test_model_file_round_trip(tmp_path):
    pot = mdband.load_model(FIX / "chgspin_default.pt", dtype="float64")
    pot.save(tmp_path / "m.mdband")
    back = mdband.load_model(tmp_path / "m.mdband", dtype="float64")
    assert back.charge_spin == pot.charge_spin and back.model_hash == pot.model_hash
    assert run(back, 1, charge=1, spin=3).energy == run(pot, 1, charge=1, spin=3).energy


def test_chunked_equals_unchunked():
    pot = mdband.load_model(FIX / "chgspin.pt", dtype="float64")
    atoms = FRAMES[1]
    t, src, dst, ev = tensors(pot, atoms)
    cs = pot.charge_spin_of(2, 1)
    ref = evaluate_cs(pot, t, src, dst, ev, None, cs)
    plan = plan_for(dst, len(atoms), 60)
    assert plan.n_chunks >= 3
    got = evaluate_cs(pot, t, src, dst, ev, plan, cs)
    np.testing.assert_allclose(got[0], ref[0], rtol=0, atol=1e-12 * np.abs(ref[0]).max())
    np.testing.assert_allclose(got[1], ref[1], rtol=0, atol=1e-12 * np.abs(ref[1]).max())
    other = evaluate_cs(pot, t, src, dst, ev, None, pot.charge_spin_of(0, 1))
    assert np.abs(other[1] - ref[1]).max() > 1e-3  # the charge reaches the forces


def evaluate_cs(pot, t, src, dst, ev, plan, cs):
    out = pot.evaluate_edges(t, src, dst, ev, plan=plan, charge_spin=cs)
    f, _ = pot.assemble(out.edge_grad, ev, src, dst, int(t.shape[0]))
    return out.atom_energy.numpy(), f.numpy()


def test_two_systems_in_one_call():
    """``systems`` maps atoms to charge/spin rows: one call on two disjoint frames equals two
    calls (what a batched evaluation passes)."""
    pot = mdband.load_model(FIX / "chgspin.pt", dtype="float64")
    parts, n0 = [], 0
    for atoms, cs in ((FRAMES[3], (-1, 2)), (FRAMES[1], (1, 3))):
        t, src, dst, ev = tensors(pot, atoms)
        one = pot.evaluate_edges(t, src, dst, ev, charge_spin=pot.charge_spin_of(*cs))
        parts.append((t, src + n0, dst + n0, ev, one.atom_energy, cs))
        n0 += len(atoms)
    types = torch.cat([p[0] for p in parts])
    src, dst, ev = (torch.cat([p[k] for p in parts]) for k in (1, 2, 3))
    systems = torch.cat([torch.full((len(p[0]),), k) for k, p in enumerate(parts)])
    rows = torch.tensor([p[5] for p in parts])
    got = pot.model(types, src, dst, ev.to(pot.dtype), charge_spin=rows, systems=systems)
    want = torch.cat([p[4] for p in parts])
    np.testing.assert_allclose(got.detach().numpy(), want.numpy(), rtol=0, atol=1e-12)


def test_step_graph_buffers_follow_the_charge():
    """The padded device step keeps charge/spin in a static buffer: each call's value is used,
    the default when none is given (what a captured CUDA graph replays)."""
    pot = mdband.load_model(FIX / "chgspin_default.pt", dtype="float64")
    atoms = FRAMES[0]
    g = build_edge_graph(atoms.positions, atoms.cell.array, atoms.pbc, pot.cutoff)
    arrays = (pot.types_of(atoms.get_chemical_symbols()), g.src, g.dst, g.shifts,
              atoms.positions, atoms.cell.array)  # fmt: skip
    runner = sg.StepGraphs(pot, capture=False)
    sym = atoms.get_chemical_symbols()
    for kw in ({"charge": 2, "spin": 1}, {}, {"charge": 0, "spin": 3}):
        e, f, _ = runner.run(*arrays, pot.charge_spin_of(**kw))
        ref = pot.evaluate(atoms.positions, atoms.cell.array, True, sym, **kw)
        np.testing.assert_allclose(float(e.sum()), ref.energy, rtol=1e-12)
        np.testing.assert_allclose(f.numpy(), ref.forces, rtol=0, atol=1e-11)
    assert len(runner.steps) == 1
    plain = mdband.load_model(FIX / "s2ffn.pt", dtype="float64")
    with pytest.raises(ChargeSpinError):
        sg.StepGraphs(plain, capture=False).run(*arrays, torch.tensor([[0, 1]]))


@pytest.mark.skipif(
    not (cm.TRITON_AVAILABLE and (torch.cuda.is_available() or cm.interpret_mode())),
    reason="needs Triton with CUDA or TRITON_INTERPRET=1",
)
def test_fused_ops_with_charge_spin():
    """Every fused op on its Triton kernel (the interpreter on CPU) with the charge/spin
    embedding: the torch path's numbers, float64."""
    cfg = small_config(channels=4, n_radial=4, l_schedule=(2,), mixing_layers=1,
                       add_chg_spin_ebd=True)  # fmt: skip
    atoms = FRAMES[3]
    args = (atoms.positions, None, False, atoms.get_chemical_symbols())
    ref_pot = sezm(cfg, seed=5, kernels="torch")
    ref = ref_pot.evaluate(*args, charge=-1, spin=2)
    pot = sezm(cfg, seed=5, kernels="ops")
    with force_triton():
        got = pot.evaluate(*args, charge=-1, spin=2)
    assert abs(got.energy - ref.energy) <= 1e-12 * max(1.0, abs(ref.energy))
    np.testing.assert_allclose(got.forces, ref.forces, rtol=0, atol=1e-11)
    assert ref.energy != ref_pot.evaluate(*args, charge=0, spin=1).energy


def test_meta_records_deepmd_missing_error():
    meta = json.loads(str(np.load(FIX / "chgspin.npz")["meta"]))
    assert "charge_spin is required" in meta["missing_input_error"]


def test_dens_mode_takes_charge_spin():
    """A dens-trained charge/spin model (no deepmd-kit fixture of the pair): the condition
    reaches its energy and direct-force heads; none given and no default is the typed error."""
    cfg = small_config(channels=4, n_radial=4, l_schedule=(1,), mixing_layers=1,
                       active_mode="dens", sel=8, add_chg_spin_ebd=True)  # fmt: skip
    pot = sezm(cfg, seed=1)
    assert pot.direct_forces and pot.charge_spin == ChargeSpinInputs(None)
    atoms = FRAMES[3]
    args = (atoms.positions, None, False, atoms.get_chemical_symbols())
    a, b = pot.evaluate(*args, charge=0, spin=1), pot.evaluate(*args, charge=-1, spin=2)
    assert a.energy != b.energy and np.abs(a.forces - b.forces).max() > 1e-4
    with pytest.raises(MissingChargeSpinError):
        pot.evaluate(*args)
