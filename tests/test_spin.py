"""Spin models at run time (mdband/spin.py): the moments' checks, the magnetic forces and the
virial as derivatives of the energy (finite differences), the deepspin edge set, tensor in/out.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import mdband
from mdband.errors import MdbandError, SpinInputError
from mdband.spin import deepspin_edges

FIX = Path(__file__).resolve().parent / "fixtures" / "deepmd_spin"
SCHEMES = ["spin_native", "spin_deepspin"]


@pytest.fixture(scope="module", params=SCHEMES)
def spin_pot(request):
    return mdband.load_model(FIX / f"{request.param}.pt", device="cpu", dtype="float64")


def frame(i=2):
    """Frame ``i`` of the fixtures (default: the thin periodic cell, 5 atoms)."""
    ref = np.load(FIX / "spin_native.npz")
    symbols = [str(ref["type_map"][t]) for t in ref[f"atype_{i}"]]
    return ref[f"coord_{i}"], ref[f"cell_{i}"], ref[f"pbc_{i}"], symbols, ref[f"spin_{i}"]


# ---------------------------------------------------------------------------- inputs
def test_missing_and_malformed_moments_are_refused(spin_pot):
    pos, cell, pbc, sym, spin = frame()
    with pytest.raises(SpinInputError, match="magnetic moment"):
        spin_pot.evaluate(pos, cell, pbc, sym)
    with pytest.raises(SpinInputError, match="collinear"):
        spin_pot.evaluate(pos, cell, pbc, sym, magmoms=spin[:, 2])
    with pytest.raises(SpinInputError, match=r"shape \(5, 3\)"):
        spin_pot.evaluate(pos, cell, pbc, sym, magmoms=spin[:4])
    bad = spin.copy()
    bad[0, 0] = np.nan
    with pytest.raises(SpinInputError, match="NaN"):
        spin_pot.evaluate(pos, cell, pbc, sym, magmoms=bad)


def test_a_model_without_spin_refuses_moments():
    pot = mdband.load_model(FIX.parent / "deepmd" / "s2ffn.pt", device="cpu", dtype="float64")
    assert pot.spin is None
    with pytest.raises(MdbandError, match="not a spin model"):
        pot.evaluate(np.zeros((1, 3)), None, False, ["H"], magmoms=np.zeros((1, 3)))
    assert pot.evaluate(np.zeros((1, 3)), None, False, ["H"]).magnetic_forces is None


def test_moments_of_non_magnetic_atoms_are_ignored(spin_pot):
    """deepmd-kit ignores the moment of an atom whose type has use_spin false (O here)."""
    pos, cell, pbc, sym, spin = frame()
    o = [k for k, s in enumerate(sym) if s == "O"]
    assert o
    other = spin.copy()
    other[o] = [[0.3, -1.2, 0.7]] * len(o)
    a = spin_pot.evaluate(pos, cell, pbc, sym, magmoms=spin)
    b = spin_pot.evaluate(pos, cell, pbc, sym, magmoms=other)
    assert a.energy == b.energy
    np.testing.assert_array_equal(a.forces, b.forces)
    assert np.all(a.magnetic_forces[o] == 0.0)


def test_tensor_input_gives_tensors_with_the_same_numbers(spin_pot):
    pos, cell, pbc, sym, spin = frame()
    a = spin_pot.evaluate(pos, cell, pbc, sym, magmoms=spin)
    b = spin_pot.evaluate(torch.tensor(pos), torch.tensor(cell), pbc, sym,
                          magmoms=torch.tensor(spin))  # fmt: skip
    assert isinstance(b.magnetic_forces, torch.Tensor) and b.magnetic_forces.dtype == torch.float64
    assert float(b.energy) == a.energy
    np.testing.assert_array_equal(b.magnetic_forces.numpy(), a.magnetic_forces)
    np.testing.assert_array_equal(b.virial.numpy(), a.virial)
    c = spin_pot.evaluate(pos, cell, pbc, sym, magmoms=spin, compute_virial=False)
    assert np.all(c.virial == 0.0) and c.energy == a.energy


# ---------------------------------------------------------------------------- derivatives
def test_magnetic_forces_are_minus_the_moment_gradient(spin_pot):
    """-∂E/∂s by central differences (h = 1e-5 μB): an Fe and a Ni atom, two components each."""
    pos, cell, pbc, sym, spin = frame()
    r = spin_pot.evaluate(pos, cell, pbc, sym, magmoms=spin)
    h = 1e-5
    mag = [sym.index("Fe"), sym.index("Ni")]
    assert np.abs(r.magnetic_forces[mag]).max() > 1e-2
    for k in mag:
        for c in (0, 2):
            up, down = spin.copy(), spin.copy()
            up[k, c] += h
            down[k, c] -= h
            e_up = spin_pot.evaluate(pos, cell, pbc, sym, magmoms=up).energy
            e_down = spin_pot.evaluate(pos, cell, pbc, sym, magmoms=down).energy
            fd = -(e_up - e_down) / (2 * h)
            assert abs(fd - r.magnetic_forces[k, c]) < 1e-6, (k, c, fd, r.magnetic_forces[k, c])


def test_forces_and_virial_hold_the_moments_fixed(spin_pot):
    """Forces = -∂E/∂r and virial W = -∂E/∂ε (positions and cell strained by (1 + ε), the
    moments unchanged), by central differences."""
    pos, cell, pbc, sym, spin = frame()
    r = spin_pot.evaluate(pos, cell, pbc, sym, magmoms=spin)

    def energy(p, c):
        return spin_pot.evaluate(p, c, pbc, sym, magmoms=spin).energy

    h = 1e-5
    for k, c in [(0, 0), (4, 1)]:
        up, down = pos.copy(), pos.copy()
        up[k, c] += h
        down[k, c] -= h
        fd = -(energy(up, cell) - energy(down, cell)) / (2 * h)
        assert abs(fd - r.forces[k, c]) < 1e-6
    for a, b in [(1, 1), (0, 1), (2, 0)]:
        eps = np.zeros((3, 3))
        eps[a, b] = h
        e_up = energy(pos @ (np.eye(3) + eps), cell @ (np.eye(3) + eps))
        e_down = energy(pos @ (np.eye(3) - eps), cell @ (np.eye(3) - eps))
        fd = -(e_up - e_down) / (2 * h)  # r' = r (1 + ε): ∂E/∂ε_ab = Σ r_a ∂E/∂r_b = -W_ba
        assert abs(fd - r.virial[b, a]) < 1e-6, (a, b, fd, r.virial[b, a])


# ---------------------------------------------------------------------------- deepspin edges
def test_deepspin_edges_keep_the_sel_nearest_real_neighbours():
    """Atom 0 (magnetic) with 4 real neighbours at 1, 2, 3, 4 Å and sel 2: only the two
    nearest and their virtual atoms remain its (and its virtual atom's) neighbours."""
    types = torch.tensor([0, 0, 1, 0, 1])
    src = torch.tensor([1, 2, 3, 4])
    dst = torch.zeros(4, dtype=torch.long)
    vec = torch.tensor([[1.0, 0, 0], [0, 2.0, 0], [0, 0, 3.0], [4.0, 0, 0]], dtype=torch.float64)
    mag = torch.tensor([True, True, False, True, False])
    d = torch.zeros(5, 3, dtype=torch.float64)
    d[mag] = torch.tensor([[0.1, 0, 0], [0, 0.2, 0], [0, 0, 0.3]], dtype=torch.float64)
    types2, s2, t2, v2, disp = deepspin_edges(types, src, dst, vec, d, mag, 2, 2, 6.0)
    assert types2.tolist() == [0, 0, 1, 0, 1, 2, 2, 2]
    np.testing.assert_array_equal(disp.numpy(), d[mag].numpy())
    edges = {(int(a), int(b)) for a, b in zip(s2, t2)}
    # nodes: 0-4 real, 5 = virtual of 0, 6 = virtual of 1, 7 = virtual of 3; atom 2 is not
    # magnetic (no virtual atom), atoms 3 and 4 are beyond sel; every magnetic atom and its
    # virtual atom see each other
    near = {(1, 0), (6, 0), (2, 0), (5, 0), (0, 5), (1, 5), (6, 5), (2, 5)}
    assert edges == near | {(6, 1), (1, 6), (7, 3), (3, 7)}
    got = {(int(a), int(b)): v for a, b, v in zip(s2, t2, v2.numpy())}
    np.testing.assert_allclose(got[(6, 5)], [1.0 - 0.1, 0.2, 0.0])  # vec + d_1 - d_0
    np.testing.assert_allclose(got[(5, 0)], [0.1, 0.0, 0.0])  # own virtual atom


def test_deepspin_edges_drop_the_coincident_own_pair_and_the_cutoff():
    types = torch.tensor([0, 0])
    src, dst = torch.tensor([1, 0]), torch.tensor([0, 1])
    vec = torch.tensor([[2.9, 0, 0], [-2.9, 0, 0]], dtype=torch.float64)
    mag = torch.tensor([True, True])
    d = torch.tensor([[0.0, 0, 0], [0.2, 0, 0]], dtype=torch.float64)  # atom 0: zero moment
    _, s2, t2, v2, _ = deepspin_edges(types, src, dst, vec, d, mag, 10, 1, 3.0)
    edges = {(int(a), int(b)) for a, b in zip(s2, t2)}
    assert (2, 0) not in edges and (0, 2) not in edges  # coincident: |v| = 0
    assert (3, 1) in edges and (1, 3) in edges
    assert (3, 0) not in edges and (3, 2) not in edges  # 3.1 Å > rcut
    assert float(torch.linalg.vector_norm(v2, dim=-1).max()) <= 3.0
