"""Reading mdband H5MD elsewhere: image flags, units system, slices, ASE plugin, MDAnalysis."""

import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import ase.io
import h5py
import numpy as np
import pytest
from ase import units
from ase.build import bulk

from mdband.io import ase_h5md
from mdband.io.h5md import Frame, H5MDReader, H5MDWriter, TrajectoryHeader, rewrite_trajectory
from mdband.io.h5md_format import FORCE_UNITS, wrap_positions

REPO = Path(__file__).resolve().parents[2]
N = 6


def frames_and_file(path, pbc=(True, True, True), precision="float64", n=4,
                    force_unit="kJ mol-1 Angstrom-1"):  # fmt: skip
    """``n`` frames of 6 atoms that wander several cells away (tilted, growing cell)."""
    rng = np.random.default_rng(3)
    header = TrajectoryHeader(
        species=np.array([29, 29, 28, 28, 8, 1]),
        masses=np.array([63.546, 63.546, 58.693, 58.693, 15.999, 2.014]),
        pbc=np.array(pbc),
        variable_cell=True,
        precision=precision,
        force_unit=force_unit,
        author="tester",
    )
    frames = []
    for k in range(n):
        cell = np.array([[8.0, 0, 0], [1.5, 9.0, 0], [-1.0, 0.5, 10.0]]) * (1 + 0.02 * k)
        obs = {
            "potential_energy": -3.5 + 0.1 * k,
            "kinetic_energy": 0.2,
            "temperature": 300.0 + k,
            "pressure": 0.1 * k,
            "volume": abs(np.linalg.det(cell)),
            "stress": np.eye(3) * k,
        }
        frames.append(
            Frame(
                step=10 * k,
                time=0.01 * k,
                positions=rng.uniform(-25, 25, size=(N, 3)),
                velocities=rng.normal(size=(N, 3)),
                forces=rng.normal(size=(N, 3)),
                cell=cell,
                observables=obs,
            )
        )
    with H5MDWriter.create(path, header) as w:
        for fr in frames:
            w.append(fr)
    return frames


@pytest.mark.parametrize("pbc", [(True, True, True), (True, False, True), (False, False, False)])
def test_positions_folded_with_image_flags(tmp_path, pbc):
    path = tmp_path / "t.h5"
    frames = frames_and_file(path, pbc)
    with h5py.File(path, "r") as f:
        assert f["h5md/modules/units"].attrs["system"] == "SI"
        part = f["particles/all"]
        image = part["image"]
        for key in ("step", "time"):
            assert isinstance(image.get(key, getlink=True), h5py.HardLink)
            assert image[key] == part[f"position/{key}"]
        assert image["value"].dtype == np.int32 and image["value"].shape == (len(frames), N, 3)
        for k, fr in enumerate(frames):
            pos, img = part["position/value"][k], image["value"][k]
            frac = np.linalg.solve(fr.cell.T, pos.T).T
            periodic = np.array(pbc)
            # folded into [0, 1) along periodic axes, untouched along the others
            assert np.all(frac[:, periodic] >= -1e-12) and np.all(frac[:, periodic] < 1 + 1e-12)
            assert np.all(img[:, ~periodic] == 0)
            np.testing.assert_allclose(pos + img @ fr.cell, fr.positions, rtol=0, atol=1e-12)
    if all(pbc):
        assert np.any(image_values(path))  # the atoms did cross cells


def image_values(path):
    with h5py.File(path, "r") as f:
        return f["particles/all/image/value"][()]


def test_wrap_positions_matches_ase():
    atoms = bulk("Cu", "fcc", a=3.6).repeat((2, 3, 1))
    atoms.positions += np.random.default_rng(0).uniform(-20, 20, size=atoms.positions.shape)
    wrapped, image = wrap_positions(atoms.positions, atoms.cell.array, atoms.pbc)
    ref = atoms.copy()
    ref.wrap(eps=0)
    np.testing.assert_allclose(wrapped, ref.positions, atol=1e-12)
    np.testing.assert_allclose(wrapped + image @ atoms.cell.array, atoms.positions, atol=1e-12)


def test_reader_slices(tmp_path):
    path = tmp_path / "t.h5"
    frames = frames_and_file(path)
    with H5MDReader(path) as r:
        every = r.to_atoms(slice(None))
        assert isinstance(every, list) and len(every) == 4
        assert [a.info["step"] for a in r.to_atoms(slice(1, None, 2))] == [10, 30]
        assert [a.info["step"] for a in r.to_atoms([0, -1])] == [0, 30]
        assert [fr.step for fr in r.frame(slice(-2, None))] == [20, 30]
        assert r.to_atoms(np.int64(2)).info["step"] == 20
        assert r.to_atoms(slice(10, 20)) == []
        with pytest.raises(IndexError):
            r.to_atoms([0, 4])
        last = r.to_atoms()
        np.testing.assert_allclose(last.positions, frames[-1].positions, atol=1e-12)
        assert last.info["temperature"] == 303.0 and last.info["time"] == pytest.approx(0.03)


def assert_same_frame(atoms, fr, pbc, atol=1e-12):
    np.testing.assert_allclose(atoms.positions, fr.positions, rtol=0, atol=atol)
    np.testing.assert_array_equal(atoms.cell.array, fr.cell)
    np.testing.assert_array_equal(atoms.pbc, pbc)
    np.testing.assert_allclose(atoms.get_velocities() * 1000 * units.fs, fr.velocities, rtol=1e-14)
    np.testing.assert_allclose(atoms.get_forces(), fr.forces, rtol=1e-12, atol=1e-14)
    assert atoms.get_potential_energy() == fr.observables["potential_energy"]
    assert atoms.get_chemical_symbols() == ["Cu", "Cu", "Ni", "Ni", "O", "H"]
    np.testing.assert_allclose(atoms.get_masses()[-1], 2.014)


@pytest.mark.parametrize("name", ["t.h5", "t.h5md", "t.hdf5"])
def test_ase_io_read_returns_the_written_frames(tmp_path, name):
    ase_h5md.register()
    assert not ase_h5md.register()  # once is enough
    path = tmp_path / name
    frames = frames_and_file(path, pbc=(True, True, False))
    images = ase.io.read(path, ":")
    assert len(images) == len(frames)
    for atoms, fr in zip(images, frames):
        assert_same_frame(atoms, fr, [True, True, False])
    assert_same_frame(ase.io.read(path), frames[-1], [True, True, False])  # default: last
    assert [a.info["step"] for a in ase.io.read(path, "::2")] == [0, 20]
    assert ase.io.read(path, 1).info["step"] == 10
    assert [a.info["step"] for a in ase.io.iread(path, "1:3")] == [10, 20]


def test_ase_reads_a_killed_writers_file(tmp_path):
    """A file still flagged open for write (SWMR) reads as well; so does its clean rewrite."""
    ase_h5md.register()
    path = tmp_path / "t.h5"
    frames_and_file(path)
    with h5py.File(path, "r+", libver=("v110", "v110")) as f:
        f.swmr_mode = True
        assert len(ase.io.read(path, ":")) == 4
    rewrite_trajectory(path, through_step=10)
    assert [a.info["step"] for a in ase.io.read(path, ":")] == [0, 10]


def _entry_point_line() -> tuple[str, str]:
    text = (REPO / "pyproject.toml").read_text()
    block = text.split('[project.entry-points."ase.ioformats"]', 1)[1]
    name, value = re.match(r"\s*([\w-]+)\s*=\s*\"([^\"]+)\"", block).groups()
    return name, value


def test_ase_finds_the_plugin_through_its_entry_point(tmp_path):
    """What an installed mdband gives ASE, without installing anything: a distribution's
    metadata folder declaring the entry point of pyproject.toml, on the path of a fresh
    interpreter."""
    name, value = _entry_point_line()
    assert name == ase_h5md.FORMAT_NAME
    dist = tmp_path / "site" / "mdband_entry_point_probe-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mdband-entry-point-probe\nVersion: 0.0\n"
    )
    (dist / "entry_points.txt").write_text(f"[ase.ioformats]\n{name} = {value}\n")
    traj = tmp_path / "t.h5"
    frames = frames_and_file(traj)
    script = textwrap.dedent(
        f"""
        import sys, warnings
        warnings.simplefilter("ignore")  # an installed mdband may declare it a second time
        import ase.io
        from ase.io.formats import ioformats
        assert "torch" not in sys.modules, "import ase.io imported torch"
        fmt = ioformats["{name}"]
        print(fmt.module_name, fmt.extensions)
        images = ase.io.read({str(traj)!r}, ":")
        print(len(images), images[-1].info["step"], images[-1].get_potential_energy())
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(REPO)]))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert out[0] == "mdband.io.ase_h5md ['h5', 'h5md']"
    assert out[1].split() == ["4", "30", repr(frames[-1].observables["potential_energy"])]


def test_run_trajectory_read_back_by_ase(tmp_path):
    """A real run: the last frame ase.io.read gives is the run's final state."""
    from mdband.md import RunConfig, run
    from mdband.testing.lj import lennard_jones_potential

    ase_h5md.register()
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=1)
    ase.io.write(tmp_path / "ar.xyz", atoms)
    cfg = RunConfig(
        structure=str(tmp_path / "ar.xyz"),
        model="lj",
        ensemble="nvt-langevin",
        temperature=300,
        timestep=5.0,
        steps=30,
        traj_every=10,
        seed=4,
        trajectory=str(tmp_path / "t.h5"),
        traj_precision="float64",
        dtype="float64",
        progress=False,
    )
    import io

    from rich.console import Console

    res = run(cfg, potential=lennard_jones_potential(), console=Console(file=io.StringIO()))
    images = ase.io.read(tmp_path / "t.h5", ":")
    assert [a.info["step"] for a in images] == [0, 10, 20, 30]
    last, final = images[-1], res.atoms
    np.testing.assert_allclose(last.positions, final.positions, rtol=0, atol=1e-12)
    np.testing.assert_allclose(last.get_velocities(), final.get_velocities(), rtol=1e-13)
    np.testing.assert_allclose(last.get_forces(), final.get_forces(), rtol=1e-12, atol=1e-14)
    assert last.get_potential_energy() == pytest.approx(final.get_potential_energy(), rel=1e-14)
    np.testing.assert_array_equal(last.cell.array, final.cell.array)
    # the stress of the potential (the file records it with the kinetic part)
    want = final.get_stress()
    assert np.abs(want).max() > 1e-4
    np.testing.assert_allclose(last.get_stress(), want, rtol=0, atol=1e-12)
    total = final.get_stress(include_ideal_gas=True)
    np.testing.assert_allclose(last.get_stress(include_ideal_gas=True), total, atol=1e-12)
    assert all(a.calc.results["stress"].shape == (6,) for a in images)
    assert [s[0] for s in res.samples] == [0, 10, 20, 30]
    # the default final structure beside the trajectory holds the same state
    end = ase.io.read(tmp_path / "t.final.xyz")
    np.testing.assert_allclose(end.positions, final.positions, atol=1e-7)
    np.testing.assert_allclose(end.get_velocities(), final.get_velocities(), rtol=1e-6)


@pytest.mark.parametrize("force_unit", list(FORCE_UNITS))
def test_mdanalysis_opens_the_trajectory(tmp_path, force_unit):
    """Every force unit a run may write: MDAnalysis gives its own kJ/(mol Å); eV Å⁻¹, which
    its H5MD reader does not know, through mdband.io.mdanalysis."""
    mda = pytest.importorskip("MDAnalysis", reason="MDAnalysis not installed (dev extra)")
    from mdband.io.mdanalysis import reader_class, universe

    path = tmp_path / "run.h5"
    frames = frames_and_file(path, precision="float32", force_unit=force_unit)
    top = tmp_path / "run.final.xyz"
    ase_h5md.register()
    ase.io.write(top, ase.io.read(path))  # what a run leaves as run.final.xyz
    fmt = reader_class() if force_unit == "eV Angstrom-1" else "H5MD"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "dt set to 1.0 ps"
        u = universe(path)
        plain = mda.Universe(str(top), str(path), format=fmt, dt=0.01)
        for uni in (u, plain):
            assert uni.trajectory.n_frames == 4 and uni.trajectory.dt == pytest.approx(0.01)
            assert list(uni.atoms.elements) == ["Cu", "Cu", "Ni", "Ni", "O", "H"]
            for ts, fr in zip(uni.trajectory, frames):
                assert ts.time == pytest.approx(fr.time)
                wrapped, _ = wrap_positions(fr.positions, fr.cell, [True] * 3)
                np.testing.assert_allclose(ts.positions, wrapped, atol=2e-5)
                np.testing.assert_allclose(ts.velocities, fr.velocities, rtol=1e-6)
                kj = fr.forces * units.mol / units.kJ  # MDAnalysis' kJ/(mol Å)
                np.testing.assert_allclose(ts.forces, kj, rtol=1e-5, atol=1e-5)
                assert ts.data["temperature"] == fr.observables["temperature"]
        np.testing.assert_allclose(u.atoms.masses, [63.546] * 2 + [58.693] * 2 + [15.999, 2.014])
