"""Batched relaxations (mdband.md.relax_batch): ASE's optimisers in lockstep, one batched
model call per step, the minima of one-by-one relax."""

from pathlib import Path

import ase.io
import numpy as np
import pytest
from ase import Atoms
from ase.build import bulk
from ase.constraints import FixAtoms

from mdband.md.errors import ConfigError, OutputExistsError
from mdband.md.relax import RelaxConfig, relax
from mdband.md.relax_batch import relax_many


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """FrechetCellFilter's many 3x3 solves: one BLAS thread (see test_md_relax.py)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # only slower
        yield
        return
    with threadpool_limits(1):
        yield


def rattled_cells():
    """Argon cells of 4, 8 and 32 atoms (fcc; strained and rattled), and an open cluster."""
    out = []
    for rep, strain, seed in (((1, 1, 1), 1.03, 1), ((2, 1, 1), 0.98, 2), ((2, 2, 2), 1.01, 3)):
        a = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(rep)
        a.set_cell(a.cell * strain, scale_atoms=True)
        a.rattle(0.12, seed=seed)
        out.append(a)
    out.append(Atoms("Ar4", positions=[[0, 0, 0], [3.9, 0, 0], [0, 3.6, 0.2], [1.8, 1.7, 3.3]]))
    return out


def write_inputs(tmp_path, images):
    """The first two images in one file, the others one file each."""
    ase.io.write(tmp_path / "multi.extxyz", images[:2])
    paths = [tmp_path / "multi.extxyz"]
    for k, a in enumerate(images[2:]):
        paths.append(tmp_path / f"single_{k}.extxyz")
        ase.io.write(paths[-1], a)
    return paths


@pytest.mark.parametrize(("optimizer", "cell"), [("fire", False), ("bfgs", False), ("fire", True)])
def test_batch_reaches_the_minima_of_one_by_one(tmp_path, lj, lj_file, optimizer, cell):
    images = rattled_cells()
    if cell:
        images = images[:3]  # periodic only
    paths = write_inputs(tmp_path, images)
    common = dict(model=str(lj_file), optimizer=optimizer, cell=cell, fmax=0.005, steps=400)
    batch = relax_many(
        RelaxConfig(
            structure=[str(p) for p in paths],
            all_frames=True,
            output=str(tmp_path / "all.extxyz"),
            **common,
        ),  # fmt: skip
        potential=lj,
        logfile=None,
    )
    assert [r.source for r in batch.structures] == [
        f"{paths[0]}[0]",
        f"{paths[0]}[1]",
        *[f"{p}[0]" for p in paths[1:]],
    ]
    assert batch.converged and batch.unbatched == 0
    assert batch.model_calls == batch.steps + 1  # one batched call per lockstep step
    written = ase.io.read(tmp_path / "all.extxyz", ":")
    assert len(written) == len(images)
    for k, (r, a) in enumerate(zip(batch.structures, images)):
        src = tmp_path / f"one_{k}.extxyz"
        ase.io.write(src, a)
        one = relax(RelaxConfig(structure=str(src), output=str(tmp_path / f"o{k}.xyz"),
                                **common), potential=lj, logfile=None)  # fmt: skip
        assert one.converged and r.steps == one.steps
        assert abs(r.energy - one.energy) < 1e-6
        assert written[k].get_potential_energy() == pytest.approx(r.energy, abs=1e-9)
        assert written[k].info["converged"] is True and written[k].info["source"] == r.source
        assert written[k].info["relax_steps"] == r.steps
        if cell:
            assert abs(r.volume - one.volume) < 1e-6


def test_not_converged_structures_are_written_and_flagged(tmp_path, lj, lj_file):
    images = rattled_cells()
    fixed = images[2].copy()
    fixed.set_constraint(FixAtoms(indices=[0, 1]))
    ase.io.write(tmp_path / "in.traj", [images[0], fixed])
    res = relax_many(
        RelaxConfig(
            structure=str(tmp_path / "in.traj"),
            all_frames=True,
            model=str(lj_file),
            output=str(tmp_path / "out.traj"),
            steps=3,
            fmax=1e-4,
        ),  # fmt: skip
        potential=lj,
        logfile=None,
    )
    assert not res.converged and [r.steps for r in res.structures] == [3, 3]
    out = ase.io.read(tmp_path / "out.traj", ":")
    assert [a.info["converged"] for a in out] == [False, False]
    assert np.array_equal(out[1].positions[:2], fixed.positions[:2])  # constraint kept


def test_glob_and_log_lines(tmp_path, lj, lj_file):
    import io

    paths = write_inputs(tmp_path, rattled_cells())
    log = io.StringIO()
    res = relax_many(
        RelaxConfig(
            structure=str(tmp_path / "single_*.extxyz"),
            model=str(lj_file),
            output=str(tmp_path / "out.extxyz"),
            fmax=0.01,
        ),  # fmt: skip
        potential=lj,
        logfile=log,
    )
    assert [r.source for r in res.structures] == [f"{p}[-1]" for p in paths[1:]]
    lines = log.getvalue().splitlines()
    assert lines[0].split() == ["Step", "relaxing", "done", "max", "fmax"]
    assert lines[1].split()[:3] == ["0", "2", "0"] and lines[-1].split()[1:3] == ["0", "2"]
    assert len(lines) == res.steps + 2


@pytest.mark.parametrize(
    ("kw", "error", "message"),
    [
        ({"output": "out.vasp"}, ConfigError, "holds one structure"),
        ({"trajectory": "t.traj"}, ConfigError, "--trajectory records one relaxation"),
        ({"structure": "none_*.xyz"}, ConfigError, "no structure file matches none_"),
        ({"frame": 0}, ConfigError, "--frame and --all-frames exclude each other"),
        ({"cell": True}, Exception, r"multi.extxyz\[0\]|single_1.extxyz\[0\]: --cell needs"),
        ({"output": "exists.extxyz"}, OutputExistsError, "exists; use --overwrite"),
    ],
)
def test_bad_input_writes_nothing(tmp_path, lj, lj_file, monkeypatch, kw, error, message):
    monkeypatch.chdir(tmp_path)
    write_inputs(tmp_path, rattled_cells())
    (tmp_path / "exists.extxyz").write_text("keep\n")
    base = dict(structure=["multi.extxyz", "single_*.extxyz"], all_frames=True,
                model=str(lj_file), output="out.extxyz")  # fmt: skip
    with pytest.raises(error, match=message):
        relax_many(RelaxConfig(**{**base, **kw}), potential=lj, logfile=None)
    assert not (tmp_path / "out.extxyz").exists() and not (tmp_path / "out.vasp").exists()
    assert (tmp_path / "exists.extxyz").read_text() == "keep\n"


def test_single_relax_refuses_several(tmp_path, lj, lj_file):
    write_inputs(tmp_path, rattled_cells())
    cfg = RelaxConfig(structure=str(tmp_path / "multi.extxyz"), all_frames=True,
                      model=str(lj_file), output=str(tmp_path / "o.xyz"))  # fmt: skip
    with pytest.raises(ConfigError, match="several structures"):
        relax(cfg, potential=lj, logfile=None)


def test_optimiser_methods_the_lockstep_calls():
    """The lockstep drives ASE's optimisers through these (ASE 3.29; pyproject bounds ase)."""
    from ase.optimize import BFGS, FIRE

    for cls in (FIRE, BFGS):
        opt = cls(bulk("Ar", "fcc", a=5.26), logfile=None)
        for name in ("step", "nsteps", "max_steps", "fmax", "gradient_converged"):
            assert hasattr(opt, name), (cls.__name__, name)
        assert hasattr(opt.optimizable, "get_gradient")
        assert hasattr(opt.optimizable, "gradient_norm")


def test_spin_and_direct_force_models_refused(tmp_path):
    import mdband

    fix = Path(__file__).resolve().parents[1] / "fixtures"
    write_inputs(tmp_path, rattled_cells())
    base = dict(structure=str(tmp_path / "single_*.extxyz"), model="unused",
                output=str(tmp_path / "o.extxyz"))  # fmt: skip
    spin = mdband.load_model(fix / "deepmd_spin" / "spin_native.pt", dtype="float64")
    with pytest.raises(ConfigError, match="spin model are not relaxed together"):
        relax_many(RelaxConfig(**base), potential=spin, logfile=None)
    dens = mdband.load_model(fix / "deepmd" / "dens.pt", dtype="float64")
    with pytest.raises(ConfigError, match="--cell needs the stress"):
        relax_many(RelaxConfig(**base, cell=True), potential=dens, logfile=None)
    assert not (tmp_path / "o.extxyz").exists()
