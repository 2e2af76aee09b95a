"""VASP ``OUTCAR`` and ``vasprun.xml`` (dpdata's ``vasp/outcar`` and ``vasp/xml`` readers):
files written by ``tests/fixtures/vasp_files.py`` from the deepmd/npy fixtures (``water.npy``:
two DFT frames of 192 atoms, no virial; ``hco.npy``: 14 and 16 atoms with virials, one cell
triclinic) are read back by ASE's VASP readers, which shows them to be VASP files, and by
``read_systems`` with the species and numbers of the npy original."""

from contextlib import nullcontext
from pathlib import Path

import ase.io
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from mdband.io.systems import detect_format, read_dataset, read_systems
from tests.fixtures.vasp_files import (
    deepmd_npy_frames,
    in_vasp_order,
    write_outcar,
    write_vasprun,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
SYSTEMS = ["water.npy", "hco.npy/H5C5O4", "hco.npy/H6C5O5"]
# file name: (writer, ASE's format, mdband's format)
KINDS = {
    "OUTCAR": (write_outcar, "vasp-out", "vasp/outcar"),
    "vasprun.xml": (write_vasprun, "vasp-xml", "vasp/xml"),
}
TS = 0.01  # electronic entropy T*S (eV): the free energy TOTEN is not E(sigma->0)


def reference(system: str) -> list[dict]:
    """The npy frames with their atoms in VASP's order (species by species)."""
    return [in_vasp_order(f) for f in deepmd_npy_frames(FIX / system)]


def write(directory: Path, name: str, frames) -> Path:
    return KINDS[name][0](directory / name, frames, ts=TS)


def stress_of(frame: dict) -> np.ndarray:
    """ASE's stress (Voigt xx yy zz yz xz xy, eV/Å^3) of a frame's virial."""
    s = -np.asarray(frame["virial"]) / abs(np.linalg.det(frame["cell"]))
    return s[[0, 1, 2, 1, 0, 0], [0, 1, 2, 2, 2, 1]]


def test_the_reference_frames_are_what_the_tests_need():
    water = reference("water.npy")
    assert len(water) == 2 and water[0]["species"][:64] == ["O"] * 64
    (hco,) = reference("hco.npy/H5C5O4")
    assert np.count_nonzero(np.tril(hco["cell"], -1)) == 3  # triclinic
    original = deepmd_npy_frames(FIX / "hco.npy/H5C5O4")[0]["species"]
    assert hco["species"] != original and sorted(hco["species"]) == sorted(original)


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("system", SYSTEMS)
def test_ase_reads_the_numbers_back(tmp_path, system, name):
    """ASE's readers, not dpdata's, find the frames written: the files are VASP's."""
    ref = reference(system)
    images = ase.io.read(write(tmp_path, name, ref), index=":", format=KINDS[name][1])
    assert len(images) == len(ref)
    for atoms, r in zip(images, ref):
        assert atoms.get_chemical_symbols() == r["species"] and atoms.pbc.all()
        np.testing.assert_allclose(atoms.cell.array, r["cell"], rtol=0, atol=1e-9)
        np.testing.assert_allclose(atoms.positions, r["positions"], rtol=0, atol=1e-9)
        np.testing.assert_allclose(atoms.get_forces(), r["forces"], rtol=0, atol=1e-9)
        free = atoms.get_potential_energy(force_consistent=True)
        assert free == pytest.approx(r["energy"], rel=0, abs=1e-9)
        assert atoms.get_potential_energy() == pytest.approx(r["energy"] + TS / 2, abs=1e-9)
        if "virial" in r:  # ASE's GPa (CODATA 2014) is 8e-9 off the SI value of the kB
            np.testing.assert_allclose(atoms.get_stress(), stress_of(r), rtol=1e-7, atol=1e-13)
        else:
            assert "stress" not in atoms.calc.results


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("system", SYSTEMS)
def test_read_systems_equals_the_npy_original(tmp_path, system, name):
    """Species, cell, positions, the free energy (TOTEN, as dp data takes it), forces and the
    virial from the stress (none without) as in the npy system; labelled training data."""
    ref = reference(system)
    path = write(tmp_path, name, ref)
    assert detect_format(path) == KINDS[name][2]
    frames = read_systems(path)
    assert len(frames) == len(ref)
    for k, (got, r) in enumerate(zip(frames, ref)):
        assert got.species == r["species"] and got.pbc.all() and got.source == f"{path}[{k}]"
        np.testing.assert_allclose(got.cell, r["cell"], rtol=0, atol=1e-9)
        np.testing.assert_allclose(got.positions, r["positions"], rtol=0, atol=1e-9)
        np.testing.assert_allclose(got.forces, r["forces"], rtol=0, atol=1e-9)
        assert got.energy == pytest.approx(r["energy"], rel=0, abs=1e-9)
        if "virial" in r:  # dpdata's 1602.176621 kB per eV/Å^3 is 8e-9 off the SI value
            np.testing.assert_allclose(got.virial, r["virial"], rtol=1e-7, atol=1e-12)
        else:
            assert got.virial is None
    same_name = tmp_path / "data.vasp"  # any name, with the format given
    same_name.write_bytes(path.read_bytes())
    data = read_dataset(same_name, KINDS[name][2])
    assert [f.energy for f in data] == [f.energy for f in frames] and all(f.labelled for f in data)


def test_a_cell_in_general_orientation_comes_back_lower_triangular(tmp_path):
    """VASP keeps a cell as its POSCAR gives it; dpdata turns every frame so that the cell is
    lower triangular (LAMMPS's convention), forces and virial with it. The triclinic hco frame
    has such a cell: written turned, it reads back as it was."""
    (ref,) = reference("hco.npy/H5C5O4")
    rot = Rotation.from_rotvec([0.3, -0.5, 0.8]).as_matrix()
    turned = dict(ref, cell=ref["cell"] @ rot.T, positions=ref["positions"] @ rot.T,
                  forces=ref["forces"] @ rot.T, virial=rot @ ref["virial"] @ rot.T)  # fmt: skip
    for name, (_, ase_format, _) in KINDS.items():
        path = write(tmp_path, name, [turned])
        (atoms,) = ase.io.read(path, index=":", format=ase_format)
        np.testing.assert_allclose(atoms.cell.array, turned["cell"], atol=1e-9)
        (got,) = read_systems(path)
        np.testing.assert_allclose(got.cell, ref["cell"], rtol=0, atol=1e-8)
        np.testing.assert_allclose(got.positions, ref["positions"], rtol=0, atol=1e-8)
        np.testing.assert_allclose(got.forces, ref["forces"], rtol=0, atol=1e-8)
        np.testing.assert_allclose(got.virial, ref["virial"], rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name", KINDS)
def test_unconverged_ionic_steps_are_left_out(tmp_path, name):
    """An ionic step whose electronic loop ran NELM steps did not converge: dpdata leaves it
    out, so mdband's frames are the converged steps (ASE reads every step)."""
    a, b = reference("water.npy")
    steps = [a, dict(b, scf_steps=60), dict(b, energy=b["energy"] + 1.0, scf_steps=5)]
    path = write(tmp_path, name, steps)
    assert len(ase.io.read(path, index=":", format=KINDS[name][1])) == 3
    with pytest.warns(UserWarning, match="unconverged") if name == "OUTCAR" else nullcontext():
        frames = read_systems(path)
    assert [f.energy for f in frames] == [a["energy"], b["energy"] + 1.0]
    np.testing.assert_allclose(frames[1].positions, b["positions"], rtol=0, atol=1e-9)
