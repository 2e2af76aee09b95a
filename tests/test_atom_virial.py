"""Per-atom virials (``Result.atom_virial``, ``Calculator`` ``stresses``): deepmd-kit's
``DeepPot.eval(..., atomic=True)`` to 1e-10 in float64, the sum rule, and ASE's definition of
per-atom stresses (its own Lennard-Jones calculator)."""

import json
from pathlib import Path

import ase.io
import numpy as np
import pytest
import torch
from ase import Atoms
from ase.calculators.lj import LennardJones as AseLennardJones

import mdband
from mdband.atom_virial import LAMMPS_CENTROID, ase_stresses, lammps_order
from mdband.testing.lj import lennard_jones_potential

FIX = Path(__file__).resolve().parent / "fixtures" / "deepmd"
META = json.loads((FIX / "configs.json").read_text())
FRAMES = ase.io.read(FIX / META["structures"], index=":")
WATER = Path(__file__).resolve().parents[2] / "shared" / "data" / "dpa4-water-smoke"
AV_ABS = 1e-10  # eV, float64


def _evaluate(pot, atoms):
    return pot.evaluate(
        atoms.positions, atoms.cell.array, atoms.pbc, atoms.get_chemical_symbols(),
        atom_virial=True,
    )  # fmt: skip


@pytest.mark.parametrize("name", sorted(META["configs"]))
def test_random_checkpoints_match_deepmd(name):
    pot = mdband.load_model(FIX / f"{name}.pt", dtype="float64")
    ref = np.load(FIX / f"{name}.npz")
    for i, atoms in enumerate(FRAMES):
        res = _evaluate(pot, atoms)
        want = ref[f"atom_virial_{i}"]
        assert np.abs(want).max() > 1e-2  # not trivially zero
        assert res.atom_virial.shape == (len(atoms), 3, 3)
        np.testing.assert_allclose(res.atom_virial.reshape(-1, 9), want, rtol=0, atol=AV_ABS)
        np.testing.assert_allclose(res.atom_virial.sum(0), res.virial, rtol=0, atol=1e-12)


@pytest.mark.skipif(not (WATER / "pretrained.pt").exists(), reason="../shared water model absent")
def test_water_checkpoint_matches_deepmd():
    """The pretrained water model (float64 cast) on 192-atom frames whose coordinates are
    unwrapped (fractional -0.66..1.54): the partition does not depend on the wrapping."""
    ref = np.load(FIX / "water_fp64.npz")
    pot = mdband.load_model(WATER / "pretrained.pt", dtype="float64")
    i = 0
    while f"coord_{i}" in ref:
        symbols = [["O", "H"][t] for t in ref[f"atype_{i}"]]
        res = pot.evaluate(ref[f"coord_{i}"], ref[f"cell_{i}"], True, symbols, atom_virial=True)
        want = ref[f"atom_virial_{i}"]
        np.testing.assert_allclose(res.atom_virial.reshape(-1, 9), want, rtol=0, atol=AV_ABS)
        i += 1
    assert i >= 3


def test_default_leaves_it_out_and_tensor_input_matches():
    pot = mdband.load_model(FIX / "grid_mini.pt", dtype="float64")
    atoms = FRAMES[1]
    assert pot.evaluate(atoms.positions, atoms.cell.array, True, atoms.numbers).atom_virial is None
    res = _evaluate(pot, atoms)
    t = pot.evaluate(
        torch.as_tensor(atoms.positions), torch.as_tensor(atoms.cell.array), True, atoms.numbers,
        atom_virial=True,
    )  # fmt: skip
    assert isinstance(t.atom_virial, torch.Tensor)
    np.testing.assert_array_equal(t.atom_virial.numpy(), res.atom_virial)


def test_lammps_order_is_deepmd_pair_style_map():
    """LAMMPS' centroid columns xx yy zz xy xz yz yx zx zy, where ab means Σ r_a f_b: the
    [b, a] entry of -g ⊗ r (deepmd-kit's pair_style deepmd uses the same map)."""
    w = torch.arange(18, dtype=torch.float64).reshape(2, 3, 3)
    cols = lammps_order(w)
    assert LAMMPS_CENTROID == (0, 4, 8, 3, 6, 7, 1, 2, 5)
    names = ("xx", "yy", "zz", "xy", "xz", "yz", "yx", "zx", "zy")
    for k, ab in enumerate(names):
        a, b = "xyz".index(ab[0]), "xyz".index(ab[1])
        assert cols[1, k] == w[1, b, a], ab


def _lj_cluster():
    """Seven atoms in a 40 Å periodic box: every pair within 5 Å (below the switch-on radius),
    no periodic image within the cutoff."""
    rng = np.random.default_rng(4)
    pos = 20.0 + np.array([[0, 0, 0], [3.6, 0, 0], [0, 3.7, 0], [0, 0, 3.5], [3.4, 3.5, 0],
                           [3.5, 0, 3.6], [0, 3.6, 3.4]], dtype=float)  # fmt: skip
    pos += rng.normal(scale=0.15, size=pos.shape)
    return Atoms("Ar7", positions=pos, cell=np.diag([40.0, 41.0, 42.0]), pbc=True)


def test_calculator_stresses_follow_ase_lennard_jones():
    """``stresses`` of a pair potential are ASE's LennardJones ``stresses`` (½ f_ij ⊗ d_ij per
    atom, over the volume); the sum is ``stress``."""
    eps, sigma = 0.0104, 3.4
    pot = lennard_jones_potential(epsilon=eps, sigma=sigma, cutoff=8.5, r_on=7.0)
    atoms = _lj_cluster()
    d = atoms.get_all_distances()
    assert d[np.triu_indices(len(atoms), 1)].max() < 7.0  # no pair in the switching region
    atoms.calc = mdband.Calculator(pot)
    got = atoms.get_stresses()
    ref_atoms = atoms.copy()
    ref_atoms.calc = AseLennardJones(epsilon=eps, sigma=sigma, rc=8.5, smooth=False)
    want = ref_atoms.get_stresses()
    assert got.shape == (len(atoms), 6)
    assert np.abs(want).max() > 1e-7
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(got.sum(0), atoms.get_stress(), rtol=0, atol=1e-15)
    np.testing.assert_allclose(atoms.get_forces(), ref_atoms.get_forces(), rtol=1e-9, atol=1e-14)


def test_ase_stresses_of_a_message_passing_model_sum_to_stress():
    pot = mdband.load_model(FIX / "s2ffn.pt", dtype="float64")
    atoms = FRAMES[1].copy()
    atoms.calc = mdband.Calculator(pot)
    s = atoms.get_stresses()
    assert np.abs(s).max() > 1e-5
    np.testing.assert_allclose(s.sum(0), atoms.get_stress(), rtol=0, atol=1e-12)
    res = _evaluate(pot, atoms)
    np.testing.assert_allclose(s, ase_stresses(res.atom_virial, atoms.get_volume()), atol=1e-15)
