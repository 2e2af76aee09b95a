"""``run``, ``relax`` and ``fit`` read every format through ``read_systems``, with one
``--type-map`` meaning (fixtures: ``tests/fixtures/formats``, written by dpdata)."""

from pathlib import Path

import ase.io
import numpy as np
import pytest
from click.testing import CliRunner

import mdband
from mdband.cli import main
from mdband.fit import FitConfig
from mdband.fit.config import FitConfigError
from mdband.io.h5md_reader import H5MDReader
from mdband.testing.lj import lennard_jones_potential

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
TYPES = np.loadtxt(FIX / "water.npy" / "type.raw", dtype=int)
SPECIES = [("O", "H")[t] for t in TYPES]
COORD = np.load(FIX / "water.npy" / "set.000" / "coord.npy").reshape(-1, 192, 3)


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lennard_jones_potential(type_map=("O", "H"), sigma=2.0, cutoff=4.0, r_on=3.5).save("oh.mdband")
    return tmp_path


def run(*args):
    common = ["run", "--model", "oh.mdband", "--steps", 1, "--timestep", 0.1, "--seed", 1]
    return cli(*common, "--no-progress", "--threads", 1, "--traj-precision", "float64", *args)


@pytest.mark.parametrize(
    "name, extra, frame, note",
    [
        ("water.mixed", [], 1, None),  # the real types, not 192 O atoms
        ("water.hdf5", [], 0, None),
        ("water.dump", ["--type-map", "O,H"], 1, "types 0=O, 1=H (counting from 0; from the type"),
        ("water.dump", [], 0, "from the model type map"),
    ],
)  # fmt: skip
def test_run_starts_from_every_format(work, name, extra, frame, note):
    res = run("--structure", FIX / name, "--frame", frame, "--trajectory", "t.h5", *extra)
    assert res.exit_code == 0, res.output
    if note:
        assert note in res.stdout
    with H5MDReader("t.h5") as r:
        assert [{8: "O", 1: "H"}[int(z)] for z in r.species] == SPECIES
        d = r.frame(0).positions - COORD[frame]
        cell = r.cell(0)
        frac = np.linalg.solve(cell.T, d.T).T  # a dump holds folded positions
        np.testing.assert_allclose(frac, np.round(frac), atol=1e-8)


def test_relax_takes_format_and_type_map(work):
    res = cli(
        "relax", "--structure", FIX / "water.dump", "--format", "lammps/dump", "--type-map",
        "O,H", "--frame", 0, "--model", "oh.mdband", "--output", "out.extxyz", "--steps", 1,
    )  # fmt: skip
    assert res.exit_code in (0, 1), res.output  # 1: not converged in one step
    assert "types 0=O, 1=H" in res.stdout
    assert ase.io.read("out.extxyz").get_chemical_symbols() == SPECIES
    bad = cli(
        "relax", "--structure", "s.dump", "--format", "nope", "--model", "x", "--output", "y.xyz"
    )
    assert bad.exit_code == 2 and "format 'nope' is not one of" in bad.stderr


def test_fit_reads_formats_and_writes_by_name(tmp_path):
    cfg = FitConfig.from_mapping({"data": [str(FIX / "hco.mixed")], "output": "m.pt"})
    assert cfg.data_format is None
    with pytest.raises(FitConfigError, match="mdband model files end in .mdband"):
        FitConfig.from_mapping({"data": ["x"], "output": "m.pt", "format": "mdband"})
    with pytest.raises(FitConfigError, match="cannot tell the model format"):
        FitConfig.from_mapping({"data": ["x"], "output": "m.model"})
    with pytest.raises(FitConfigError, match="data_format"):
        FitConfig.from_mapping({"data": ["x"], "output": "m.mdband", "data_format": "nope"})
    out = tmp_path / "m.mdband"
    tiny = {"channels": 4, "lmax": 1, "n_blocks": 1, "rcut": 3.0, "n_radial": 4}
    result = mdband.fit(
        str(FIX / "hco.mixed"), str(out), data_format="deepmd/npy/mixed", epochs=1,
        batch_size=2, val_fraction=0.0, model=tiny, device="cpu", type_map=["H", "C", "O"],
    )  # fmt: skip
    assert result.n_train == 2 and out.is_file()
    assert mdband.load_model(out, device="cpu").type_map == ["H", "C", "O"]


def test_model_devi_reads_a_deepmd_system_directory(work):
    lennard_jones_potential(type_map=("O", "H"), sigma=2.1, cutoff=4.0, r_on=3.5).save("b.mdband")
    args = ["model-devi", "oh.mdband", "b.mdband", "-s", FIX / "water.npy", "-f", 10]
    res = cli(*args, "--dtype", "float64")
    assert res.exit_code == 0, res.output
    rows = np.loadtxt("model_devi.out", ndmin=2)
    np.testing.assert_array_equal(rows[:, 0], [0, 10])  # no steps in the file: k * every
    assert np.all(rows[:, 4] > 0)
