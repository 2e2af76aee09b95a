"""Initial velocities: ``maxwell`` gives exactly the target temperature at step 0 (over the
degrees of freedom ASE counts), zero total momentum and, for open systems, zero rotation, and
is reproducible from the seed; ``file`` takes the structure file's velocities or refuses."""

import ase.io
import numpy as np
import pytest
from ase.build import bulk
from ase.constraints import FixAtoms
from click.testing import CliRunner

from mdband.cli import main
from mdband.errors import StructureError
from mdband.md import RunConfig
from mdband.md.setup import prepare


def config(structure, lj_file, **kw):
    base = dict(structure=str(structure), model=str(lj_file), temperature=300.0, seed=7, steps=1)
    return RunConfig(**{**base, **kw})


def start(structure, lj_file, lj, **kw):
    p = prepare(config(structure, lj_file, **kw), potential=lj)
    return p.atoms, p.notes


def cluster(tmp_path):
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.pbc = False
    atoms.center(vacuum=6.0)
    path = tmp_path / "cluster.xyz"
    ase.io.write(path, atoms)
    return path


@pytest.mark.parametrize("temperature", [300.0, 12.5])
def test_periodic_maxwell_is_exact_with_zero_momentum(
    tmp_path, argon_xyz, lj_file, lj, temperature
):
    atoms, notes = start(argon_xyz, lj_file, lj, temperature=temperature)
    assert atoms.get_temperature() == pytest.approx(temperature, rel=1e-12)
    np.testing.assert_allclose(atoms.get_momenta().sum(axis=0), 0.0, atol=1e-12)
    assert "scaled to" in notes[-1] and "zero total momentum" in notes[-1]
    assert "angular" not in notes[-1]


def test_step_zero_reads_the_target(tmp_path, argon_xyz, lj_file, lj):
    from mdband.md import run

    res = run(config(argon_xyz, lj_file, steps=2, traj_every=1, progress=False), potential=lj)
    step, _, obs = res.samples[0]
    assert step == 0 and obs["temperature"] == pytest.approx(300.0, rel=1e-12)


def test_open_system_has_zero_angular_momentum(tmp_path, lj_file, lj):
    atoms, notes = start(cluster(tmp_path), lj_file, lj)
    assert atoms.get_temperature() == pytest.approx(300.0, rel=1e-12)
    np.testing.assert_allclose(atoms.get_momenta().sum(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(atoms.get_angular_momentum(), 0.0, atol=1e-10)
    assert "zero angular momentum" in notes[-1]


def test_fixed_atoms_count_out_of_the_degrees_of_freedom(tmp_path, lj_file, lj):
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.set_constraint(FixAtoms([0, 1, 2]))
    ase.io.write(tmp_path / "fixed.extxyz", atoms)
    got, notes = start(tmp_path / "fixed.extxyz", lj_file, lj)
    assert np.all(got.get_momenta()[:3] == 0)
    ekin = got.get_kinetic_energy()
    from ase import units

    assert 2 * ekin / (units.kB * (3 * len(got) - 9)) == pytest.approx(300.0, rel=1e-12)
    assert got.get_temperature() == pytest.approx(300.0, rel=1e-12)
    assert "over 87 degrees of freedom" in notes[-1]


def test_the_seed_reproduces_the_velocities(tmp_path, argon_xyz, lj_file, lj):
    a, _ = start(argon_xyz, lj_file, lj, seed=5)
    b, _ = start(argon_xyz, lj_file, lj, seed=5)
    c, _ = start(argon_xyz, lj_file, lj, seed=6)
    assert a.get_momenta().tobytes() == b.get_momenta().tobytes()
    assert not np.allclose(a.get_momenta(), c.get_momenta())


def test_zero_temperature_gives_zero_momenta(tmp_path, argon_xyz, lj_file, lj):
    atoms, _ = start(argon_xyz, lj_file, lj, temperature=0.0, velocities="maxwell")
    assert np.all(atoms.get_momenta() == 0)


@pytest.fixture
def moving(tmp_path):
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.set_velocities(np.random.default_rng(3).normal(0.0, 0.004, (len(atoms), 3)))
    path = tmp_path / "moving.extxyz"
    ase.io.write(path, atoms)
    return path, ase.io.read(path)


@pytest.mark.parametrize("mode", ["file", "auto"])
def test_file_velocities_are_taken_as_they_are(tmp_path, moving, lj_file, lj, mode):
    path, src = moving
    atoms, notes = start(path, lj_file, lj, velocities=mode)
    assert atoms.get_momenta().tobytes() == src.get_momenta().tobytes()
    assert notes[-1].startswith("Velocities: taken from the structure file")


def test_maxwell_ignores_file_velocities(tmp_path, moving, lj_file, lj):
    path, src = moving
    atoms, _ = start(path, lj_file, lj, velocities="maxwell")
    assert not np.allclose(atoms.get_momenta(), src.get_momenta())
    assert atoms.get_temperature() == pytest.approx(300.0, rel=1e-12)


def test_file_without_velocities_is_refused(tmp_path, argon_xyz, lj_file, lj):
    with pytest.raises(StructureError, match="has no velocities .--velocities file.; use"):
        start(argon_xyz, lj_file, lj, velocities="file")


def test_cli_velocities_file_without_velocities_is_one_line(
    tmp_path, argon_xyz, lj_file, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    res = CliRunner().invoke(
        main,
        [
            "run",
            "--structure",
            "ar.xyz",
            "--model",
            "lj.mdband",
            "--velocities",
            "file",
            "--trajectory",
            "t.h5",
        ],
    )
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        "mdband: error: structure ar.xyz has no velocities (--velocities file); "
        "use --velocities maxwell"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_linear_molecule_without_warnings(tmp_path, lj_file, lj):
    """A dimer has a zero moment of inertia: zero rotation must not warn or produce NaN."""
    import warnings

    from ase import Atoms

    Atoms("Ar2", positions=[[0, 0, 0], [3.8, 0, 0]]).write(tmp_path / "dimer.xyz")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        atoms, _ = start(tmp_path / "dimer.xyz", lj_file, lj)
    assert np.all(np.isfinite(atoms.get_momenta()))
    assert atoms.get_temperature() == pytest.approx(300.0, rel=1e-12)
    np.testing.assert_allclose(atoms.get_angular_momentum(), 0.0, atol=1e-12)
