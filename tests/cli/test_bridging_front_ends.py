"""A ZBL-bridged DPA4 model (tests/fixtures/deepmd/zbl.pt) through the ASE calculator,
``mdband run`` and ``mdband info``: each gives what one ``Potential.evaluate`` call gives."""

from __future__ import annotations

import json
from pathlib import Path

import ase.io
import numpy as np
import pytest
from ase import Atoms
from click.testing import CliRunner

import mdband
from mdband.cli import main
from mdband.io.h5md import H5MDReader

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"
MODEL = FIX / "zbl.pt"
FRAMES = {"compact_cubic": 4, "compact_triclinic": 5, "compact_molecule": 6}


@pytest.fixture(scope="module")
def pot():
    return mdband.load_model(MODEL, device="cpu", dtype="float64")


def atoms_of(i, type_map) -> Atoms:
    ref = np.load(FIX / "zbl.npz")
    sym = [type_map[t] for t in ref[f"atype_{i}"]]
    pbc = bool(ref[f"pbc_{i}"].any())
    return Atoms(sym, positions=ref[f"coord_{i}"], cell=ref[f"cell_{i}"] if pbc else None, pbc=pbc)


@pytest.mark.parametrize("name", sorted(FRAMES))
def test_ase_calculator(pot, name):
    atoms = atoms_of(FRAMES[name], pot.type_map)
    sym = atoms.get_chemical_symbols()
    single = pot.evaluate(atoms.positions, atoms.cell.array, atoms.pbc, sym)
    atoms.calc = mdband.Calculator(pot)
    assert atoms.get_potential_energy() == pytest.approx(single.energy, rel=1e-12)
    np.testing.assert_allclose(atoms.get_forces(), single.forces, rtol=0, atol=1e-10)
    np.testing.assert_allclose(atoms.get_potential_energies(), single.atom_energy, atol=1e-10)
    assert np.abs(single.forces).max() > 20.0  # the close pairs' ZBL forces
    if atoms.pbc.all():
        stress = -single.virial / atoms.get_volume()
        full = atoms.get_stress(voigt=False)
        np.testing.assert_allclose(full, stress, rtol=0, atol=1e-10)


def test_mdband_run_first_frame(pot, tmp_path, monkeypatch):
    """``mdband run`` on the compact cube (its 0.42 Å pair below the default min_distance and
    guard_distance, so both are lowered): the frame of step 0 holds the single-call energy
    and forces."""
    monkeypatch.chdir(tmp_path)
    atoms = atoms_of(FRAMES["compact_cubic"], pot.type_map)
    ase.io.write(tmp_path / "s.xyz", atoms)
    args = ["run", "--structure", "s.xyz", "--model", str(MODEL), "--dtype", "float64",
            "--device", "cpu", "--ensemble", "nve", "--temperature", "0", "--steps", "1",
            "--timestep", "0.05", "--traj-every", "1", "--trajectory", "t.h5",
            "--traj-precision", "float64", "--traj-force-unit", "eV Angstrom-1",
            "--min-distance", "0.3", "--guard-distance", "0.3", "--no-progress"]  # fmt: skip
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    single = pot.evaluate(atoms.positions, atoms.cell.array, True, atoms.get_chemical_symbols())
    with H5MDReader(tmp_path / "t.h5") as r:
        f0 = r.frame(0)
        np.testing.assert_allclose(f0.forces, single.forces, rtol=0, atol=1e-8)
        assert f0.observables["potential_energy"] == pytest.approx(single.energy, rel=1e-10)


def test_mdband_info_shows_the_bridging():
    res = CliRunner().invoke(main, ["info", str(MODEL), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    line = next(s for s in res.output.splitlines() if s.startswith("bridging"))
    assert "ZBL" in line and "[0.55, 0.95] Å" in line
    info = json.loads(CliRunner().invoke(main, ["info", str(MODEL), "--json"]).output)
    assert info["bridging"] == {"method": "zbl", "r_inner": 0.55, "r_outer": 0.95}
    plain = CliRunner().invoke(main, ["info", str(FIX / "s2ffn.pt"), "--device", "cpu"]).output
    assert "bridging         none" in plain
