"""``mdband export`` to the formats of dpdata and DP-GEN: energies, forces and virials that
dpdata reads back, a multi-frame LAMMPS dump with the run's steps, model-devi on that dump; and
the modes of every output file following the umask."""

import os
import stat

import ase.io
import dpdata
import numpy as np
import pytest
from ase.build import bulk
from click.testing import CliRunner

from mdband.cli import main
from mdband.io.h5md_reader import H5MDReader
from mdband.testing.lj import lennard_jones_potential

FORMATS = ["deepmd/npy", "deepmd/npy/mixed", "deepmd/hdf5", "deepmd/raw", "extxyz"]


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A 20-step Langevin run of 32 argon atoms in a triclinic-free cubic cell; float64 frames
    every 5 steps (steps 0..20), and a second LJ model for a committee."""
    d = tmp_path_factory.mktemp("export")
    atoms = bulk("Ar", "fcc", a=5.3, cubic=True).repeat(2)
    atoms.rattle(0.1, seed=3)
    ase.io.write(d / "ar.xyz", atoms)
    lennard_jones_potential().save(d / "lj.mdband")
    lennard_jones_potential(epsilon=0.0110).save(d / "lj2.mdband")
    res = cli(
        "run", "--structure", d / "ar.xyz", "--model", d / "lj.mdband", "--ensemble",
        "nvt-langevin", "--temperature", 60, "--timestep", 5, "--steps", 20, "--traj-every", 5,
        "--seed", 1, "--traj-precision", "float64", "--trajectory", d / "t.h5", "--no-progress",
        "--threads", 1, "--dtype", "float64",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return d


def reference(run_dir):
    """Each frame's positions, cell, step, and the LJ model's energy, forces and virial there."""
    pot = lennard_jones_potential()
    out = []
    with H5MDReader(run_dir / "t.h5") as r:
        for i in range(r.n_frames):
            atoms = r.to_atoms(i)
            res = pot.evaluate(atoms.positions, atoms.cell.array, True, atoms.numbers)
            out.append((atoms, int(r.steps[i]), res))
    return out


def read_back(path, fmt):
    if fmt == "deepmd/npy/mixed":
        (system,) = dpdata.MultiSystems.from_file(str(path), fmt=fmt, labeled=True)
        return system
    if fmt == "extxyz":
        (system,) = dpdata.MultiSystems.from_file(str(path), fmt="extxyz")
        return system
    return dpdata.LabeledSystem(str(path), fmt=fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_dpdata_reads_the_exports_with_virials(run_dir, tmp_path, fmt):
    out = tmp_path / ("out.extxyz" if fmt == "extxyz" else "out")
    res = cli("export", run_dir / "t.h5", out, "--format", fmt)
    assert res.exit_code == 0, res.output
    assert "wrote 5 frame(s), steps 0..20" in res.output
    system = read_back(out, fmt)
    assert system.get_nframes() == 5 and "virials" in system.data
    assert list(system["atom_names"]) == ["Ar"]
    tol = 1e-7 if fmt == "extxyz" else 1e-9  # ASE's extxyz writes 8 decimals
    for k, (atoms, _, want) in enumerate(reference(run_dir)):
        np.testing.assert_allclose(system["coords"][k], atoms.positions, rtol=0, atol=tol)
        np.testing.assert_allclose(system["cells"][k], atoms.cell.array, rtol=0, atol=tol)
        assert system["energies"][k] == pytest.approx(want.energy, rel=1e-10)
        np.testing.assert_allclose(system["forces"][k], want.forces, rtol=0, atol=tol)
        # the potential's virial: the recorded stress less its kinetic part, times -V
        np.testing.assert_allclose(system["virials"][k], want.virial, rtol=1e-8, atol=tol)


def test_lammps_dump_for_dpgen(run_dir, tmp_path):
    out = tmp_path / "traj.dump"
    res = cli("export", run_dir / "t.h5", out)  # the name says lammps/dump
    assert res.exit_code == 0 and "(lammps/dump)" in res.output, res.output
    ref = reference(run_dir)
    text = out.read_text().splitlines()
    steps = [int(text[i + 1]) for i, line in enumerate(text) if line == "ITEM: TIMESTEP"]
    assert steps == [s for _, s, _ in ref] == [0, 5, 10, 15, 20]
    # dpdata reads it as DP-GEN does, types numbered by the run's model type map
    system = dpdata.System(str(out), fmt="lammps/dump", type_map=["Ar"])
    assert system.get_nframes() == 5 and list(system["atom_names"]) == ["Ar"]
    # ASE reads positions and forces (LAMMPS's rotation: a cubic cell keeps its axes)
    images = ase.io.read(out, index=":", format="lammps-dump-text")
    for atoms, (want_atoms, _, want) in zip(images, ref):
        np.testing.assert_allclose(atoms.get_forces(), want.forces, rtol=1e-9, atol=1e-9)
        d = atoms.positions - want_atoms.positions
        frac = np.linalg.solve(want_atoms.cell.array.T, d.T).T
        np.testing.assert_allclose(frac, np.round(frac), atol=1e-9)
    # dpdata picks frames by index, as DP-GEN selects from model_devi.out rows
    picked = dpdata.System(str(out), fmt="lammps/dump", type_map=["Ar"], f_idx=[1, 3])
    np.testing.assert_allclose(picked["coords"], system["coords"][[1, 3]])


def test_model_devi_on_the_dump_keeps_its_steps(run_dir, tmp_path):
    dump = tmp_path / "traj.dump"
    assert cli("export", run_dir / "t.h5", dump).exit_code == 0
    out = tmp_path / "model_devi.out"
    models = [run_dir / "lj.mdband", run_dir / "lj2.mdband"]
    res = cli("model-devi", *models, "-s", dump, "-o", out, "--dtype", "float64")
    assert res.exit_code == 0, res.output
    rows = np.loadtxt(out, ndmin=2)
    np.testing.assert_array_equal(rows[:, 0], [0, 5, 10, 15, 20])  # not 0..4
    # and the H5MD trajectory itself gives the same rows
    out2 = tmp_path / "model_devi_h5.out"
    res = cli("model-devi", *models, "-s", run_dir / "t.h5", "-o", out2, "--dtype", "float64")
    assert res.exit_code == 0, res.output
    np.testing.assert_allclose(np.loadtxt(out2, ndmin=2), rows, rtol=1e-6)


def test_export_errors(run_dir, tmp_path):
    res = cli("export", run_dir / "t.h5", tmp_path / "x", "--format", "lammps/lmp")
    assert res.exit_code == 2 and "neither one dpdata writes" in res.stderr
    res = cli("export", run_dir / "t.h5", tmp_path / "y.dump", "--type-map", "Kr")
    assert res.exit_code == 2 and "type map Kr lacks Ar" in res.stderr


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_output_modes_follow_the_umask(run_dir, tmp_path):
    old = os.umask(0o027)
    try:
        for name, fmt in (("a.extxyz", None), ("a.dump", None), ("npy", "deepmd/npy")):
            args = ["export", run_dir / "t.h5", tmp_path / name]
            res = cli(*args, *(["--format", fmt] if fmt else []))
            assert res.exit_code == 0, res.output
        assert mode(tmp_path / "a.extxyz") == 0o640 and mode(tmp_path / "a.dump") == 0o640
        assert mode(tmp_path / "npy") == 0o750
        assert mode(tmp_path / "npy" / "type.raw") == 0o640
        assert mode(tmp_path / "npy" / "set.000") == 0o750
        assert mode(tmp_path / "npy" / "set.000" / "coord.npy") == 0o640
        res = cli("plot", run_dir / "t.h5", "-o", tmp_path / "t.png")
        assert res.exit_code == 0, res.output
        assert mode(tmp_path / "t.png") == 0o640
        res = cli(
            "run", "--structure", run_dir / "ar.xyz", "--model", run_dir / "lj.mdband",
            "--steps", 2, "--final", tmp_path / "end.xyz", "--no-progress", "--threads", 1,
            "--log", tmp_path / "run.log",
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        assert mode(tmp_path / "end.xyz") == 0o640
    finally:
        os.umask(old)


def test_overwrite_replaces_a_system_directory_whole(run_dir, tmp_path):
    out = tmp_path / "npy"
    args = ("export", run_dir / "t.h5", out, "--format", "deepmd/npy")
    assert cli(*args).exit_code == 0
    res = cli(*args, "--every", 2)
    assert res.exit_code == 2 and "exists" in res.stderr
    assert dpdata.LabeledSystem(str(out), fmt="deepmd/npy").get_nframes() == 5
    res = cli(*args, "--every", 2, "--overwrite")
    assert res.exit_code == 0, res.output
    assert dpdata.LabeledSystem(str(out), fmt="deepmd/npy").get_nframes() == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["npy"]  # no temporary left
