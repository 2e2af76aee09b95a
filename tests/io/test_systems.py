"""``read_systems``: every format on files dpdata wrote (``tests/fixtures/formats``, made by
``tests/fixtures/make_format_fixtures.py``), compared with the deepmd/npy original read with
numpy alone; the mixed-type regression; the type map; format detection; errors."""

from pathlib import Path

import numpy as np
import pytest

from mdband.io.frames import DatasetError
from mdband.io.systems import detect_format, read_dataset, read_systems

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "formats"


def npy_original(path: Path) -> list[dict]:
    """Every frame of a deepmd/npy system, by numpy (the reference, not dpdata)."""
    types = np.loadtxt(path / "type.raw", dtype=int, ndmin=1)
    names = (path / "type_map.raw").read_text().split()
    s = path / "set.000"
    n = len(types)
    coord = np.load(s / "coord.npy").reshape(-1, n, 3)
    out = []
    for i in range(coord.shape[0]):
        frame = {
            "species": [names[t] for t in types],
            "positions": coord[i],
            "cell": np.load(s / "box.npy").reshape(-1, 3, 3)[i],
            "energy": float(np.load(s / "energy.npy").reshape(-1)[i]),
            "forces": np.load(s / "force.npy").reshape(-1, n, 3)[i],
        }
        if (s / "virial.npy").is_file():
            frame["virial"] = np.load(s / "virial.npy").reshape(-1, 3, 3)[i]
        out.append(frame)
    return out


WATER = npy_original(FIX / "water.npy")
HCO = {len(f["species"]): f for p in sorted((FIX / "hco.npy").iterdir()) for f in npy_original(p)}


def assert_same(got, ref, *, pos_atol, label_rtol, wrap=False):
    assert got.species == ref["species"]
    np.testing.assert_allclose(got.cell, ref["cell"], atol=pos_atol)
    pos, want = got.positions, ref["positions"]
    if wrap:  # a LAMMPS dump reader folds positions into the cell
        frac = np.linalg.solve(ref["cell"].T, (pos - want).T).T
        np.testing.assert_allclose(frac, np.round(frac), atol=1e-9)
    else:
        np.testing.assert_allclose(pos, want, atol=pos_atol)
    if "energy" not in ref or got.energy is None:
        return
    assert got.energy == pytest.approx(ref["energy"], rel=label_rtol)
    np.testing.assert_allclose(got.forces, ref["forces"], rtol=label_rtol, atol=label_rtol)
    if "virial" in ref:
        np.testing.assert_allclose(got.virial, ref["virial"], rtol=label_rtol, atol=label_rtol)
    else:
        assert got.virial is None


@pytest.mark.parametrize(
    "name, fmt, pos_atol, label_rtol",
    [
        ("water.npy", "deepmd/npy", 0, 0),
        ("water.mixed", "deepmd/npy/mixed", 0, 0),
        ("water.hdf5", "deepmd/hdf5", 0, 0),
        ("water.raw", "deepmd/raw", 1e-9, 1e-12),
        ("water.extxyz", None, 1e-9, 1e-11),
    ],
)
def test_water_formats_equal_the_npy_original(name, fmt, pos_atol, label_rtol):
    path = FIX / name
    assert detect_format(path) == fmt
    frames = read_systems(path)
    assert len(frames) == len(WATER) == 2
    for got, ref in zip(frames, WATER):
        assert got.labelled and got.pbc.all()
        assert_same(got, ref, pos_atol=pos_atol, label_rtol=label_rtol)


def test_mixed_type_system_reads_the_real_types():
    """Regression: a deepmd/npy/mixed system keeps a placeholder type.raw (every atom type 0)
    and the real types in set.*/real_atom_types.npy; reading type.raw gave 192 O atoms and
    the wrong energy per species."""
    placeholder = np.loadtxt(FIX / "water.mixed" / "type.raw", dtype=int)
    assert set(placeholder.tolist()) == {0}
    frames = read_systems(FIX / "water.mixed", "deepmd/npy/mixed")
    for got, ref in zip(frames, WATER):
        assert got.species.count("O") == 64 and got.species.count("H") == 128
        assert got.species == ref["species"]
        assert got.energy == ref["energy"]
    # two compositions of 16 atoms in one mixed system (the case the format exists for)
    frames = read_systems(FIX / "hco.mixed")
    formulas = sorted("".join(sorted(f.species)) for f in frames)
    assert len(formulas) == 2 and formulas[0] != formulas[1]
    ref = HCO[16]
    same = [f for f in frames if f.species == ref["species"]]
    assert len(same) == 1
    assert_same(same[0], ref, pos_atol=0, label_rtol=0)
    other = next(f for f in frames if f is not same[0])
    counts = {e: other.species.count(e) - ref["species"].count(e) for e in "HCO"}
    assert counts == {"H": -1, "C": -1, "O": 2}  # atoms 0 and 1 (H, C) became O


@pytest.mark.parametrize("name", ["hco.npy", "hco.hdf5", "hco.extxyz", "hco.mixed"])
def test_labelled_systems_with_virials_and_a_triclinic_cell(name):
    frames = read_systems(FIX / name)
    assert sorted(f.n_atoms for f in frames) == ([16, 16] if name == "hco.mixed" else [14, 16])
    for got in frames:
        ref = HCO[got.n_atoms]
        if got.species != ref["species"]:
            continue  # hco.mixed's second composition
        assert got.virial is not None
        assert_same(got, ref, pos_atol=1e-9, label_rtol=1e-11)


def test_lammps_dump_needs_and_takes_a_type_map():
    path = FIX / "water.dump"
    assert detect_format(path) == "lammps/dump"
    with pytest.raises(DatasetError, match="numbers its atom types.*--type-map"):
        read_systems(path)
    with pytest.raises(DatasetError, match="2 atom types but the type map lists 1"):
        read_systems(path, type_map="O")
    notes = []
    frames = read_systems(path, type_map="O,H", notes=notes)
    assert [f.step for f in frames] == [0, 10]  # the dump's timesteps
    assert "types 0=O, 1=H (counting from 0; from the type map)" in notes[0]
    for got, ref in zip(frames, WATER):
        assert not got.labelled
        assert_same(got, ref, pos_atol=1e-9, label_rtol=0, wrap=True)
    # a model's type map when none is given; the same one meaning everywhere
    by_model = read_systems(path, default_type_map=["O", "H"])
    assert [f.species for f in by_model] == [f.species for f in frames]
    swapped = read_systems(path, type_map=["H", "O"])
    assert swapped[0].species.count("H") == 64


def test_lammps_data_file():
    path = FIX / "water.lmp"
    assert detect_format(path) == "lammps/lmp"
    (by_masses,) = read_systems(path)  # dpdata writes Masses: they name the elements
    (by_map,) = read_systems(path, type_map="O,H")
    for got in (by_masses, by_map):
        assert_same(got, WATER[0], pos_atol=1e-9, label_rtol=0, wrap=True)


def test_files_that_name_their_elements_keep_them():
    notes = []
    frames = read_systems(FIX / "water.npy", type_map="H,O", notes=notes)
    assert frames[0].species == WATER[0]["species"]
    assert notes == [f"{FIX / 'water.npy'} names its elements; the type map is not needed"]


def test_directory_of_systems_and_explicit_format():
    frames = read_systems(FIX / "hco.npy", "deepmd/npy")
    assert sorted(f.n_atoms for f in frames) == [14, 16]
    with pytest.raises(DatasetError, match="not one of"):
        read_systems(FIX / "water.npy", "nonsense")
    assert detect_format(FIX / "water.npy", "lammps-data") == "lammps/lmp"  # an alias


def test_labelled_reading_refuses_unlabelled_frames(tmp_path):
    with pytest.raises(DatasetError, match="no energy"):
        read_dataset(FIX / "water.dump", type_map="O,H")
    with pytest.raises(DatasetError, match="does not exist"):
        read_systems(tmp_path / "none.dump")
    bad = tmp_path / "bad.dump"
    bad.write_text("ITEM: TIMESTEP\n0\nITEM: NUMBER OF ATOMS\nnot a number\n")
    with pytest.raises(DatasetError, match="cannot read"):
        read_systems(bad, type_map="O")


@pytest.mark.parametrize("fmt", ["deepmd/npy", "deepmd/hdf5", "deepmd/raw"])
def test_charge_spin_of_deepmd_data_read_and_written(tmp_path, fmt):
    """``set.*/charge_spin.npy`` (deepmd-kit's data of add_chg_spin_ebd models, what dp test
    reads) becomes each frame's charge and spin; written back in every deepmd format; frames
    without it have none; an extxyz's info keys likewise."""
    import shutil

    from mdband.io.dpdata_io import write_dpdata

    src = tmp_path / "sys"
    shutil.copytree(FIX / "water.npy", src)
    n = len(np.load(src / "set.000" / "energy.npy"))
    rows = np.array([[k - 1, k % 3 + 1] for k in range(n)], dtype=np.float64)
    np.save(src / "set.000" / "charge_spin.npy", rows)
    frames = read_systems([src])
    assert [(f.charge, f.spin) for f in frames] == [tuple(r) for r in rows]
    assert frames[1].to_atoms().info["charge"] == rows[1, 0]
    out = tmp_path / ("out.h5" if fmt == "deepmd/hdf5" else "out")
    write_dpdata(frames, out, fmt, ["O", "H"])
    back = read_systems([out], fmt)
    assert [(f.charge, f.spin) for f in back] == [tuple(r) for r in rows]
    assert all(f.charge is None and f.spin is None for f in read_systems([FIX / "water.npy"]))
    import ase.io

    atoms = frames[0].to_atoms()
    ase.io.write(tmp_path / "a.extxyz", atoms)
    (frame,) = read_systems([tmp_path / "a.extxyz"])
    assert (frame.charge, frame.spin) == (rows[0, 0], rows[0, 1])
