"""``mdband run --engine lammps``: LAMMPS integrates, ``pair_style mdband`` gives the forces.

Checked here: 1 and 2 MPI ranks give the same trajectory (mp2, the message-passing test model,
so the per-layer ghost exchange is crossed every step); a run resumed from a checkpoint
continues as the uninterrupted run (bit for bit on one rank for NVE and NVT-NHC); the H5MD
file has the ASE engine's layout; the two engines agree for NVE; bad input is one line, exit 2.
"""

from __future__ import annotations

import json
import os
import subprocess

import ase.build
import ase.io
import h5py
import numpy as np
import pytest
from ase import Atoms
from click.testing import CliRunner
from lammps_harness import BIN, MPIRUN, make_frame, requires_lammps

from mdband.cli import main
from mdband.io.checkpoint import read_checkpoint
from mdband.io.h5md import H5MDReader

MDBAND = BIN / "mdband"
FIELDS = ("positions", "velocities", "forces", "cell")
SETTINGS = """
dtype = "float64"
traj_precision = "float64"
traj_force_unit = "eV Angstrom-1"
timestep = 2.0
temperature = 120.0
seed = 5
traj_every = 5
checkpoint_every = 10
tdamp = 40.0
min_distance = 0.1
progress = false
"""


def mdband_run(cwd, *args, nprocs=1, check=True, timeout=300):
    cmd = [str(MDBAND), "run", "--config", "run.toml", *map(str, args)]
    if nprocs > 1:
        cmd = [str(MPIRUN), "-np", str(nprocs), *cmd]
    env = {**os.environ, "MDBAND_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"rc={proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def frames(path):
    with H5MDReader(path) as r:
        return list(r.steps), list(r)


def max_diff(path_a, path_b, steps):
    """Largest |a − b| of each per-atom field over all frames (both must hold ``steps``)."""
    steps_a, fa = frames(path_a)
    steps_b, fb = frames(path_b)
    assert steps_a == steps == steps_b
    out = {}
    for name in FIELDS:
        out[name] = max(np.max(np.abs(getattr(x, name) - getattr(y, name))) for x, y in zip(fa, fb))
    out["potential_energy"] = max(
        abs(x.observables["potential_energy"] - y.observables["potential_energy"])
        for x, y in zip(fa, fb)
    )
    return out


def assert_bitwise(path_a, path_b, steps):
    steps_a, fa = frames(path_a)
    steps_b, fb = frames(path_b)
    assert steps_a == steps == steps_b
    for x, y in zip(fa, fb):
        for name in FIELDS:
            assert getattr(x, name).tobytes() == getattr(y, name).tobytes(), (x.step, name)
        for name in ("potential_energy", "conserved_energy", "pressure"):
            assert x.observables[name] == y.observables[name], (x.step, name)


@pytest.fixture(scope="module")
def work(tmp_path_factory, models):
    """A folder with run.toml, mp2 / LJ models and two structures (150 Ar/Kr atoms; 108 Ar)."""
    d = tmp_path_factory.mktemp("engine")
    (d / "run.toml").write_text(SETTINGS)
    frame = make_frame(grid=(5, 5, 6), spacing=3.75, jitter=0.12, seed=4)
    ase.io.write(
        d / "mix.xyz", Atoms(frame.species, positions=frame.positions, cell=frame.cell, pbc=True)
    )
    # argon fcc in a tilted (non-LAMMPS) orientation with one atom outside the cell
    ar = ase.build.bulk("Ar", "fcc", a=5.26, cubic=True).repeat((3, 3, 3))
    ar.rattle(0.05, seed=2)
    ar.positions[0] += ar.cell[1] - ar.cell[2]
    ar.rotate(20, "z", rotate_cell=True)
    ase.io.write(d / "ar.xyz", ar)
    for name, path in models.items():
        (d / f"{name}.mdband").write_bytes(path.read_bytes())
    return d


def nve(*extra):
    return ("--structure", "mix.xyz", "--model", "mp2.mdband", "--engine", "lammps", *extra)


@pytest.fixture(scope="module")
def nve_np1(work):
    out = mdband_run(
        work, *nve("--steps", 20, "--trajectory", "nve1.h5", "--checkpoint", "nve1.ck")
    )
    return work / "nve1.h5", out


STEPS = [0, 5, 10, 15, 20]


@requires_lammps
def test_two_ranks_match_one_rank(work, nve_np1):
    ref, out1 = nve_np1
    assert "Engine: LAMMPS" in out1.stdout and "1 MPI rank" in out1.stdout
    out = mdband_run(
        work,
        *nve("--steps", 20, "--trajectory", "nve2.h5", "--checkpoint", "nve2.ck"),
        nprocs=2,
    )
    # one table, one summary: only rank 0 prints
    assert out.stdout.count("Finished at step 20") == 1, out.stdout
    assert "2 MPI ranks" in out.stdout
    assert "error" not in out.stderr and "Traceback" not in out.stderr
    d = max_diff(ref, work / "nve2.h5", STEPS)
    for name in FIELDS:
        assert d[name] <= 1e-10, (name, d)
    assert d["potential_energy"] <= 1e-9, d
    with H5MDReader(work / "nve2.h5") as r:
        assert r.parameters["mpi_ranks"] == 2 and r.parameters["engine"] == "lammps"
        # atoms really moved (a frozen run would also "agree")
        assert np.max(np.abs(r.frame(-1).positions - r.frame(0).positions)) > 1e-3


@requires_lammps
def test_resume_continues_bit_for_bit_on_one_rank(work, nve_np1):
    ref, _ = nve_np1
    mdband_run(work, *nve("--steps", 10, "--trajectory", "r1.h5", "--checkpoint", "r1.ck"))
    ck = read_checkpoint(work / "r1.ck")
    assert ck.step == 10 and "lammps.restart" in ck.integrator
    out = mdband_run(work, "--resume", "--checkpoint", "r1.ck", "--steps", 20)
    assert "Resuming from r1.ck at step 10" in out.stdout
    assert_bitwise(ref, work / "r1.h5", STEPS)
    a, b = read_checkpoint(work / "nve1.ck"), read_checkpoint(work / "r1.ck")
    assert a.step == b.step == 20
    assert a.positions.tobytes() == b.positions.tobytes()
    assert a.momenta.tobytes() == b.momenta.tobytes()


@requires_lammps
def test_resume_on_two_ranks(work, nve_np1):
    ref, _ = nve_np1
    mdband_run(
        work, *nve("--steps", 10, "--trajectory", "r2.h5", "--checkpoint", "r2.ck"), nprocs=2
    )
    saved = (work / "r2.ck").read_bytes()
    mdband_run(work, "--resume", "--checkpoint", "r2.ck", "--steps", 15, nprocs=2)
    with H5MDReader(work / "r2.h5") as r:
        assert list(r.steps) == [0, 5, 10, 15]
    # back to the checkpoint of step 10 (as after a crash): the frame of step 15 is dropped
    (work / "r2.ck").write_bytes(saved)
    out = mdband_run(work, "--resume", "--checkpoint", "r2.ck", "--steps", 20, nprocs=2)
    assert "Resuming from r2.ck at step 10" in out.stdout
    d = max_diff(ref, work / "r2.h5", STEPS)
    for name in FIELDS:
        assert d[name] <= 1e-10, (name, d)


@requires_lammps
@pytest.mark.parametrize("ensemble", ["nvt-nhc", "nvt-bussi"])
def test_thermostat_resume_is_exact(work, ensemble):
    """fix nvt's chains and fix temp/csvr's random state travel in LAMMPS' restart file."""
    args = ("--structure", "mix.xyz", "--model", "mp2.mdband", "--engine", "lammps")
    args += ("--ensemble", ensemble)
    a, b = f"{ensemble}-a", f"{ensemble}-b"
    mdband_run(work, *args, "--steps", 20, "--trajectory", f"{a}.h5", "--checkpoint", f"{a}.ck")
    mdband_run(work, *args, "--steps", 10, "--trajectory", f"{b}.h5", "--checkpoint", f"{b}.ck")
    mdband_run(work, "--resume", "--checkpoint", f"{b}.ck", "--steps", 20)
    assert_bitwise(work / f"{a}.h5", work / f"{b}.h5", STEPS)
    with H5MDReader(work / f"{a}.h5") as r:
        cons = r.observable("conserved_energy")
        temps = r.observable("temperature")
    # thermostat (bath) energy included: conserved to the integration error
    assert np.all(np.isfinite(cons)) and np.ptp(cons) < 1e-4, cons
    assert np.ptp(temps) > 1.0  # the thermostat acts


@pytest.fixture(scope="module")
def lj_runs(work):
    args = ("--structure", "ar.xyz", "--model", "lj.mdband", "--steps", 20, "--timestep", 5)
    out = {}
    for engine in ("ase", "lammps"):
        mdband_run(
            work, *args, "--engine", engine, "--trajectory", f"lj-{engine}.h5",
            "--checkpoint", f"lj-{engine}.ck",
        )  # fmt: skip
        out[engine] = work / f"lj-{engine}.h5"
    return out


@requires_lammps
def test_engines_agree_for_nve(lj_runs):
    d0 = max_diff(lj_runs["ase"], lj_runs["lammps"], STEPS)
    # the same start (velocities from the same seeded draw), then both velocity Verlet; they
    # differ by LAMMPS' metal constants (ftm2v, 6e-8 relative) and force summation order
    _, fa = frames(lj_runs["ase"])
    _, fl = frames(lj_runs["lammps"])
    for name in FIELDS:
        assert np.max(np.abs(getattr(fa[0], name) - getattr(fl[0], name))) <= 1e-12, name
    assert d0["positions"] <= 1e-7, d0
    assert d0["velocities"] <= 1e-5, d0
    assert d0["forces"] <= 1e-7, d0
    assert d0["potential_energy"] <= 1e-7, d0
    # the run is not trivial: atoms moved by much more than the difference
    assert np.max(np.abs(fa[-1].positions - fa[0].positions)) > 1e-2
    ea = [f.observables["conserved_energy"] for f in fa]
    el = [f.observables["conserved_energy"] for f in fl]
    np.testing.assert_allclose(ea, el, rtol=0, atol=1e-6)


def _layout(path):
    """Every object of the file: name -> (kind, dtype, shape without the frame axis, unit)."""
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            shape = obj.shape[1:] if obj.maxshape and obj.maxshape[0] is None else obj.shape
            out[name] = ("dataset", obj.dtype.str, shape, obj.attrs.get("unit"))
        else:
            out[name] = ("group", None, None, None)

    with h5py.File(path, "r") as f:
        f.visititems(visit)
        attrs = {name: set(f[name].attrs) for name in ("h5md", "particles/all/box")}
        params = dict(f["parameters/mdband"].attrs)
    return out, attrs, params


@requires_lammps
def test_trajectory_has_the_ase_engine_layout(lj_runs):
    la, attrs_a, pa = _layout(lj_runs["ase"])
    ll, attrs_l, pl = _layout(lj_runs["lammps"])
    assert la == ll
    assert attrs_a == attrs_l
    assert set(pa) <= set(pl) and pl["engine"] == "lammps"
    assert json.loads(pl["config_json"])["engine"] == "lammps"
    with H5MDReader(lj_runs["lammps"]) as r:
        assert not r.recovered and r.n_atoms == 108 and not r.variable_cell
        assert r.force_unit == "eV Angstrom-1" and list(r.pbc) == [True] * 3
        atoms = r.to_atoms(-1)
        assert atoms.get_chemical_symbols() == ["Ar"] * 108
        assert np.isfinite(atoms.get_potential_energy())
        with h5py.File(lj_runs["lammps"], "r") as f:
            pos = f["particles/all/position"]
            for el in ("particles/all/velocity", "particles/all/force", "observables/pressure"):
                assert f[el]["step"] == pos["step"]  # hard links, as the ASE engine writes


@requires_lammps
def test_bad_input_under_mpirun_is_one_line(work):
    Atoms("Ar2", positions=[[0, 0, 0], [3.8, 0, 0]]).write(work / "gas.xyz")
    proc = mdband_run(
        work, "--structure", "gas.xyz", "--model", "lj.mdband", "--engine", "lammps",
        "--trajectory", "gas.h5", nprocs=2, check=False,
    )  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(errors) == 1 and errors[0].startswith("mdband: error:"), errors
    assert "periodic in all three directions" in errors[0]
    assert not (work / "gas.h5").exists()


# ---------------------------------------------------------------------------- no LAMMPS needed
def invoke(*args):
    return CliRunner().invoke(main, ["run", *map(str, args)])


@pytest.fixture
def cli_dir(tmp_path, monkeypatch):
    from mdband.testing.lj import lennard_jones_potential

    monkeypatch.chdir(tmp_path)
    ar = ase.build.bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    ase.io.write(tmp_path / "ar.xyz", ar)
    lennard_jones_potential().save(tmp_path / "lj.mdband")
    return tmp_path


def test_engine_without_plugin_is_one_line_exit_2(cli_dir, monkeypatch):
    import mdband.lammps

    monkeypatch.setattr(mdband.lammps, "plugin_installed", lambda: False)
    res = invoke(
        "--structure", "ar.xyz", "--model", "lj.mdband", "--engine", "lammps", "--steps", 5,
        "--trajectory", "t.h5",
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "mdband LAMMPS plugin, which is not installed" in lines[0]
    assert "make lammps" in lines[0]
    assert not (cli_dir / "t.h5").exists()


def test_engine_choice_and_resume_mismatch(cli_dir, monkeypatch):
    res = invoke("--structure", "ar.xyz", "--model", "lj.mdband", "--engine", "gromacs")
    assert res.exit_code == 2 and "gromacs" in res.stderr and len(res.stderr.splitlines()) == 1
    common = ("--structure", "ar.xyz", "--model", "lj.mdband", "--no-progress", "--seed", 1)
    res = invoke(*common, "--steps", 4, "--checkpoint", "a.ck")
    assert res.exit_code == 0, res.output
    res = invoke("--resume", "--checkpoint", "a.ck", "--steps", 8, "--engine", "lammps")
    assert res.exit_code == 2
    assert "engine 'ase' -> 'lammps'" in res.stderr and len(res.stderr.splitlines()) == 1
    # the ASE engine refuses to run once per MPI rank
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "2")
    res = invoke(*common, "--steps", 4, "--trajectory", "b.h5")
    assert res.exit_code == 2 and "under mpirun use --engine lammps" in res.stderr
    assert not (cli_dir / "b.h5").exists()
