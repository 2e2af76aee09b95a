"""``test``, ``model-devi``, ``fit``, ``run`` and ``relax`` take VASP ``OUTCAR`` and
``vasprun.xml`` files (written by ``tests/fixtures/vasp_files.py`` from the deepmd/npy fixtures)
and find in them what they find in the npy original."""

import json
from pathlib import Path

import ase.io
import numpy as np
import pytest
from click.testing import CliRunner

from mdband.cli import main
from mdband.fit import FitConfig, read_dataset
from mdband.io.h5md_reader import H5MDReader
from mdband.testing.lj import lennard_jones_potential
from tests.fixtures.vasp_files import (
    deepmd_npy_frames,
    in_vasp_order,
    write_outcar,
    write_vasprun,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
HCO = ["hco.npy/H5C5O4", "hco.npy/H6C5O5"]


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def frames_of(system: str) -> list[dict]:
    return [in_vasp_order(f) for f in deepmd_npy_frames(FIX / system)]


@pytest.fixture
def work(tmp_path, monkeypatch):
    """In ``tmp_path``: an LJ model of H, C and O (``m.mdband``), the water frames as
    ``OUTCAR`` and ``vasprun.xml``, and each hco frame as ``OUTCAR.<formula>`` and
    ``vasprun.<formula>.xml`` (VASP runs of one composition each)."""
    monkeypatch.chdir(tmp_path)
    lennard_jones_potential(type_map=("H", "C", "O"), sigma=1.6, cutoff=4.5, r_on=3.5).save(
        "m.mdband"
    )
    water = frames_of("water.npy")
    write_outcar("OUTCAR", water)
    write_vasprun("vasprun.xml", water)
    for system in HCO:
        formula = Path(system).name
        write_outcar(f"OUTCAR.{formula}", frames_of(system))
        write_vasprun(f"vasprun.{formula}.xml", frames_of(system))
    return tmp_path


def test_test_command_gives_the_errors_of_the_npy_original(work):
    """``mdband test`` on the VASP files reports the numbers it reports on the npy systems
    (virial errors too, from the stress the files hold)."""
    vasp = ["OUTCAR", "vasprun.xml", "OUTCAR.H5C5O4", "vasprun.H6C5O5.xml"]
    npy = [FIX / "water.npy", FIX / "water.npy", *(FIX / s for s in HCO)]
    runs = []
    for data in (vasp, npy):
        res = cli("test", "-m", "m.mdband", *data, "--dtype", "float64", "--json")
        assert res.exit_code == 0, res.output
        runs.append(json.loads(res.stdout))
    got, want = runs
    assert [s["system"] for s in got["systems"]] == vasp
    assert [(s["frames"], s["atoms"]) for s in got["systems"]] == [(2, [192])] * 2 + [
        (1, [14]),
        (1, [16]),
    ]
    for g, w in zip(got["systems"], want["systems"]):
        assert g["frames"] == w["frames"] and g["weights"] == w["weights"]
        assert g["errors"] == pytest.approx(w["errors"], rel=1e-7, abs=1e-9)
    assert "rmse_v" in got["systems"][2]["errors"] and "rmse_v" not in got["systems"][0]["errors"]
    assert got["average"]["errors"] == pytest.approx(want["average"]["errors"], rel=1e-7)


def test_model_devi_reads_the_frames_of_vasp_files(work):
    lennard_jones_potential(type_map=("H", "C", "O"), sigma=1.7, cutoff=4.5, r_on=3.5).save(
        "b.mdband"
    )
    rows = {}
    for name, data in (("npy", FIX / "water.npy"), ("outcar", "OUTCAR"), ("xml", "vasprun.xml")):
        out = f"{name}.out"
        res = cli("model-devi", "m.mdband", "b.mdband", "-s", data, "-o", out, "-f", 10,
                  "--dtype", "float64")  # fmt: skip
        assert res.exit_code == 0, res.output
        rows[name] = np.loadtxt(out, ndmin=2)
    assert rows["npy"].shape == (2, 7) and np.all(rows["npy"][:, 4] > 0)
    np.testing.assert_array_equal(rows["outcar"][:, 0], [0, 10])  # no steps: k * every
    for name in ("outcar", "xml"):
        np.testing.assert_allclose(rows[name], rows["npy"], rtol=1e-7, atol=1e-9)


def test_fit_reads_vasp_files_as_training_data(work):
    """What ``mdband fit`` reads (its ``read_dataset`` call, any names with ``data_format``)."""
    cfg = FitConfig.from_mapping(
        {"data": ["OUTCAR.H5C5O4", "OUTCAR.H6C5O5"], "output": "m2.mdband"}
    )
    frames = read_dataset(cfg.data, cfg.data_format, cfg.type_map)
    assert [f.n_atoms for f in frames] == [14, 16] and all(f.virial is not None for f in frames)
    for f, system in zip(frames, HCO):
        (ref,) = frames_of(system)
        assert f.species == ref["species"] and f.energy == pytest.approx(ref["energy"], abs=1e-9)
    Path("runs").mkdir()
    Path("runs/a.xml").write_bytes(Path("vasprun.H5C5O4.xml").read_bytes())
    cfg = FitConfig.from_mapping(
        {"data": ["runs/a.xml"], "output": "m2.mdband", "data_format": "vasp/xml"}
    )
    (f,) = read_dataset(cfg.data, cfg.data_format, cfg.type_map)
    assert f.energy == frames[0].energy and f.labelled


@pytest.fixture
def relaxation(work):
    """Three ionic steps of water: frame a, frame a again unconverged (NELM electronic
    steps: dpdata leaves it out), frame b. Image 1 and the last are b."""
    a, b = frames_of("water.npy")
    steps = [a, dict(a, scf_steps=60), b]
    write_outcar("OUTCAR.relax", steps)
    write_vasprun("vasprun.relax.xml", steps)
    return a, b


@pytest.mark.parametrize("name", ["OUTCAR.relax", "vasprun.relax.xml"])
@pytest.mark.filterwarnings("ignore:The following structures were unconverged")
def test_run_starts_from_a_converged_ionic_step(relaxation, name):
    a, b = relaxation
    for frame, want in ((0, a), (1, b), (None, b)):
        args = ["run", "--model", "m.mdband", "--structure", name, "--steps", 1, "--timestep", 0.1]
        args += ["--seed", 1, "--no-progress", "--threads", 1, "--traj-precision", "float64"]
        args += ["--trajectory", f"t{frame}.h5"] + ([] if frame is None else ["--frame", frame])
        res = cli(*args)
        assert res.exit_code == 0, res.output
        with H5MDReader(f"t{frame}.h5") as r:
            assert [{8: "O", 1: "H"}[int(z)] for z in r.species] == want["species"]
            np.testing.assert_allclose(r.frame(0).positions, want["positions"], atol=1e-9)
            np.testing.assert_allclose(r.cell(0), want["cell"], atol=1e-9)
    res = cli("run", "--model", "m.mdband", "--structure", name, "--frame", 2, "--steps", 1)
    assert res.exit_code == 2 and "has 2 frames; no frame 2" in res.output


@pytest.mark.filterwarnings("ignore:The following structures were unconverged")
def test_relax_takes_the_last_converged_step(relaxation):
    _, b = relaxation
    for k, name in enumerate(("OUTCAR.relax", "vasprun.relax.xml")):
        out = f"relaxed{k}.extxyz"
        res = cli("relax", "--structure", name, "--model", "m.mdband", "--output", out,
                  "--steps", 1, "--fmax", 1e6)  # fmt: skip
        assert res.exit_code == 0, res.output
        got = ase.io.read(out)
        assert got.get_chemical_symbols() == b["species"]
        np.testing.assert_allclose(got.positions, b["positions"], atol=1e-7)  # extxyz: 8 digits


@pytest.mark.parametrize("command", ["run", "relax"])
def test_help_says_which_images_a_vasp_file_has(command):
    res = cli(command, "--help")
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert (
        "counting from 0 (-1: the last; the images of a VASP OUTCAR or vasprun.xml are its "
        "converged ionic steps)" in text
    )
