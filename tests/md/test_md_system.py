"""Structure reading and checks; Maxwell-Boltzmann velocities."""

import ase.io
import numpy as np
import pytest
from ase import Atoms, units
from ase.build import bulk

from mdband.errors import StructureError, UnknownElementError
from mdband.md.system import (
    check_structure,
    closest_pair,
    has_velocities,
    maxwell_boltzmann_momenta,
    read_structure,
)


def test_read_structure_frames_and_errors(tmp_path):
    images = [bulk("Ar", "fcc", a=5.26 + 0.01 * k, cubic=True) for k in range(3)]
    path = tmp_path / "many.extxyz"
    ase.io.write(path, images)
    assert read_structure(path).cell[0, 0] == pytest.approx(5.28)
    assert read_structure(path, 0).cell[0, 0] == pytest.approx(5.26)
    with pytest.raises(StructureError, match="does not exist"):
        read_structure(tmp_path / "nope.xyz")
    bad = tmp_path / "bad.xyz"
    bad.write_text("this is not\nan xyz file\n")
    with pytest.raises(StructureError, match="cannot read structure"):
        read_structure(bad)
    with pytest.raises(StructureError, match="has no frame 7"):
        read_structure(path, 7)


def test_check_structure(lj):
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    check_structure(atoms, lj, 0.5)
    close = atoms.copy()
    # atom 1 moved next to the periodic image of atom 0 across the x boundary
    close.positions[1] = close.positions[0] + [close.cell[0, 0] - 0.3, 0.0, 0.0]
    with pytest.raises(StructureError, match=r"atoms 0 and 1 are 0\.300 Å apart"):
        check_structure(close, lj, 0.5)
    check_structure(close, lj, 0.2)  # the threshold is configurable
    check_structure(close, lj, 0.0)  # and can be switched off
    xe = atoms.copy()
    xe.numbers[3] = 54
    with pytest.raises(UnknownElementError, match="Xe"):
        check_structure(xe, lj, 0.5)
    flat = atoms.copy()
    flat.cell[2] = 0.0
    with pytest.raises(StructureError, match="zero volume"):
        check_structure(flat, lj, 0.5)
    nan = atoms.copy()
    nan.positions[2, 0] = np.inf
    with pytest.raises(StructureError, match="NaN or inf"):
        check_structure(nan, lj, 0.5)


def test_closest_pair_open_boundaries():
    pos = np.array([[0.0, 0, 0], [3.0, 0, 0], [3.2, 0, 0]])
    i, j, d = closest_pair(pos, np.zeros((3, 3)), np.zeros(3, bool), 1.0)
    assert {i, j} == {1, 2} and d == pytest.approx(0.2)
    assert closest_pair(pos, np.zeros((3, 3)), np.zeros(3, bool), 0.1) == (None, None, None)


def test_maxwell_boltzmann():
    masses = np.array([1.008, 15.999, 39.948] * 400)
    p = maxwell_boltzmann_momenta(masses, 300.0, np.random.default_rng(0))
    np.testing.assert_allclose(p.sum(axis=0), 0.0, atol=1e-10)
    ekin = 0.5 * np.sum(p**2 / masses[:, None])
    temperature = 2 * ekin / (3 * len(masses) * units.kB)
    assert temperature == pytest.approx(300.0, rel=0.05)
    q = maxwell_boltzmann_momenta(masses, 300.0, np.random.default_rng(0))
    np.testing.assert_array_equal(p, q)
    assert np.all(maxwell_boltzmann_momenta(masses, 0.0, np.random.default_rng(1)) == 0)
    atoms = Atoms("Ar2", positions=[[0, 0, 0], [4, 0, 0]])
    assert not has_velocities(atoms)
    atoms.set_momenta([[1, 0, 0], [-1, 0, 0]])
    assert has_velocities(atoms)
