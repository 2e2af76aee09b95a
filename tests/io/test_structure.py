"""Starting structures: LAMMPS data files (type map, Masses, labels), deepmd npy, ASE files."""

from pathlib import Path

import ase.io
import numpy as np
import pytest
from ase.build import bulk

from mdband.errors import StructureError
from mdband.io.structure import parse_type_map, read_structure

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
WATER_LMP = SHARED / "dpa4-water-smoke" / "water.lmp"
DEEPMD = SHARED / "deepmd-water" / "data_0"
needs_water = pytest.mark.skipif(not WATER_LMP.is_file(), reason="../shared water.lmp absent")
needs_deepmd = pytest.mark.skipif(not DEEPMD.is_dir(), reason="../shared deepmd-water absent")


def lammps_data(path, masses=None, labels=None, style="atomic", velocities=False, types=2):
    """Four atoms (types 1, 2, 2, 1) in a 6 Å box, optionally with Masses / labels."""
    lines = ["test data", "", "4 atoms", f"{types} atom types", "", "0 6 xlo xhi"]
    lines += ["0 6 ylo yhi", "0 6 zlo zhi", ""]
    if masses:
        lines += ["Masses", ""] + [f"{t} {m}" for t, m in enumerate(masses, 1)] + [""]
    if labels:
        lines += ["Atom Type Labels", ""] + [f"{t} {s}" for t, s in enumerate(labels, 1)] + [""]
    lines += [f"Atoms # {style}" if style else "Atoms", ""]
    rows = [(1, 1, 0.5, 0.5, 0.5), (2, 2, 1.5, 0.5, 0.5), (3, 2, 0.5, 1.5, 0.5), (4, 1, 3, 3, 3)]
    for i, t, x, y, z in rows:
        charge = " 0.0" if style == "charge" else ""
        lines.append(f"{i} {t}{charge} {x} {y} {z}")
    if velocities:
        lines += ["", "Velocities", ""] + [f"{i} 1.0 0.0 -2.0" for i in range(1, 5)]
    path.write_text("\n".join(lines) + "\n")
    return path


@needs_water
@pytest.mark.parametrize(
    "kwargs, source",
    [({"type_map": "O,H"}, "type map"), ({"default_type_map": ["O", "H"]}, "model type map")],
)
def test_water_lmp_types(kwargs, source):
    notes = []
    atoms = read_structure(WATER_LMP, notes=notes, **kwargs)
    assert atoms.get_chemical_formula() == "H128O64"
    assert atoms.get_chemical_symbols()[:2] == ["O", "O"]  # type 1 = O
    np.testing.assert_allclose(atoms.cell.lengths(), [12.4447] * 3)
    np.testing.assert_allclose(atoms.positions[0], [11.83, 2.56, 2.18])
    assert atoms.pbc.all()
    assert notes == [f"LAMMPS types: 1=O, 2=H (from the {source})"]


@needs_water
def test_water_lmp_without_masses_or_type_map_asks_for_it():
    with pytest.raises(StructureError, match=r"no Masses section.*--type-map"):
        read_structure(WATER_LMP)
    with pytest.raises(StructureError, match="2 atom types"):
        read_structure(WATER_LMP, type_map="O")
    with pytest.raises(StructureError, match="--type-map"):  # more types than the model has
        read_structure(WATER_LMP, default_type_map=["O"])


@pytest.mark.parametrize("suffix", [".lmp", ".data"])
def test_masses_name_the_elements(tmp_path, suffix):
    path = lammps_data(tmp_path / f"w{suffix}", masses=[15.9994, 1.008], velocities=True)
    notes = []
    atoms = read_structure(path, notes=notes)
    assert atoms.get_chemical_symbols() == ["O", "H", "H", "O"]
    np.testing.assert_allclose(atoms.get_masses(), [15.9994, 1.008, 1.008, 15.9994])
    assert "from the Masses" in notes[0]
    # Velocities in metal units (Å/ps) become ASE velocities
    np.testing.assert_allclose(atoms.get_velocities()[0] * 1000 * ase.units.fs, [1, 0, -2])
    # an explicit type map wins and keeps the file's masses (deuterium stays heavy)
    heavy = lammps_data(tmp_path / "d.lmp", masses=[15.9994, 2.014])
    with pytest.raises(StructureError, match=r"type 2 .*mass 2.014.*--type-map"):
        read_structure(heavy)
    atoms = read_structure(heavy, type_map="O H")
    assert atoms.get_chemical_symbols() == ["O", "H", "H", "O"]
    np.testing.assert_allclose(atoms.get_masses()[1], 2.014)


@pytest.mark.parametrize(
    "masses, message",
    [
        ([15.9994, 40.0], "type 2 .*mass 40.0"),  # Ar 39.948 and Ca 40.078 are both close
        ([15.9994], "no mass for type 2"),
    ],
)
def test_ambiguous_or_missing_masses(tmp_path, masses, message):
    path = lammps_data(tmp_path / "a.lmp", masses=masses)
    with pytest.raises(StructureError, match=message):
        read_structure(path, default_type_map=["O", "H"])


def test_labels_and_atom_styles(tmp_path):
    path = lammps_data(tmp_path / "l.lmp", masses=[1.0, 1.0], labels=["Cu", "Ni"])
    assert read_structure(path).get_chemical_symbols() == ["Cu", "Ni", "Ni", "Cu"]
    charge = lammps_data(tmp_path / "c.lmp", masses=[63.546, 58.693], style="charge")
    atoms = read_structure(charge)
    assert atoms.get_chemical_symbols() == ["Cu", "Ni", "Ni", "Cu"]
    np.testing.assert_allclose(atoms.positions[3], [3, 3, 3])
    # a comment that is no style: the column count decides (5 columns: atomic)
    odd = lammps_data(tmp_path / "o.lmp", masses=[63.546, 58.693], style="metal")
    assert len(read_structure(odd)) == 4
    # 6 columns after a non-style comment fit charge and molecular alike
    text = charge.read_text().replace("Atoms # charge", "Atoms # metal")
    (tmp_path / "amb.lmp").write_text(text)
    with pytest.raises(StructureError, match="atom style"):
        read_structure(tmp_path / "amb.lmp")
    # --format lammps-data reads a file of any name
    named = tmp_path / "water.txt"
    named.write_bytes(path.read_bytes())
    assert len(read_structure(named, format="lammps-data")) == 4
    with pytest.raises(StructureError, match="one structure"):
        read_structure(path, frame=2)


@needs_deepmd
def test_deepmd_system_frames():
    coord = np.load(DEEPMD / "set.000" / "coord.npy").reshape(-1, 192, 3)
    box = np.load(DEEPMD / "set.000" / "box.npy").reshape(-1, 3, 3)
    atoms = read_structure(DEEPMD, frame=3)
    np.testing.assert_array_equal(atoms.positions, coord[3])
    np.testing.assert_array_equal(atoms.cell.array, box[3])
    types = np.loadtxt(DEEPMD / "type.raw", dtype=int)
    tmap = (DEEPMD / "type_map.raw").read_text().split()
    assert atoms.get_chemical_symbols() == [tmap[t] for t in types]
    np.testing.assert_array_equal(read_structure(DEEPMD).positions, coord[-1])
    with pytest.raises(StructureError, match=f"has {len(coord)} frames"):
        read_structure(DEEPMD, frame=len(coord))
    with pytest.raises(StructureError, match="not a deepmd-kit system"):
        read_structure(DEEPMD.parent)  # a folder of systems: pick one
    notes = []  # the system names its types: a type map is not needed, and not used
    atoms = read_structure(DEEPMD, type_map="H,O", notes=notes)
    assert atoms.get_chemical_symbols() == [tmap[t] for t in types]
    assert notes == [f"{DEEPMD} names its elements; the type map is not needed"]


def test_ase_files_as_before(tmp_path):
    path = tmp_path / "cu.extxyz"
    ase.io.write(path, [bulk("Cu", a=3.6 + 0.1 * k) for k in range(3)])
    assert read_structure(path, 1).cell.lengths()[0] == pytest.approx(3.7 / np.sqrt(2))
    notes = []
    assert read_structure(path, type_map="Ni", notes=notes).get_chemical_symbols() == ["Cu"]
    assert notes == [f"{path} names its elements; the type map is not needed"]
    with pytest.raises(StructureError, match="does not exist"):
        read_structure(tmp_path / "none.lmp")


@pytest.mark.parametrize(
    "text, expected",
    [("O,H", ["O", "H"]), (" O , H ", ["O", "H"]), ("O H H", ["O", "H", "H"]), (["Cu"], ["Cu"])],
)
def test_parse_type_map(text, expected):
    assert parse_type_map(text) == expected


@pytest.mark.parametrize("text", ["", ",", "O,Xx", "X"])
def test_parse_type_map_rejects(text):
    with pytest.raises(ValueError, match="type_map"):
        parse_type_map(text)
