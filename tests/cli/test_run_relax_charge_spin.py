"""``mdband run`` and ``mdband relax`` with a charge/spin model (deepmd-kit's
``add_chg_spin_ebd``): ``--charge`` / ``--spin`` (or the structure file's info) give the
single-call numbers in every frame, a checkpoint keeps them for the resume, ``--print-config``
shows them, and a missing or refused input is one line with exit code 2 that writes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import ase.io
import numpy as np
import pytest
from click.testing import CliRunner

import mdband
from mdband.cli import main
from mdband.io.checkpoint import read_checkpoint
from mdband.io.h5md import H5MDReader

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"


@pytest.fixture(scope="module")
def pot():
    return mdband.load_model(FIX / "chgspin.pt", device="cpu", dtype="float64")


@pytest.fixture
def work(tmp_path, monkeypatch):
    """The open molecule frame without info (mol.xyz) and with charge -1, spin 2
    (mol_info.extxyz), and the two charge/spin checkpoints."""
    monkeypatch.chdir(tmp_path)
    mol = ase.io.read(FIX / "structures.extxyz", 3)
    mol.info.clear()
    ase.io.write(tmp_path / "mol.xyz", mol, format="extxyz")
    mol.info.update(charge=-1, spin=2)
    ase.io.write(tmp_path / "mol_info.extxyz", mol, format="extxyz")
    for name in ("chgspin", "chgspin_default", "s2ffn"):
        shutil.copy(FIX / f"{name}.pt", tmp_path / f"{name}.pt")
    return tmp_path


def invoke(*args):
    return CliRunner().invoke(main, [*map(str, args)])


RUN = ("run", "--ensemble", "nve", "--temperature", 50,
       "--timestep", 0.5, "--traj-every", 1, "--checkpoint-every", 2, "--trajectory", "t.h5",
       "--checkpoint", "c.ckpt", "--traj-precision", "float64", "--traj-force-unit",
       "eV Angstrom-1", "--dtype", "float64", "--device", "cpu", "--no-progress")  # fmt: skip


def frames_match(pot, path, charge, spin, first=0):
    """Every frame's forces and potential energy are the single call's at its positions."""
    with H5MDReader(path) as r:
        atoms = r.to_atoms(slice(first, None))
        epot = r.observable("potential_energy")[first:]
    assert len(atoms) >= 2
    for a, e in zip(atoms, epot):
        ref = pot.evaluate(a.positions, None, False, a.get_chemical_symbols(), charge=charge,
                           spin=spin)  # fmt: skip
        np.testing.assert_allclose(a.get_forces(), ref.forces, rtol=0, atol=1e-10)
        assert abs(e - ref.energy) <= 1e-10 * abs(ref.energy)


def one_line_error(res, *words):
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mdband: error: "), res.stderr
    for w in words:
        assert w in lines[0], lines[0]


def run(*args, model="chgspin.pt"):
    return invoke(*RUN, "--model", model, *args)


def test_run_uses_them_and_the_resume_keeps_them(work, pot):
    res = run("--structure", "mol.xyz", "--steps", 2, "--charge", -1, "--spin", 2)
    assert res.exit_code == 0, res.output
    assert "Total charge -1 (given), spin multiplicity 2 (given)" in res.stdout
    frames_match(pot, work / "t.h5", -1, 2)
    ck = read_checkpoint(work / "c.ckpt")
    assert ck.config["charge"] == -1 and ck.config["spin"] == 2
    res = run("--resume", "--steps", 4)  # no flags: the checkpoint's values
    assert res.exit_code == 0, res.output
    frames_match(pot, work / "t.h5", -1, 2, first=2)
    res = run("--resume", "--steps", 6, "--charge", 0)
    one_line_error(res, "cannot resume with changed settings", "charge -1 -> 0")


def test_structure_info_and_model_default(work, pot):
    res = run("--structure", "mol_info.extxyz", "--steps", 1)
    assert res.exit_code == 0, res.output
    assert "Total charge -1 (from the structure file), spin multiplicity 2" in res.stdout
    frames_match(pot, work / "t.h5", -1, 2)
    assert read_checkpoint(work / "c.ckpt").config["charge"] == -1
    res = run("--structure", "mol.xyz", "--steps", 1, "--overwrite", "--charge", 2,
              model="chgspin_default.pt")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "Total charge 2 (given), spin multiplicity 2 (the model's default)" in res.stdout
    frames_match(pot, work / "t.h5", 2, 2)
    assert read_checkpoint(work / "c.ckpt").config["spin"] is None


@pytest.mark.parametrize(
    "args,words",
    [
        ((), ("total charge (charge) and spin multiplicity (spin)", "--charge --spin")),
        (("--charge", 0), ("spin multiplicity (spin)", "--spin")),
        (("--charge", 0, "--spin", 1, "s2ffn.pt"), ("takes no total charge",)),
        (("--charge", 100, "--spin", 1), ("charge 100 is outside",)),
        (("--charge", 0.5), ("--charge",)),
    ],
)
def test_run_refusals_are_one_line(work, args, words):
    model = args[-1] if args and str(args[-1]).endswith(".pt") else "chgspin.pt"
    args = args[:-1] if model != "chgspin.pt" else args
    res = run("--structure", "mol.xyz", "--steps", 1, *args, model=model)
    one_line_error(res, *words)
    assert not (work / "t.h5").exists() and not (work / "c.ckpt").exists()


def test_print_config(work):
    res = run("--structure", "mol.xyz", "--charge", -1, "--print-config")
    assert res.exit_code == 0, res.output
    assert "charge = -1" in res.stdout and "# spin" in res.stdout
    res = invoke("run", "--help")
    assert "--charge" in res.stdout and "--spin" in res.stdout


RELAX = ("relax", "--model", "chgspin.pt", "--output", "out.traj", "--steps", 3,
         "--fmax", 1e-9, "--device", "cpu")  # fmt: skip


@pytest.mark.parametrize("args", [("--structure", "mol.xyz", "--charge", -1, "--spin", 2),
                                  ("--structure", "mol_info.extxyz")])  # fmt: skip
def test_relax_gives_single_call_numbers(work, pot, args):
    res = invoke(*RELAX, *args)
    assert res.exit_code == 1, res.output  # not converged in 3 steps: the last structure
    out = ase.io.read(work / "out.traj")
    assert out.info["charge"] == -1 and out.info["spin"] == 2
    ref = pot.evaluate(out.positions, None, False, out.get_chemical_symbols(), charge=-1, spin=2)
    np.testing.assert_allclose(out.get_forces(), ref.forces, rtol=0, atol=1e-10)
    assert abs(out.get_potential_energy() - ref.energy) <= 1e-10 * abs(ref.energy)


def test_relax_refusals_are_one_line(work):
    one_line_error(invoke(*RELAX, "--structure", "mol.xyz"), "--charge --spin")
    one_line_error(invoke(*RELAX, "--structure", "mol.xyz", "--model", "s2ffn.pt", "--spin", 1),
                   "takes no total charge")  # fmt: skip
    assert not (work / "out.traj").exists()


def test_relax_several_structures_each_with_its_own(work, pot):
    """Batched relaxation (several structures in lockstep, one model call per step): each
    structure relaxes under its own file's charge and spin, exactly as it does alone; the
    output keeps them; --charge/--spin set all; one lacking a value is named."""
    mol = ase.io.read(work / "mol_info.extxyz")
    mol.info.update(charge=1, spin=1)
    mol.rattle(0.02, seed=4)
    ase.io.write(work / "mol_cation.extxyz", mol, format="extxyz")
    files = ("mol_info.extxyz", "mol_cation.extxyz")
    args = ("--steps", 3, "--fmax", 1e-9, "--device", "cpu", "--model", "chgspin.pt")
    res = invoke("relax", "--structure", files[0], "--structure", files[1],
                 "--output", "many.traj", *args)  # fmt: skip
    assert res.exit_code == 1, res.output  # not converged in 3 steps
    many = ase.io.read(work / "many.traj", ":")
    for k, (name, cs) in enumerate(zip(files, [(-1, 2), (1, 1)])):
        assert (many[k].info["charge"], many[k].info["spin"]) == cs
        alone = invoke("relax", "--structure", name, "--output", f"alone{k}.traj", *args)
        assert alone.exit_code == 1, alone.output
        one = ase.io.read(work / f"alone{k}.traj")
        np.testing.assert_allclose(many[k].positions, one.positions, rtol=0, atol=1e-8)
        ref = pot.evaluate(many[k].positions, None, False, many[k].get_chemical_symbols(),
                           charge=cs[0], spin=cs[1])  # fmt: skip
        np.testing.assert_allclose(many[k].get_forces(), ref.forces, rtol=0, atol=1e-8)
    res = invoke("relax", "--structure", files[0], "--structure", files[1], "--charge", 0,
                 "--output", "zero.traj", *args)  # fmt: skip
    assert res.exit_code == 1, res.output
    assert [a.info["charge"] for a in ase.io.read(work / "zero.traj", ":")] == [0, 0]
    res = invoke("relax", "--structure", files[0], "--structure", "mol.xyz",
                 "--output", "bad.traj", *args)  # fmt: skip
    one_line_error(res, "mol.xyz[-1]:", "--charge --spin")
    assert not (work / "bad.traj").exists()


def test_run_spin_model_with_charge_and_spin(work):
    """mdband run of a spin model that also takes charge and spin (deepmd-kit allows both):
    the moments held fixed from the structure file, --charge/--spin reach every step."""
    spin_fix = FIX.parent / "deepmd_spin"
    shutil.copy(spin_fix / "chgspin_spin_native.pt", work / "cs_spin.pt")
    cluster = ase.io.read(spin_fix / "spin_structures.extxyz", 3)
    ase.io.write(work / "cluster.extxyz", cluster, format="extxyz")
    res = run("--structure", "cluster.extxyz", "--steps", 2, "--charge", 2, "--spin", 3,
              model="cs_spin.pt")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "Total charge 2 (given), spin multiplicity 3 (given)" in res.stdout
    assert "held fixed" in res.stdout
    spin_pot = mdband.load_model(work / "cs_spin.pt", device="cpu", dtype="float64")
    moments = cluster.get_initial_magnetic_moments()
    with H5MDReader(work / "t.h5") as r:
        atoms = r.to_atoms(slice(0, None))
    assert len(atoms) == 3
    for a in atoms:
        ref = spin_pot.evaluate(a.positions, None, False, a.get_chemical_symbols(), charge=2,
                                spin=3, magmoms=moments)  # fmt: skip
        np.testing.assert_allclose(a.get_forces(), ref.forces, rtol=0, atol=1e-10)
    res = run("--structure", "cluster.extxyz", "--steps", 1, "--overwrite", model="cs_spin.pt")
    one_line_error(res, "--charge --spin")
