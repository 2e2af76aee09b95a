"""``mdband export`` (H5MD -> any ASE format) and ``mdband plot`` (four thermo panels)."""

import sys

import ase.io
import numpy as np
import pytest
from ase.build import bulk
from click.testing import CliRunner

from mdband.cli import main
from mdband.io.h5md import H5MDReader
from mdband.io.plot import DPI, FIGSIZE, default_panels, figure, plot_thermo, read_series
from mdband.testing.lj import lennard_jones_potential


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """An NPT argon run of 60 steps: trajectory, text log and CSV log (two identical runs)."""
    d = tmp_path_factory.mktemp("npt")
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=1)
    ase.io.write(d / "ar.xyz", atoms)
    lennard_jones_potential().save(d / "lj.mdband")
    common = ["run", "--structure", str(d / "ar.xyz"), "--model", str(d / "lj.mdband")]
    common += ["--ensemble", "npt-mtk", "--temperature", "80", "--pressure", "0.1"]
    common += ["--timestep", "5", "--steps", "60", "--traj-every", "3", "--seed", "1"]
    common += ["--no-progress", "--threads", "1"]
    for extra in (["--trajectory", str(d / "t.h5"), "--log", str(d / "t.log")],
                  ["--log", str(d / "t.csv"), "--final", str(d / "csv.xyz")]):  # fmt: skip
        res = CliRunner().invoke(main, common + extra)
        assert res.exit_code == 0, res.output
    return d


def cli(*args):
    return CliRunner().invoke(main, list(map(str, args)))


def test_export_every_and_round_trip(run_dir, tmp_path):
    out = tmp_path / "t.extxyz"
    res = cli("export", run_dir / "t.h5", out, "--every", 5)
    assert res.exit_code == 0, res.output
    assert "wrote 5 frame(s), steps 0..60" in res.stdout
    images = ase.io.read(out, ":")
    with H5MDReader(run_dir / "t.h5") as r:
        want = r.to_atoms(slice(None, None, 5))
    assert [a.info["step"] for a in images] == [0, 15, 30, 45, 60]
    for got, ref in zip(images, want):
        np.testing.assert_allclose(got.positions, ref.positions, atol=1e-6)
        np.testing.assert_allclose(got.cell.array, ref.cell.array, atol=1e-10)
        np.testing.assert_allclose(got.get_velocities(), ref.get_velocities(), atol=1e-9)
        np.testing.assert_allclose(got.get_forces(), ref.get_forces(), rtol=1e-6, atol=1e-8)
        assert got.get_potential_energy() == pytest.approx(ref.get_potential_energy())
    # one frame, folded into the cell, to a single-structure format
    poscar = tmp_path / "POSCAR"
    res = cli("export", run_dir / "t.h5", poscar, "--frame", -1, "--wrap")
    assert res.exit_code == 0, res.output
    last = ase.io.read(poscar)
    frac = last.get_scaled_positions(wrap=False)
    assert np.all(frac >= -1e-9) and np.all(frac < 1 + 1e-9)
    np.testing.assert_allclose(last.cell.array, want[-1].cell.array, atol=1e-8)


@pytest.mark.parametrize(
    "args, message",
    [
        (("POSCAR",), "holds one structure; pick one with --frame"),
        (("x.weird",), "give --format"),
        (("x.extxyz", "--format", "nope"), "format 'nope' is neither one dpdata writes"),
        (("x.extxyz", "--every", 0), "--every"),
        (("x.extxyz", "--frame", 99), "out of range"),
        (("exists.xyz",), "exists.xyz exists; pass --overwrite"),
    ],
)
def test_export_errors_are_one_line(run_dir, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exists.xyz").write_text("keep")
    res = cli("export", run_dir / "t.h5", *args)
    assert res.exit_code == 2, res.output
    assert message in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists.xyz"]


def test_export_of_a_non_trajectory(tmp_path):
    (tmp_path / "x.h5").write_text("not hdf5")
    res = cli("export", tmp_path / "x.h5", tmp_path / "o.xyz")
    assert res.exit_code == 2 and "cannot read trajectory" in res.stderr


def _quadrant_colour(png) -> list[int]:
    """Saturated (line-coloured) pixels in each quadrant: axes, text and grid are grey."""
    rgb = png[..., :3]
    saturated = (rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.2
    h, w = saturated.shape
    return [int(saturated[r : r + h // 2, c : c + w // 2].sum()) for r in (0, h // 2)
            for c in (0, w // 2)]  # fmt: skip


def _pixels_of(png, quadrant: int, colour: str) -> int:
    from matplotlib.colors import to_rgb

    h, w = png.shape[:2]
    r, c = divmod(quadrant, 2)
    part = png[r * h // 2 : (r + 1) * h // 2, c * w // 2 : (c + 1) * w // 2, :3]
    return int((np.abs(part - np.array(to_rgb(colour))).max(axis=-1) < 0.06).sum())


@pytest.mark.parametrize("source", ["t.h5", "t.csv", "t.log"])
def test_plot_draws_four_panels(run_dir, tmp_path, source):
    mpimg = pytest.importorskip("matplotlib.image", reason="matplotlib not installed (plot)")
    out = tmp_path / "thermo.png"
    res = cli("plot", run_dir / source, "-o", out)
    assert res.exit_code == 0, res.output
    assert "21 samples over 0.3 ps" in res.stdout
    png = mpimg.imread(out)
    assert png.shape[:2] == (int(FIGSIZE[1] * DPI), int(FIGSIZE[0] * DPI))  # 750 x 1000
    energy, temperature, pressure, volume = _quadrant_colour(png)
    assert min(energy, temperature, pressure, volume) > 300, _quadrant_colour(png)
    # each panel holds its own curves: energies C0-C2, then C3, C4, C5 (matplotlib's cycle)
    wanted = [("C0", "C1", "C2"), ("C3",), ("C4",), ("C5",)]
    for k, colours in enumerate(wanted):
        for name in ("C0", "C1", "C2", "C3", "C4", "C5"):
            n = _pixels_of(png, k, name)
            assert (n > 50) == (name in colours), (k, name, n)
    again = cli("plot", run_dir / source, "-o", out)
    assert again.exit_code == 2 and "exists; pass --overwrite" in again.stderr


def test_plot_series_agree_and_missing_pressure_drops_its_panel(run_dir, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (plot)")
    h5, csv, log = (read_series(run_dir / f"t.{ext}") for ext in ("h5", "csv", "log"))
    np.testing.assert_allclose(csv["temperature"], h5["temperature"], rtol=1e-12)
    np.testing.assert_allclose(log["volume"], h5["volume"], rtol=1e-5)  # table: 3 decimals
    assert np.isnan(log["conserved_energy"]).all() and np.isfinite(h5["conserved_energy"]).all()
    h5["pressure"][:] = np.nan  # what a non-periodic run records
    import matplotlib.image as mpimg

    plot_thermo(h5, tmp_path / "p.png")
    png = mpimg.imread(tmp_path / "p.png")
    counts = _quadrant_colour(png)
    assert counts[3] == 0 and min(counts[:3]) > 300, counts  # energy, T, volume; no P panel
    assert _pixels_of(png, 2, "C5") > 50 and _pixels_of(png, 2, "C4") == 0


def test_plot_errors(run_dir, tmp_path, monkeypatch):
    res = cli("plot", run_dir / "ar.xyz", "-o", tmp_path / "x.png")
    assert res.exit_code == 2 and "no H5MD trajectory, CSV log or mdband text log" in res.stderr
    res = cli("plot", tmp_path / "missing.h5")
    assert res.exit_code == 2 and "does not exist" in res.stderr
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    res = cli("plot", run_dir / "t.h5", "-o", tmp_path / "x.png")
    assert res.exit_code == 2, res.output
    assert "mdband plot needs matplotlib: pip install 'mdband[plot]'" in res.stderr
    assert res.stderr.count("\n") == 1 and not (tmp_path / "x.png").exists()


@pytest.fixture(scope="module")
def nvt_dir(tmp_path_factory):
    """An NVT argon run: trajectory and a CSV log with every extra column, pressures in bar,
    a thermo line every step and a frame every 5."""
    d = tmp_path_factory.mktemp("nvt")
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=2)
    ase.io.write(d / "ar.xyz", atoms)
    lennard_jones_potential().save(d / "lj.mdband")
    res = cli("run", "--structure", d / "ar.xyz", "--model", d / "lj.mdband", "--ensemble",
              "nvt-bussi", "--temperature", 60, "--timestep", 5, "--steps", 20, "--traj-every",
              5, "--thermo-every", 1, "--thermo-columns", "pressure_tensor,cell,density",
              "--pressure-unit", "bar", "--seed", 3, "--no-progress", "--threads", 1,
              "--trajectory", d / "t.h5", "--log", d / "t.csv")  # fmt: skip
    assert res.exit_code == 0, res.output
    return d


def test_nvt_plot_leaves_out_the_flat_volume_and_draws_the_target(nvt_dir, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (plot)")
    from mdband.io.plot import run_targets

    h5, csv = read_series(nvt_dir / "t.h5"), read_series(nvt_dir / "t.csv")
    assert len(h5["time_ps"]) == 5 and len(csv["time_ps"]) == 21  # frames every 5, rows every 1
    assert default_panels(h5) == ["energy", "temperature", "pressure"]
    np.testing.assert_allclose(csv["pressure"][::5], h5["pressure"], rtol=1e-6)  # bar -> GPa
    np.testing.assert_allclose(csv["pxx"][::5], h5["pxx"], rtol=1e-6)
    np.testing.assert_allclose(csv["density"][::5], h5["density"], rtol=1e-12)
    np.testing.assert_allclose(csv["cell_a"], 10.52, rtol=1e-12)
    assert run_targets(nvt_dir / "t.h5") == {"temperature": 60.0}
    fig = figure(h5, targets=run_targets(nvt_dir / "t.h5"), equilibration_ps=0.05)
    temperature = fig.axes[1]
    assert temperature.get_ylabel() == "temperature [K]"
    dotted = [ln for ln in temperature.lines if ln.get_linestyle() == ":"]
    assert len(dotted) == 1 and dotted[0].get_ydata()[0] == 60.0
    mean = [ln for ln in temperature.lines if ln.get_linestyle() == "--"][0].get_ydata()[0]
    assert mean == pytest.approx(h5["temperature"][h5["time_ps"] >= 0.05].mean())
    assert len([a for a in fig.axes if a.get_visible()]) == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--panels", "density,cell,pressure_tensor,volume"], "wrote"),
        (["--equilibration", "0.05", "--target-temperature", "70"], "(after 0.05 ps: 11 samples)"),
        (["--panels", "nope"], "--panels: unknown panel 'nope'"),
        (["--equilibration", "1"], "leaves no sample to average"),
    ],
)
def test_plot_panels_targets_and_cut(nvt_dir, tmp_path, args, message):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (plot)")
    res = cli("plot", nvt_dir / "t.csv", "-o", tmp_path / "x.png", *args)
    assert message in res.output + res.stderr, res.output
    assert (res.exit_code == 0) == (tmp_path / "x.png").exists()
