"""Relaxation (mdband.md.relax): reaches fmax on a rattled cell and, with cell=True, on a
strained one; keeps constraints; writes the output atomically and never over a file."""

import ase.io
import numpy as np
import pytest
from ase import units
from ase.build import bulk
from ase.constraints import FixAtoms

from mdband.calculator import Calculator
from mdband.md.errors import ConfigError, OutputExistsError
from mdband.md.relax import RelaxConfig, relax


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """FrechetCellFilter does many 3x3 scipy solves; OpenBLAS's thread pool makes each cost
    milliseconds on a busy 2-core machine (20x the whole relaxation)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # only slower
        yield
        return
    with threadpool_limits(1):
        yield


def argon(path, strain=1.0, rattle=0.1, seed=2, constraint=None):
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.set_cell(atoms.cell * strain, scale_atoms=True)
    atoms.rattle(rattle, seed=seed)
    if constraint is not None:
        atoms.set_constraint(constraint)
    ase.io.write(path, atoms)
    return ase.io.read(path)


def settings(tmp_path, structure, lj_file, **kw):
    base = dict(structure=str(structure), model=str(lj_file), output=str(tmp_path / "out.xyz"))
    return RelaxConfig(**{**base, **kw})


def max_force(atoms):
    return float(np.sqrt((atoms.get_forces() ** 2).sum(axis=1).max()))


@pytest.mark.parametrize("optimizer", ["fire", "bfgs"])
def test_rattled_positions_reach_fmax(tmp_path, lj_file, lj, optimizer):
    start = argon(tmp_path / "in.xyz")
    start.calc = Calculator(lj)
    assert max_force(start) > 0.1  # far from converged to begin with
    res = relax(
        settings(tmp_path, tmp_path / "in.xyz", lj_file, optimizer=optimizer),
        potential=lj,
        logfile=None,
    )
    assert res.converged and 0 < res.steps < 1000
    assert res.max_force < 0.01 and res.energy < start.get_potential_energy()
    out = ase.io.read(tmp_path / "out.xyz")  # recomputed independently of the run
    np.testing.assert_array_equal(out.cell.array, start.cell.array)  # cell untouched
    out.calc = Calculator(lj)
    assert max_force(out) < 0.01
    assert out.get_potential_energy() == pytest.approx(res.energy, abs=1e-6)
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("optimizer", ["fire", "bfgs"])
def test_strained_cell_relaxes_with_cell(tmp_path, lj_file, lj, optimizer):
    start = argon(tmp_path / "strained.xyz", strain=1.04, rattle=0.02, seed=3)
    start.calc = Calculator(lj)
    stress0 = np.abs(start.get_stress()).max()
    cfg = settings(tmp_path, tmp_path / "strained.xyz", lj_file, cell=True, optimizer=optimizer)
    res = relax(cfg, potential=lj, logfile=None)
    assert res.converged and res.max_force < 0.01
    out = ase.io.read(tmp_path / "out.xyz")
    out.calc = Calculator(lj)
    # FrechetCellFilter's convergence: |virial| / N below fmax
    stress = np.abs(out.get_stress(voigt=False)).max()
    assert stress * out.get_volume() / len(out) < 0.01 and stress < stress0 / 5
    assert res.max_stress == pytest.approx(stress / units.GPa, rel=1e-6)
    assert out.get_volume() < start.get_volume()  # the stretched crystal shrinks back
    assert max_force(out) < 0.01


def test_constraints_are_kept(tmp_path, lj_file, lj):
    start = argon(tmp_path / "in.extxyz", constraint=FixAtoms([0, 5]))
    res = relax(settings(tmp_path, tmp_path / "in.extxyz", lj_file), potential=lj, logfile=None)
    assert res.converged
    out = ase.io.read(tmp_path / "out.xyz")
    np.testing.assert_array_equal(out.positions[[0, 5]], start.positions[[0, 5]])
    assert [type(c) for c in out.constraints] == [FixAtoms]


@pytest.mark.parametrize("name", ["path.traj", "path.extxyz"])
def test_trajectory_has_every_step(tmp_path, lj_file, lj, name):
    argon(tmp_path / "in.xyz")
    cfg = settings(tmp_path, tmp_path / "in.xyz", lj_file, trajectory=str(tmp_path / name))
    res = relax(cfg, potential=lj, logfile=None)
    frames = ase.io.read(tmp_path / name, ":")
    assert len(frames) == res.steps + 1  # the start and every step
    energies = [f.get_potential_energy() for f in frames]
    assert energies[-1] == pytest.approx(res.energy, abs=1e-9) and energies[-1] < energies[0]


def test_not_converged_still_writes_the_last_structure(tmp_path, lj_file, lj):
    argon(tmp_path / "in.xyz")
    res = relax(
        settings(tmp_path, tmp_path / "in.xyz", lj_file, steps=2), potential=lj, logfile=None
    )
    assert not res.converged and res.steps == 2 and res.max_force > 0.01
    assert (tmp_path / "out.xyz").is_file()


def test_outputs_are_never_overwritten_unasked(tmp_path, lj_file, lj):
    argon(tmp_path / "in.xyz")
    (tmp_path / "out.xyz").write_text("keep me")
    with pytest.raises(OutputExistsError, match="output file .* exists; use --overwrite"):
        relax(settings(tmp_path, tmp_path / "in.xyz", lj_file), potential=lj, logfile=None)
    assert (tmp_path / "out.xyz").read_text() == "keep me"
    res = relax(
        settings(tmp_path, tmp_path / "in.xyz", lj_file, overwrite=True), potential=lj, logfile=None
    )
    assert res.converged and len(ase.io.read(tmp_path / "out.xyz")) == 32


def test_a_file_appearing_meanwhile_is_not_replaced(tmp_path, lj_file, lj, monkeypatch):
    """Between the check and the rename another writer creates the output: it is kept."""
    import mdband.md.relax as relax_module

    argon(tmp_path / "in.xyz")
    real = relax_module._result

    def late_writer(*args, **kwargs):
        (tmp_path / "out.xyz").write_text("other writer")
        return real(*args, **kwargs)

    monkeypatch.setattr(relax_module, "_result", late_writer)
    with pytest.raises(FileExistsError):
        relax(settings(tmp_path, tmp_path / "in.xyz", lj_file), potential=lj, logfile=None)
    assert (tmp_path / "out.xyz").read_text() == "other writer"
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"fmax": 0.0}, "fmax must be positive"),
        ({"fmax": -1.0}, "fmax must be positive"),
        ({"steps": 0}, "steps must be positive"),
        ({"optimizer": "lbfgs"}, "optimizer must be fire or bfgs; got 'lbfgs'"),
        ({"output": None}, r"no output given \(--output FILE\)"),
        ({"structure": None}, "no structure given"),
        ({"cell": "yes"}, "cell must be true or false"),
        ({"min_distance": -1.0}, "min_distance must be >= 0"),
    ],
)
def test_bad_settings_are_named(tmp_path, lj_file, kw, message):
    base = dict(structure="in.xyz", model=str(lj_file), output="out.xyz")
    with pytest.raises(ConfigError, match=message):
        RelaxConfig(**{**base, **kw})
