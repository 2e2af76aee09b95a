"""``mdband run`` with a spin model: lattice dynamics on the structure file's magnetic moments,
held fixed; the first frame is the single call's numbers, the moments are kept in the
trajectory and the checkpoint, a split run equals the whole one, and missing moments are
refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import ase.io
import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import mdband
from mdband.cli import main
from mdband.errors import SpinInputError
from mdband.io.checkpoint import read_checkpoint
from mdband.io.h5md import H5MDReader
from mdband.md import RunConfig, run

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd_spin"


@pytest.fixture(scope="module")
def pots():
    return {n: mdband.load_model(FIX / f"{n}.pt", device="cpu", dtype="float64")
            for n in ("spin_native", "spin_deepspin")}  # fmt: skip


@pytest.fixture
def structure(tmp_path):
    """The thin periodic cell of the fixtures (5 atoms) with its moments, as extxyz."""
    atoms = ase.io.read(FIX / "spin_structures.extxyz", index=2)
    assert atoms.get_initial_magnetic_moments().shape == (5, 3)
    path = tmp_path / "fe.extxyz"
    ase.io.write(path, atoms)
    return path, atoms


def config(tmp_path, structure, name, steps, **kw):
    base = dict(structure=str(structure), model=str(FIX / "unused.pt"), ensemble="nve",
                temperature=300.0, timestep=0.5, steps=steps, seed=3, traj_every=2,
                checkpoint_every=2, trajectory=str(tmp_path / f"{name}.h5"),
                checkpoint=str(tmp_path / f"{name}.ckpt"), traj_precision="float64",
                traj_force_unit="eV Angstrom-1", dtype="float64", progress=False)  # fmt: skip
    base.update(kw)
    return RunConfig(**base)


@pytest.mark.parametrize("name", ["spin_native", "spin_deepspin"])
def test_run_holds_the_moments_and_gives_the_single_call_numbers(tmp_path, structure, pots,
                                                                  name):  # fmt: skip
    path, atoms = structure
    pot = pots[name]
    m = atoms.get_initial_magnetic_moments()
    out = run(config(tmp_path, path, "r", 2, final=str(tmp_path / "f.extxyz")), potential=pot)
    ref = pot.evaluate(atoms.positions, atoms.cell.array, atoms.pbc, atoms.get_chemical_symbols(),
                       magmoms=m)  # fmt: skip
    with H5MDReader(tmp_path / "r.h5") as r:
        assert list(r.steps) == [0, 2]
        first = r.frame(0)
        np.testing.assert_array_equal(first.forces, ref.forces)
        assert r.observable("potential_energy")[0] == ref.energy
        np.testing.assert_array_equal(r.magmoms, m)
        np.testing.assert_array_equal(r.to_atoms(1).get_initial_magnetic_moments(), m)
        moved = r.frame(1).positions
    assert not np.allclose(moved, first.positions)  # the lattice moved, the moments did not
    np.testing.assert_array_equal(out.atoms.get_initial_magnetic_moments(), m)
    final = ase.io.read(tmp_path / "f.extxyz")
    np.testing.assert_array_equal(final.get_initial_magnetic_moments(), m)
    ck = read_checkpoint(tmp_path / "r.ckpt")
    np.testing.assert_array_equal(ck.magmoms, m)
    with h5py.File(tmp_path / "r.ckpt") as f:
        assert int(f.attrs["format_version"]) == 3


def test_split_spin_run_equals_the_whole_run(tmp_path, structure, pots):
    path, _ = structure
    pot = pots["spin_deepspin"]
    whole = run(config(tmp_path, path, "whole", 4), potential=pot)
    run(config(tmp_path, path, "split", 2), potential=pot)
    second = run(config(tmp_path, path, "split", 4, resume=True), potential=pot)
    assert second.first_step == 2
    for getter in ("get_positions", "get_momenta", "get_initial_magnetic_moments"):
        a, b = getattr(whole.atoms, getter)(), getattr(second.atoms, getter)()
        assert a.tobytes() == b.tobytes(), getter


def test_missing_moments_are_refused_before_any_output(tmp_path, structure, pots):
    _, atoms = structure
    bare = atoms.copy()
    bare.set_initial_magnetic_moments(None)
    ase.io.write(tmp_path / "bare.extxyz", bare)
    with pytest.raises(SpinInputError, match=r"bare.extxyz: .*magnetic moment vectors"):
        run(config(tmp_path, tmp_path / "bare.extxyz", "x", 2), potential=pots["spin_native"])
    assert not (tmp_path / "x.h5").exists() and not (tmp_path / "x.ckpt").exists()


def test_cli_says_so_in_one_line(tmp_path, structure, monkeypatch):
    _, atoms = structure
    monkeypatch.chdir(tmp_path)
    bare = atoms.copy()
    bare.set_initial_magnetic_moments(None)
    bare.set_initial_magnetic_moments(np.ones(len(bare)))  # collinear: one number per atom
    ase.io.write(tmp_path / "col.extxyz", bare)
    res = CliRunner().invoke(main, ["run", "--model", str(FIX / "spin_native.pt"), "--structure",
                                    "col.extxyz", "--steps", "1", "--no-progress"])  # fmt: skip
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "collinear" in lines[0], res.output


def test_relax_keeps_the_moments(tmp_path, structure, monkeypatch):
    """``mdband relax`` moves the atoms at the structure file's moments and writes them back."""
    path, atoms = structure
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["relax", "--model", str(FIX / "spin_deepspin.pt"),
                                    "--structure", str(path), "--output", "out.extxyz",
                                    "--steps", "2", "--fmax", "1e-6"])  # fmt: skip
    assert res.exit_code == 1 and "not converged" in res.output, res.output  # 2 steps: written
    out = ase.io.read(tmp_path / "out.extxyz")
    np.testing.assert_array_equal(out.get_initial_magnetic_moments(),
                                  atoms.get_initial_magnetic_moments())  # fmt: skip
    assert not np.allclose(out.positions, atoms.positions)
