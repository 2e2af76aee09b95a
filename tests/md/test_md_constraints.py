"""ASE constraints in ``mdband run``: FixAtoms, FixCartesian and FixCom are carried (read from
the structure file, honoured by the integrator, kept exactly across checkpoint/resume); every
other constraint, and ensembles that cannot honour constraints, are refused with the reason."""

import io

import ase.io
import h5py
import numpy as np
import pytest
from ase.build import bulk
from ase.constraints import FixAtoms, FixBondLength, FixCartesian, FixCom, FixSymmetry, Hookean
from click.testing import CliRunner
from rich.console import Console

from mdband.cli import main
from mdband.errors import StructureError
from mdband.io.checkpoint import read_checkpoint
from mdband.io.h5md import H5MDReader
from mdband.md import RunConfig, run
from mdband.md.constraints import carried_constraints

FIXED = [0, 3, 7, 12]


def argon(constraints, name, tmp_path):
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=1)
    atoms.set_constraint(constraints)
    path = tmp_path / name
    ase.io.write(path, atoms)
    back = ase.io.read(path)  # what the run starts from (extxyz rounds positions)
    assert back.constraints, "the file keeps the constraint"
    return path, back


def settings(tmp_path, structure, lj_file, label, steps, **kw):
    base = dict(
        structure=str(structure),
        model=str(lj_file),
        ensemble="nve",
        temperature=80.0,
        timestep=5.0,
        seed=4,
        steps=steps,
        traj_every=5,
        checkpoint_every=5,
        trajectory=str(tmp_path / f"{label}.h5"),
        checkpoint=str(tmp_path / f"{label}.ckpt"),
        traj_precision="float64",
        dtype="float64",
        progress=False,
    )
    return RunConfig(**{**base, **kw})


def frames(path):
    """Positions and velocities of every frame of an H5MD trajectory, (F, N, 3) each."""
    with H5MDReader(path) as r:
        got = [(f.positions, f.velocities) for f in r]
    return np.stack([g[0] for g in got]), np.stack([g[1] for g in got])


@pytest.mark.parametrize("ensemble", ["nve", "nvt-langevin", "nvt-bussi"])
def test_fix_atoms_holds_atoms_and_resumes_exactly(tmp_path, lj_file, lj, ensemble):
    path, start = argon([FixAtoms(FIXED)], "fixed.extxyz", tmp_path)
    kw = {"ensemble": ensemble, "friction": 5.0}
    out = Console(file=io.StringIO(), width=300)
    whole = run(settings(tmp_path, path, lj_file, "whole", 20, **kw), potential=lj, console=out)
    header = out.file.getvalue()
    assert "Constraints: FixAtoms (12 degrees of freedom removed; kept in checkpoints)" in header
    pos, vel = frames(tmp_path / "whole.h5")
    assert np.array_equal(whole.atoms.positions[FIXED], start.positions[FIXED])  # exactly
    # frames store positions folded into the box with image flags: read back to rounding
    np.testing.assert_allclose(
        pos[:, FIXED], np.broadcast_to(start.positions[FIXED], pos[:, FIXED].shape), atol=1e-12
    )
    assert np.all(vel[:, FIXED] == 0)
    free = np.setdiff1d(np.arange(len(start)), FIXED)
    assert not np.allclose(pos[-1, free], start.positions[free])  # the others move
    run(settings(tmp_path, path, lj_file, "split", 10, **kw), potential=lj)
    ck = read_checkpoint(tmp_path / "split.ckpt")
    assert "FixAtoms" in ck.constraints
    with h5py.File(tmp_path / "split.ckpt", "r") as f:
        assert int(f.attrs["format_version"]) == 2
    second = run(settings(tmp_path, path, lj_file, "split", 20, resume=True, **kw), potential=lj)
    assert [type(c) for c in second.atoms.constraints] == [FixAtoms]
    assert np.array_equal(second.atoms.constraints[0].index, FIXED)
    for getter in ("get_positions", "get_momenta"):
        a, b = getattr(whole.atoms, getter)(), getattr(second.atoms, getter)()
        assert a.tobytes() == b.tobytes(), getter
    assert frames(tmp_path / "whole.h5")[0].tobytes() == frames(tmp_path / "split.h5")[0].tobytes()


def test_fix_cartesian_holds_coordinates(tmp_path, lj_file, lj):
    path, start = argon([FixCartesian([1, 2], mask=(True, False, True))], "cart.extxyz", tmp_path)
    res = run(settings(tmp_path, path, lj_file, "cart", 20), potential=lj)
    pos, vel = frames(tmp_path / "cart.h5")
    assert np.array_equal(
        res.atoms.positions[[1, 2]][:, [0, 2]], start.positions[[1, 2]][:, [0, 2]]
    )
    np.testing.assert_allclose(  # frames: folded positions + image flags, read back to rounding
        pos[:, [1, 2]][..., [0, 2]],
        np.broadcast_to(start.positions[[1, 2]][:, [0, 2]], pos[:, [1, 2]][..., [0, 2]].shape),
        atol=1e-12,
    )
    assert np.all(vel[:, [1, 2]][..., [0, 2]] == 0)
    assert not np.allclose(pos[-1, [1, 2], 1], start.positions[[1, 2], 1])  # y is free
    # 2 atoms x 2 coordinates: ASE counts 96 - 4 degrees of freedom for the temperature
    assert res.atoms.get_number_of_degrees_of_freedom() == 3 * len(start) - 4


@pytest.mark.parametrize("ensemble", ["nve", "nvt-langevin"])
def test_fix_com_keeps_the_centre_of_mass(tmp_path, lj_file, lj, ensemble):
    path, start = argon([FixCom()], "com.traj", tmp_path)
    cfg = settings(tmp_path, path, lj_file, "com", 20, ensemble=ensemble, friction=5.0)
    res = run(cfg, potential=lj)
    masses = start.get_masses()
    pos, vel = frames(tmp_path / "com.h5")
    com = np.einsum("i,fij->fj", masses, pos) / masses.sum()
    np.testing.assert_allclose(
        com, np.broadcast_to(start.get_center_of_mass(), com.shape), atol=1e-10
    )
    np.testing.assert_allclose(np.einsum("i,fij->fj", masses, vel), 0.0, atol=1e-9)
    assert res.atoms.get_number_of_degrees_of_freedom() == 3 * len(start) - 3


def test_unconstrained_checkpoints_stay_version_1(tmp_path, argon_xyz, lj_file, lj):
    run(settings(tmp_path, argon_xyz, lj_file, "plain", 5), potential=lj)
    with h5py.File(tmp_path / "plain.ckpt", "r") as f:
        assert int(f.attrs["format_version"]) == 1 and "constraints_json" not in f.attrs


@pytest.mark.parametrize(
    "constraint, reason",
    [
        (Hookean(0, 1, 3.0), "Hookean constraint, which mdband run does not support: adds forces"),
        (
            FixBondLength(0, 1),
            "FixBondLengths constraint, which mdband run does not support: a holonomic",
        ),
        (FixSymmetry, "FixSymmetry constraint, which mdband run does not support: it symmetrises"),
    ],
)
def test_other_constraints_are_refused_with_the_reason(tmp_path, lj_file, constraint, reason):
    if constraint is FixSymmetry:
        pytest.importorskip("spglib", reason="FixSymmetry needs spglib")
        constraint = FixSymmetry(bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2))
    path, _ = argon([constraint], "other.traj", tmp_path)
    with pytest.raises(StructureError, match=reason):
        run(settings(tmp_path, path, lj_file, "other", 5))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["other.traj", "lj.mdband"])


@pytest.mark.parametrize(
    "kw, reason",
    [
        ({"ensemble": "nvt-nhc"}, "NoseHooverChainNVT thermostats 3N degrees of freedom"),
        ({"ensemble": "npt-mtk"}, "ASE's MTK barostats do not support constraints"),
        ({"engine": "lammps"}, "--engine lammps does not carry them"),
    ],
)
def test_ensembles_and_engines_that_cannot_honour_constraints(tmp_path, kw, reason):
    config = RunConfig(structure="s.xyz", model="m.mdband", **kw)
    with pytest.raises(StructureError, match=reason):
        carried_constraints([FixAtoms([0])], config, "s.xyz")
    assert carried_constraints([], config, "s.xyz") == []


def test_cli_refusal_is_one_line_and_writes_nothing(tmp_path, lj_file, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, _ = argon([FixAtoms(FIXED)], "fixed.extxyz", tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    res = CliRunner().invoke(
        main,
        [
            "run",
            "--structure",
            path.name,
            "--model",
            "lj.mdband",
            "--ensemble",
            "nvt-nhc",
            "--trajectory",
            "t.h5",
            "--checkpoint",
            "c.ckpt",
        ],
    )
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "which ensemble nvt-nhc cannot honour" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before
