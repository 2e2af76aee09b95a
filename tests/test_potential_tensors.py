"""Potential.evaluate with torch tensors, and the torch cell-list path (the device step's
neighbour list) on the CPU against the vesin path."""

import numpy as np
import pytest
import torch
from ase.build import bulk, molecule

from mdband import Calculator, StructureError
from mdband import step_graph as sg
from mdband.testing.lj import lennard_jones_potential
from mdband.testing.sezm import random_potential, small_config


def diamond(seed=0, triclinic=False):
    a = bulk("C", "diamond", a=3.6, cubic=True)
    if triclinic:
        cell = a.cell.array.copy()
        cell[1, 0] += 0.7
        a.set_cell(cell, scale_atoms=True)
    a.rattle(0.08, seed=seed)
    sym = a.get_chemical_symbols()
    sym[1], sym[5] = "O", "H"
    a.set_chemical_symbols(sym)
    return a


def water():
    m = molecule("H2O")
    m.pbc = False
    return m


def sezm(monkeypatch=None, backend=None):
    if backend is not None:
        monkeypatch.setenv("MDBAND_NEIGHBOUR_LIST", backend)
    return random_potential(small_config(), seed=3, gain=0.5, dtype="float64")


FRAMES = {"periodic": diamond, "triclinic": lambda: diamond(1, True), "open": water}


@pytest.mark.parametrize("name", sorted(FRAMES))
def test_tensor_input_equals_numpy_input_bitwise(name):
    pot = sezm()
    a = FRAMES[name]()
    args = (a.cell.array, a.pbc, a.get_chemical_symbols())
    ref = pot.evaluate(a.positions, *args)
    got = pot.evaluate(torch.tensor(a.positions), torch.tensor(a.cell.array), *args[1:])
    assert isinstance(got.forces, torch.Tensor) and got.energy.shape == ()
    assert got.energy.item() == ref.energy
    for key in ("forces", "virial", "atom_energy"):
        assert np.array_equal(getattr(got, key).numpy(), getattr(ref, key)), key


@pytest.mark.parametrize("name", sorted(FRAMES))
def test_cell_list_path_equals_vesin_path(monkeypatch, name):
    a = FRAMES[name]()
    args = (a.positions, a.cell.array, a.pbc, a.get_chemical_symbols())
    ref_pot = sezm(monkeypatch, "vesin")
    pot = sezm(monkeypatch, "cell_list")
    assert ref_pot.neighbour_backend == "vesin" and pot.neighbour_backend == "cell_list"
    ref, got = ref_pot.evaluate(*args), pot.evaluate(*args)
    assert abs(got.energy - ref.energy) <= 1e-12 * max(1.0, abs(ref.energy))
    np.testing.assert_allclose(got.forces, ref.forces, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.virial, ref.virial, rtol=0, atol=1e-11)
    t = pot.evaluate(torch.tensor(a.positions), torch.tensor(a.cell.array), *args[2:])
    assert np.array_equal(t.forces.numpy(), got.forces)  # tensors in: same path, same bits


def test_calculator_with_skin_on_the_cell_list_path(monkeypatch):
    monkeypatch.setenv("MDBAND_NEIGHBOUR_LIST", "cell_list")
    pot = lennard_jones_potential(type_map=("Ar",))
    assert pot.neighbour_backend == "cell_list"
    monkeypatch.setenv("MDBAND_NEIGHBOUR_LIST", "vesin")
    ref_pot = lennard_jones_potential(type_map=("Ar",))
    atoms = bulk("Ar", "fcc", a=5.3, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=2)
    ref = atoms.copy()
    atoms.calc, ref.calc = Calculator(pot, skin=1.0), Calculator(ref_pot)
    rng = np.random.default_rng(3)
    for _ in range(6):
        step = rng.normal(scale=0.05, size=(len(atoms), 3))
        atoms.positions += step
        ref.positions += step
        np.testing.assert_allclose(atoms.get_forces(), ref.get_forces(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(atoms.get_stress(), ref.get_stress(), rtol=0, atol=1e-12)
    assert atoms.calc.n_neighbour_builds < 6


@pytest.mark.parametrize("as_tensor", [False, True])
def test_device_step_pads_like_pad_edges(as_tensor):
    pot = sezm()
    step = sg.DeviceStep(pot, "positions", 3, 8)
    src, dst = np.array([1, 2, 0]), np.array([0, 0, 1])
    shifts = np.array([[0, 0, 1], [1, 0, 0], [0, 0, 0]])
    s, d, sh, pad = sg.pad_edges(src, dst, shifts, 3, 8)
    conv = torch.from_numpy if as_tensor else (lambda x: x)
    pos, cell = np.arange(9.0).reshape(3, 3), np.eye(3) * 4
    for _ in range(2):  # a second, shorter frame reuses the buffers
        step.load(
            conv(np.zeros(3, np.int64)), conv(src), conv(dst), conv(shifts), conv(pos), conv(cell)
        )
        assert step.src.tolist() == s.tolist() and step.dst.tolist() == d.tolist()
        assert step.edge_rows.numpy().tolist() == sh.tolist()
        assert step.is_pad.tolist() == pad.tolist()
        assert step.positions.numpy().tolist() == pos.tolist()
        src, dst, shifts = src[:2], dst[:2], shifts[:2]
        s, d, sh, pad = sg.pad_edges(src, dst, shifts, 3, 8)


@pytest.mark.parametrize("shape", [(6, 2), (3, 4), (12,), (2, 3, 1)])
def test_positions_must_be_n_by_3(shape):
    pot = lennard_jones_potential()
    for pos in (np.zeros(shape), torch.zeros(shape, dtype=torch.float64)):
        with pytest.raises(StructureError, match=r"\(N, 3\)"):
            pot.evaluate(pos, np.eye(3) * 10, True, ["Ar"] * 4)
