"""Readers of ``mdband fit``: extxyz, ASE db, deepmd npy; labels, errors, shift, split."""

import ase.db
import ase.io
import numpy as np
import pytest
from ase.build import bulk
from conftest import emt_frames

from mdband.fit.data import (
    DatasetError,
    elements_of,
    fit_energy_shift,
    frame_from_atoms,
    read_dataset,
    read_frames,
    split_indices,
)


def test_extxyz_labels_and_virial(tmp_path):
    frames = emt_frames(3, seed=2)
    path = tmp_path / "a.extxyz"
    ase.io.write(path, frames, format="extxyz")
    got = read_frames(path)
    assert len(got) == 3
    for a, f in zip(frames, got):
        # extxyz stores 8 decimals
        assert f.energy == pytest.approx(a.get_potential_energy(), abs=1e-7)
        np.testing.assert_allclose(f.forces, a.get_forces(), atol=1e-7)
        vol = a.get_volume()
        # virial = -stress * V (mdband's sign convention); symmetric for EMT
        np.testing.assert_allclose(f.virial, -a.get_stress(voigt=False) * vol, atol=1e-5)
        assert f.species == ["Cu"] * len(a)


def test_custom_info_and_array_keys(tmp_path):
    atoms = bulk("Cu", "fcc", a=3.6, cubic=True)
    atoms.info["dft_E"] = -12.5
    atoms.arrays["dft_F"] = np.full((4, 3), 0.25)
    path = tmp_path / "k.extxyz"
    ase.io.write(path, atoms, format="extxyz")
    with pytest.raises(DatasetError, match="no energy"):
        read_frames(path)
    (f,) = read_frames(path, energy_key="dft_E", forces_key="dft_F")
    assert f.energy == -12.5 and np.all(f.forces == 0.25) and f.virial is None


def test_missing_forces_is_typed(tmp_path):
    atoms = bulk("Cu", "fcc", a=3.6, cubic=True)
    atoms.info["energy"] = -1.0
    path = tmp_path / "noforce.extxyz"
    ase.io.write(path, atoms, format="extxyz")
    with pytest.raises(DatasetError, match="no forces"):
        read_frames(path)


def test_ase_database(tmp_path):
    frames = emt_frames(2, seed=3)
    path = tmp_path / "x.db"
    with ase.db.connect(str(path)) as db:
        for a in frames:
            db.write(a)
    got = read_frames(path)
    assert len(got) == 2
    assert got[1].energy == pytest.approx(frames[1].get_potential_energy(), abs=1e-9)
    np.testing.assert_allclose(got[0].forces, frames[0].get_forces(), atol=1e-9)


def _write_deepmd(root, frames, type_map=("Cu",), virial=False):
    root.mkdir(parents=True)
    types = [type_map.index(s) for s in frames[0].get_chemical_symbols()]
    (root / "type.raw").write_text("\n".join(map(str, types)) + "\n")
    (root / "type_map.raw").write_text("\n".join(type_map) + "\n")
    s = root / "set.000"
    s.mkdir()
    np.save(s / "coord.npy", np.stack([a.positions.reshape(-1) for a in frames]))
    np.save(s / "box.npy", np.stack([a.cell.array.reshape(-1) for a in frames]))
    np.save(s / "energy.npy", np.array([a.get_potential_energy() for a in frames]))
    np.save(s / "force.npy", np.stack([a.get_forces().reshape(-1) for a in frames]))
    if virial:
        vir = [-a.get_stress(voigt=False).reshape(-1) * a.get_volume() for a in frames]
        np.save(s / "virial.npy", np.stack(vir))


def test_deepmd_system_and_parent_directory(tmp_path):
    frames = emt_frames(3, seed=4)
    _write_deepmd(tmp_path / "sys" / "a", frames[:2], virial=True)
    _write_deepmd(tmp_path / "sys" / "b", frames[2:])
    one = read_frames(tmp_path / "sys" / "a")
    assert len(one) == 2 and one[0].virial is not None
    np.testing.assert_allclose(one[1].positions, frames[1].positions)
    both = read_dataset(tmp_path / "sys")
    assert len(both) == 3 and both[2].virial is None
    assert both[2].energy == pytest.approx(frames[2].get_potential_energy())


def test_deepmd_without_energy_is_typed(tmp_path):
    frames = emt_frames(1, seed=5)
    _write_deepmd(tmp_path / "s", frames)
    (tmp_path / "s" / "set.000" / "energy.npy").unlink()
    with pytest.raises(DatasetError, match="energy.npy"):
        read_frames(tmp_path / "s")


def test_bad_paths_and_empty(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        read_frames(tmp_path / "nope.xyz")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="without deepmd-kit systems"):
        read_frames(tmp_path / "empty")
    db = tmp_path / "empty.db"
    ase.db.connect(str(db)).count()
    with pytest.raises(DatasetError, match="no frames"):
        read_frames(db)
    junk = tmp_path / "junk.extxyz"
    junk.write_text("this is not\nan xyz file\n")
    with pytest.raises(DatasetError):
        read_frames(junk)
    with pytest.raises(DatasetError, match="empty"):
        read_dataset([])


def test_energy_shift_least_squares_and_split():
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 20, size=(30, 2)).astype(float)
    true = np.array([-3.5, -4.4])
    energies = counts @ true + rng.normal(0, 1e-3, 30)
    shift = fit_energy_shift(np.c_[counts, np.zeros(30)], energies)
    np.testing.assert_allclose(shift[:2], true, atol=1e-3)
    assert shift[2] == 0.0  # absent type
    tr, va = split_indices(20, 0.25, seed=3)
    assert len(va) == 5 and sorted(tr + va) == list(range(20))
    assert split_indices(20, 0.25, seed=3) == (tr, va)
    assert split_indices(2, 0.01, 0)[1] != []  # at least one validation frame
    assert split_indices(5, 0.0, 0)[1] == []
    mixed = [frame_from_atoms(a) for a in emt_frames(2, symbols=("Cu", "Ni"), reps=(2, 2, 1))]
    assert elements_of(mixed) == ["Ni", "Cu"]  # ordered by atomic number
