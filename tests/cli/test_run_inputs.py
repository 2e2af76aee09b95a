"""``mdband run`` inputs and outputs: LAMMPS data / deepmd npy structures, --final, CSV log."""

import csv
from pathlib import Path

import ase.io
import numpy as np
import pytest
from ase.build import bulk
from click.testing import CliRunner

from mdband.cli import main
from mdband.io.h5md import H5MDReader
from mdband.testing.lj import lennard_jones_potential

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
WATER = SHARED / "dpa4-water-smoke"
DEEPMD = SHARED / "deepmd-water" / "data_0"
needs_water = pytest.mark.skipif(
    not (WATER / "pretrained.pt").is_file(), reason="../shared water checkpoint absent"
)


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=1)
    ase.io.write(tmp_path / "ar.xyz", atoms)
    lennard_jones_potential().save(tmp_path / "lj.mdband")
    return tmp_path


def invoke(*args):
    return CliRunner().invoke(main, ["run", *map(str, args)])


def water(*args):
    common = ("--model", WATER / "pretrained.pt", "--steps", 1, "--traj-every", 1)
    return invoke(*common, "--seed", 5, "--no-progress", "--threads", 1, *args)


@needs_water
def test_water_lmp_with_and_without_type_map(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lmp = WATER / "water.lmp"
    a = water("--structure", lmp, "--type-map", "O,H", "--trajectory", "a.h5")
    assert a.exit_code == 0, a.output
    assert "LAMMPS types: 1=O, 2=H (from the type map)" in a.stdout
    b = water("--structure", lmp, "--trajectory", "b.h5")
    assert b.exit_code == 0, b.output
    assert "LAMMPS types: 1=O, 2=H (from the model type map)" in b.stdout
    with H5MDReader("a.h5") as ra, H5MDReader("b.h5") as rb:
        assert ra.species.tolist() == [8] * 64 + [1] * 128
        np.testing.assert_array_equal(ra.species, rb.species)
        ea = ra.observable("potential_energy")
        np.testing.assert_array_equal(ea, rb.observable("potential_energy"))
        assert -30000 < ea[0] < -29800  # O64H128 with this model, not H64He128
    final = ase.io.read("a.final.xyz")
    assert final.get_chemical_formula() == "H128O64" and final.has("momenta")
    # the type map swapped: a different (and far higher) energy, not the same run
    c = water("--structure", lmp, "--type-map", "H,O", "--trajectory", "c.h5", "--ensemble", "nve")
    assert c.exit_code == 0, c.output
    with H5MDReader("c.h5") as rc:
        assert rc.observable("potential_energy")[0] > ea[0] + 100


@needs_water
@pytest.mark.skipif(not DEEPMD.is_dir(), reason="../shared deepmd-water absent")
def test_deepmd_system_as_structure(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = water("--structure", DEEPMD, "--frame", 3, "--trajectory", "d.h5")
    assert res.exit_code == 0, res.output
    coord = np.load(DEEPMD / "set.000" / "coord.npy").reshape(-1, 192, 3)
    with H5MDReader("d.h5") as r:
        np.testing.assert_allclose(r.frame(0).positions, coord[3], atol=1e-5)


def test_final_and_csv_log(work):
    res = invoke(
        *("--structure", "ar.xyz", "--model", "lj.mdband", "--steps", 6, "--traj-every", 2),
        *("--ensemble", "nvt-bussi", "--seed", 2, "--no-progress", "--log", "thermo.csv"),
    )
    assert res.exit_code == 0, res.output
    assert "Final structure: " in res.stdout and (work / "thermo.final.xyz").is_file()
    assert "(plot: mdband plot thermo.csv -o thermo.png)" in res.stdout
    with open(work / "thermo.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [0, 2, 4, 6]
    assert float(rows[-1]["temperature_K"]) > 0
    final = ase.io.read(work / "thermo.final.xyz")
    assert final.has("momenta") and len(final) == 32
    assert float(rows[-1]["potential_energy_eV"]) == pytest.approx(final.get_potential_energy())
    # an explicit --final in another ASE format; rerun needs --overwrite for the CSV log
    again = ("--structure", "thermo.final.xyz", "--model", "lj.mdband", "--steps", 2)
    res = invoke(*again, "--no-progress", "--final", "end.traj", "--log", "thermo.csv")
    assert res.exit_code == 2 and "thermo.csv exists" in res.stderr
    res = invoke(*again, "--no-progress", "--final", "end.traj")
    assert res.exit_code == 0, res.output
    assert len(ase.io.read(work / "end.traj")) == 32


@pytest.mark.parametrize(
    "args, message",
    [
        (("--type-map", "O,Xx"), "unknown element"),
        (("--type-map", ""), "type_map is empty"),
        (("--format", "deepmd/npy"), "deepmd system has no set.* directories"),
        (("--format", "nonsense"), "format 'nonsense' is not"),
        (("--format", "lammps-data"), "has no Atoms section"),
        (("--final", "end.unknownext"), "ASE cannot write"),
        (("--final", "nodir/end.xyz"), "does not exist"),
        (("--final", "ar.xyz"), "final file ar.xyz is the structure"),  # an input
        (("--log", "same.xyz", "--final", "same.xyz"), "must be different files"),
    ],
)
def test_bad_new_flags_are_one_line(work, args, message):
    before = sorted(p.name for p in work.iterdir())
    res = invoke("--structure", "ar.xyz", "--model", "lj.mdband", "--steps", 2, *args)
    assert res.exit_code == 2, res.output
    assert message in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert sorted(p.name for p in work.iterdir()) == before


def test_default_final_refuses_to_overwrite(work):
    (work / "t.final.xyz").write_text("keep me")
    res = invoke("--structure", "ar.xyz", "--model", "lj.mdband", "--trajectory", "t.h5")
    assert res.exit_code == 2 and "final file t.final.xyz exists" in res.stderr
    assert (work / "t.final.xyz").read_text() == "keep me"
