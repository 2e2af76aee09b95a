"""Spin models against deepmd-kit 3.2.0 (fixtures: tests/fixtures/make_deepmd_spin_fixtures.py,
see tests/fixtures/README.md): both schemes, float64 parity of energy, forces, magnetic forces,
virial and per-atom energies on periodic, triclinic, thin-cell and open frames; band == dense;
float32 against float64; the fused ops (Triton interpreter) and chunked evaluation."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import mdband
from mdband.kernels import force_triton

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd_spin"
CONFIGS = json.loads((FIX / "configs.json").read_text())["configs"]
VERSION_KEY = "model.Default.atomic_model.descriptor.version_tensor"
N_FRAMES = 4


def checkpoint(name: str, tmp_path: Path) -> Path:
    """The checkpoint of fixture ``name``: a committed one, or a variant built in memory from
    one exactly as the fixture script built it."""
    if (FIX / f"{name}.pt").exists():
        return FIX / f"{name}.pt"
    base = CONFIGS[name]["from"]
    sd = torch.load(FIX / base, weights_only=True)["model"]
    change = CONFIGS[name]["change"]
    if change.startswith("descriptor.version_tensor"):
        sd[VERSION_KEY] = torch.tensor(1.1, dtype=torch.float64)
    elif change.startswith("descriptor.sel"):
        extra = copy.deepcopy(sd["_extra_state"])
        extra["model_params"]["descriptor"]["sel"] = 6
        sd["_extra_state"] = extra
    elif not change.startswith("first magnetic atom"):  # that one changes the frames only
        raise AssertionError(change)
    path = tmp_path / f"{name}.pt"
    torch.save({"model": sd}, path)
    return path


def frame(ref, i):
    symbols = [str(ref["type_map"][t]) for t in ref[f"atype_{i}"]]
    return ref[f"coord_{i}"], ref[f"cell_{i}"], ref[f"pbc_{i}"], symbols, ref[f"spin_{i}"]


def evaluate(pot, ref, i):
    pos, cell, pbc, symbols, spin = frame(ref, i)
    return pot.evaluate(pos, cell, pbc, symbols, magmoms=spin)


def check(r, ref, i, e_rel, f_abs, v_abs):
    e = float(ref[f"energy_{i}"])
    assert abs(r.energy - e) <= e_rel * max(abs(e), 1.0), (r.energy, e)
    for got, key in ((r.forces, "forces"), (r.magnetic_forces, "magnetic_forces")):
        want = ref[f"{key}_{i}"]
        assert np.abs(want).max() > 1e-2  # not trivially zero
        np.testing.assert_allclose(got, want, rtol=0, atol=f_abs, err_msg=key)
    mag = ref[f"mask_mag_{i}"]
    assert np.all(r.magnetic_forces[~mag] == 0.0)  # O is not magnetic
    np.testing.assert_allclose(r.virial.reshape(9), ref[f"virial_{i}"], rtol=0, atol=v_abs)
    np.testing.assert_allclose(r.atom_energy, ref[f"atom_energy_{i}"], rtol=0,
                               atol=e_rel * max(abs(e), 1.0))  # fmt: skip


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_float64_parity(name, tmp_path):
    """The band layout (the default); the dense one gives the same numbers (next test)."""
    pot = mdband.load_model(checkpoint(name, tmp_path), device="cpu", dtype="float64")
    assert pot.rotation_layout == "band"
    ref = np.load(FIX / f"{name}.npz")
    for i in range(N_FRAMES):
        check(evaluate(pot, ref, i), ref, i, e_rel=1e-10, f_abs=1e-8, v_abs=1e-8)


@pytest.mark.parametrize("name", ["spin_native", "spin_deepspin"])
def test_band_equals_dense(name):
    """Dense rotations give the band's numbers, so they match deepmd-kit as well."""
    pots = [mdband.load_model(FIX / f"{name}.pt", device="cpu", dtype="float64",
                              rotation_layout=lay) for lay in ("band", "dense")]  # fmt: skip
    ref = np.load(FIX / f"{name}.npz")
    for i in range(N_FRAMES):
        a, b = (evaluate(p, ref, i) for p in pots)
        assert abs(a.energy - b.energy) <= 1e-12 * abs(a.energy)
        for key in ("forces", "magnetic_forces", "virial"):
            np.testing.assert_allclose(getattr(a, key), getattr(b, key), rtol=0, atol=1e-11)


@pytest.mark.parametrize("name", ["spin_native", "spin_deepspin"])
def test_float32_within_1e5_of_float64(name):
    p64 = mdband.load_model(FIX / f"{name}.pt", device="cpu", dtype="float64")
    p32 = mdband.load_model(FIX / f"{name}.pt", device="cpu", dtype="float32")
    ref = np.load(FIX / f"{name}.npz")
    for i in range(N_FRAMES):
        a, b = evaluate(p64, ref, i), evaluate(p32, ref, i)
        assert abs(a.energy - b.energy) <= 1e-5 * max(abs(a.energy), 1.0)
        for key in ("forces", "magnetic_forces"):
            np.testing.assert_allclose(getattr(b, key), getattr(a, key), rtol=0, atol=1e-5)


def small_frame(ref, i=3, n=4):
    """The first ``n`` atoms of frame ``i`` (the open cluster)."""
    pos, cell, pbc, symbols, spin = frame(ref, i)
    return pos[:n], cell, pbc, symbols[:n], spin[:n]


@pytest.mark.parametrize("name", ["spin_native", "spin_deepspin"])
def test_fused_ops_match_torch(name):
    """The fused ops' path (Triton interpreter on the CPU) gives the torch path's numbers
    (which match deepmd-kit above), float64, on a small frame (the interpreter is slow)."""
    torch_pot = mdband.load_model(FIX / f"{name}.pt", device="cpu", dtype="float64",
                                  kernels="torch")  # fmt: skip
    ops_pot = mdband.load_model(FIX / f"{name}.pt", device="cpu", dtype="float64", kernels="ops")
    ref = np.load(FIX / f"{name}.npz")
    pos, cell, pbc, symbols, spin = small_frame(ref)
    want = torch_pot.evaluate(pos, cell, pbc, symbols, magmoms=spin)
    assert np.abs(want.magnetic_forces).max() > 1e-2
    with force_triton():
        got = ops_pot.evaluate(pos, cell, pbc, symbols, magmoms=spin)
    assert abs(got.energy - want.energy) <= 1e-12 * max(abs(want.energy), 1.0)
    for key in ("forces", "magnetic_forces", "virial"):
        np.testing.assert_allclose(getattr(got, key), getattr(want, key), rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", ["spin_native", "spin_deepspin"])
def test_chunked_matches_deepmd(name):
    """A memory budget below the unchunked estimate cuts the evaluation into chunks of atoms
    (for deepspin, of the real and virtual atoms)."""
    probe = mdband.load_model(FIX / f"{name}.pt", device="cpu", dtype="float64")
    ref = np.load(FIX / f"{name}.npz")
    pos, cell, pbc, _, _ = frame(ref, 0)
    n_edges = probe.edges(pos, cell, pbc).n_edges
    est = probe.model.descriptor.memory_estimate(torch.float64)
    budget = est.unchunked(len(pos), n_edges) // 2
    pot = mdband.load_model(FIX / f"{name}.pt", device="cpu", dtype="float64",
                            memory_budget=budget)  # fmt: skip
    r = evaluate(pot, ref, 0)
    assert r.chunks > 1
    check(r, ref, 0, e_rel=1e-10, f_abs=1e-8, v_abs=1e-8)
