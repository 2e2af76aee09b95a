"""The deepmd-kit exporter: models converted or fitted here are deepmd-kit 3.2 checkpoints.

Without deepmd-kit: the exported ``model_params`` equal the argcheck-normalised ones of the
fixture checkpoints (seeds aside), and every buffer deepmd-kit derives is reproduced exactly.
With the reference venv (``../shared/tools/deepmd-reference``; skipped with the reason when
absent): deepmd-kit loads the files strictly, its ``DeepPot`` gives mdband's float64 numbers to
1e-10 relative, and ``dp --pt test`` runs on one.
"""

import json
import os
import re
import subprocess
from pathlib import Path

import ase.io
import numpy as np
import pytest
import torch

import mdband
from mdband.errors import ModelFileError, UnsupportedModelError
from mdband.io.deepmd_export import PREFIX, deepmd_checkpoint
from mdband.io.model_output import output_model_format
from mdband.io.systems import read_systems
from mdband.testing.lj import lennard_jones_potential

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "deepmd"
CONFIGS = ["s2ffn", "gated_pyramid", "gated_pyramid_v10", "grid_mini", "grid_neo", "zbl",
           "chgspin", "chgspin_default", "chgspin_zbl"]  # fmt: skip
STRUCTURES = FIX / "structures.extxyz"
TOOL = REPO.parent / "shared" / "tools" / "deepmd-reference"


def reference_python() -> Path | None:
    """The deepmd-kit venv's python: $DEEPMD_REF_VENV, else the tool's default venv."""
    venv = os.environ.get("DEEPMD_REF_VENV")
    if venv is None and TOOL.is_file():
        m = re.search(r'venv="\$\{DEEPMD_REF_VENV:-([^}]+)\}"', TOOL.read_text())
        venv = m.group(1) if m else None
    py = Path(venv) / "bin" / "python" if venv else None
    return py if py is not None and py.is_file() else None


PY = reference_python()
needs_deepmd = pytest.mark.skipif(
    PY is None,
    reason="no deepmd-kit reference venv ($DEEPMD_REF_VENV or ../shared/tools/deepmd-reference)",
)


def raw(name):
    return torch.load(FIX / f"{name}.pt", map_location="cpu", weights_only=True)["model"]


def without_seeds(params):
    params = json.loads(json.dumps(params))
    params["descriptor"].pop("seed")
    params["fitting_net"].pop("seed")
    return params


@pytest.mark.parametrize("name", CONFIGS)
def test_params_and_buffers_equal_deepmd_kits(name):
    ref = raw(name)
    pot = mdband.load_model(FIX / f"{name}.pt", device="cpu", dtype="float64")
    got = deepmd_checkpoint(pot)["model"]
    assert without_seeds(got["_extra_state"]["model_params"]) == without_seeds(
        ref["_extra_state"]["model_params"]
    )
    assert got["_extra_state"]["train_infos"] == {"lr": 0, "step": 0}
    version_key = PREFIX + "descriptor.version_tensor"
    want_keys = set(ref) | {version_key}  # the v1.0 checkpoint has none: it is written
    assert set(got) == want_keys
    for key in ref:
        if key == "_extra_state" or key.endswith("out_std"):  # out_std: training statistics
            continue
        assert got[key].dtype == ref[key].dtype, key
        assert torch.equal(got[key], ref[key]), key
    assert float(got[version_key]) == (1.0 if name.endswith("_v10") else float(ref[version_key]))
    assert torch.equal(got[PREFIX + "out_std"], torch.ones_like(ref[PREFIX + "out_std"]))


def test_names_and_kinds_that_are_refused(tmp_path):
    lj = lennard_jones_potential()
    with pytest.raises(ModelFileError, match=r"\.pt is deepmd-kit's name.*\.mdband"):
        lj.save(tmp_path / "lj.pt")
    assert not (tmp_path / "lj.pt").exists()
    with pytest.raises(UnsupportedModelError, match="only SeZM models"):
        lj.save_deepmd(tmp_path / "lj.pt")
    assert output_model_format("a.mdband") == "mdband" and output_model_format("a.pt") == "deepmd"
    with pytest.raises(ModelFileError, match="deepmd-kit's checkpoint name"):
        output_model_format("a.pt", "mdband")
    with pytest.raises(ModelFileError, match="named \\*.pt"):
        output_model_format("a.mdband", "deepmd")
    with pytest.raises(ModelFileError, match="cannot tell the model format"):
        output_model_format("a.pth")


def test_a_multitask_head_exports_with_its_case_embedding(tmp_path):
    """A head keeps its case one-hot and FiLM (a single-task checkpoint deepmd-kit evaluates
    as that head: the test with the reference venv below); a dens model is refused by name."""
    pot = mdband.load_model(FIX / "multitask_film.pt", device="cpu", dtype="float64",
                            head="Water2")  # fmt: skip
    got = deepmd_checkpoint(pot)["model"]
    fit = got["_extra_state"]["model_params"]["fitting_net"]
    assert fit["dim_case_embd"] == 2 and fit["case_film_embd"] is True
    assert got[PREFIX + "fitting_net.case_embd"].tolist() == [0.0, 1.0]
    pot.save_deepmd(tmp_path / "w2.pt")
    again = mdband.load_model(tmp_path / "w2.pt", device="cpu", dtype="float64")
    ref = np.load(FIX / "multitask_film.water_2.npz")
    atoms = ase.io.read(STRUCTURES, index=1)
    assert mdband_numbers(again, atoms)[0] == pytest.approx(float(ref["energy_1"]), rel=1e-10)
    dens = mdband.load_model(FIX / "dens.pt", device="cpu", dtype="float64")
    with pytest.raises(UnsupportedModelError, match="active_mode='dens'"):
        dens.save_deepmd(tmp_path / "dens.pt")
    assert not (tmp_path / "dens.pt").exists()


def mdband_numbers(pot, atoms):
    res = pot.evaluate(atoms.positions, atoms.cell.array, atoms.pbc, atoms.get_chemical_symbols())
    return res.energy, np.asarray(res.forces), np.asarray(res.virial).reshape(9)


def tiny_fit(tmp_path) -> Path:
    """A model fitted here (from scratch, float64 output) written as a deepmd-kit checkpoint."""
    frames = ase.io.read(STRUCTURES, index=":2")
    ref = np.load(FIX / "grid_neo.npz")
    from ase.calculators.singlepoint import SinglePointCalculator

    for i, atoms in enumerate(frames):
        atoms.calc = SinglePointCalculator(
            atoms, energy=float(ref[f"energy_{i}"]), forces=ref[f"forces_{i}"]
        )
    data = tmp_path / "data.extxyz"
    ase.io.write(data, frames)
    out = tmp_path / "fitted.pt"
    model = {"channels": 4, "lmax": 1, "n_blocks": 1, "rcut": 4.0, "n_radial": 4}
    mdband.fit(
        str(data), str(out), epochs=1, batch_size=2, val_fraction=0.0, model=model,
        dtype="float64", device="cpu", type_map=["H", "C", "O"],
    )  # fmt: skip
    return out


@needs_deepmd
def test_deepmd_kit_reads_converted_and_fitted_models(tmp_path):
    from click.testing import CliRunner

    from mdband.cli import main

    pairs, pots = [], {}
    # the other configs' files equal deepmd-kit's buffer for buffer (the test above)
    for name in ("s2ffn", "gated_pyramid_v10", "grid_neo", "zbl", "chgspin_default"):
        out = tmp_path / f"{name}.pt"
        res = CliRunner().invoke(main, ["convert", str(FIX / f"{name}.pt"), str(out)])
        assert res.exit_code == 0 and "deepmd-kit checkpoint (float64)" in res.output, res.output
        pairs.append(f"{out}:{FIX / f'{name}.pt'}")
        pots[str(out)] = mdband.load_model(FIX / f"{name}.pt", device="cpu", dtype="float64")
    fitted = tiny_fit(tmp_path)
    pairs.append(str(fitted))
    pots[str(fitted)] = mdband.load_model(fitted, device="cpu", dtype="float64")
    # a head of a multi-task checkpoint with case FiLM, as a single-task checkpoint
    head = mdband.load_model(FIX / "multitask_film.pt", device="cpu", dtype="float64",
                             head="Water2")  # fmt: skip
    head.save_deepmd(tmp_path / "water_2.pt")
    pairs.append(str(tmp_path / "water_2.pt"))
    pots[str(tmp_path / "water_2.pt")] = head
    proc = subprocess.run(
        [str(PY), str(Path(__file__).with_name("deepmd_ref_check.py")), str(STRUCTURES), *pairs],
        capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = json.loads(proc.stdout.strip().splitlines()[-1])
    images = ase.io.read(STRUCTURES, index=":")
    for path, report in reports.items():
        assert report["normalised_fixed_point"] and report["strict_load"], path
        assert report.get("missing", []) == [] and report.get("differ", []) == [], path
        # the v1.0 checkpoint has no version_tensor; the export says 1.0 explicitly
        v10 = path.endswith("_v10.pt")
        assert report.get("extra", []) == ([PREFIX + "descriptor.version_tensor"] if v10 else [])
        for atoms, got in zip(images, report["frames"]):
            e, f, v = mdband_numbers(pots[path], atoms)
            assert got["energy"] == pytest.approx(e, rel=1e-10, abs=1e-10), path
            scale = max(1.0, float(np.abs(f).max()))
            np.testing.assert_allclose(got["forces"], f, rtol=0, atol=1e-10 * scale)
            np.testing.assert_allclose(got["virial"], v, rtol=0, atol=1e-10 * max(1.0, abs(e)))


@needs_deepmd
def test_dp_test_runs_on_an_exported_model(tmp_path):
    out = tmp_path / "grid_neo.pt"
    pot = mdband.load_model(FIX / "grid_neo.pt", device="cpu", dtype="float64")
    pot.save_deepmd(out)
    system = REPO / "tests" / "fixtures" / "formats" / "hco.npy" / "H6C5O5"
    dp = PY.parent / "dp"
    proc = subprocess.run(
        [str(dp), "--pt", "test", "-m", str(out), "-s", str(system), "-n", "1",
         "-d", str(tmp_path / "detail")],
        capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Energy RMSE" in proc.stderr + proc.stdout
    data_e, pred_e = np.loadtxt(tmp_path / "detail.e.out", ndmin=2)[0][:2]
    atoms = read_systems(system)[0]
    e = pot.evaluate(atoms.positions, atoms.cell, atoms.pbc, atoms.species).energy
    assert pred_e == pytest.approx(e, rel=1e-10)
    assert data_e == pytest.approx(atoms.energy, rel=1e-12)  # grid_neo's own label


#: a deepmd-kit 3.2 venv whose compiled op library loads (``dp --pt freeze`` needs it; the
#: reference venv runs torch 2.13, against which deepmd-kit's wheel library does not load):
#: torch==2.11.0 deepmd-kit==3.2.0 mpich==5.0.2 (its op library links libmpi)
FREEZE_VENV = os.environ.get("DEEPMD_FREEZE_VENV")
_EVAL_FROZEN = """
import json, sys
import ase.io
from deepmd.infer import DeepPot
out = {}
for path in sys.argv[2:]:
    dp, frames = DeepPot(path), []
    for a in ase.io.read(sys.argv[1], index=":"):
        types = [dp.get_type_map().index(s) for s in a.get_chemical_symbols()]
        cell = a.cell.array.reshape(1, -1) if a.pbc.any() else None
        e, f, v = dp.eval(a.positions.reshape(1, -1), cell, types)[:3]
        frames.append({"energy": float(e.ravel()[0]), "forces": f.reshape(-1, 3).tolist()})
    out[path] = frames
print(json.dumps(out))
"""


@pytest.mark.skipif(
    FREEZE_VENV is None,
    reason="slow (two AOTInductor builds, ~5 min): set DEEPMD_FREEZE_VENV to a venv with "
    "torch==2.11.0, deepmd-kit==3.2.0 and mpich==5.0.2",
)
def test_dp_freeze_of_an_exported_model_equals_the_originals(tmp_path):
    venv = Path(FREEZE_VENV)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LD_LIBRARY_PATH": str(venv / "lib")}
    pot = mdband.load_model(FIX / "grid_neo.pt", device="cpu", dtype="float64")
    pot.save_deepmd(tmp_path / "exported.pt")
    frozen = []
    for ckpt in (FIX / "grid_neo.pt", tmp_path / "exported.pt"):
        out = tmp_path / f"{ckpt.stem}-frozen.pth"
        proc = subprocess.run(
            [str(venv / "bin" / "dp"), "--pt", "freeze", "-c", str(ckpt), "-o", str(out)],
            capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        frozen.append(next(tmp_path.glob(f"{out.stem}.pt*")))  # DPA4 freezes to .pt2
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", _EVAL_FROZEN, str(STRUCTURES), *map(str, frozen)],
        capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    original, exported = json.loads(proc.stdout.strip().splitlines()[-1]).values()
    for a, b in zip(original, exported, strict=True):
        assert b["energy"] == pytest.approx(a["energy"], rel=1e-9)
        np.testing.assert_allclose(b["forces"], a["forces"], rtol=0, atol=1e-7)
