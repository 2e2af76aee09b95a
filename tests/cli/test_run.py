"""``mdband run``: TOML + flags, resume, and one-line errors (exit 2) that change no file."""

import json
import re

import ase.io
import numpy as np
import pytest
from ase import Atoms
from ase.build import bulk
from click.testing import CliRunner

from mdband.cli import main
from mdband.io.checkpoint import read_checkpoint
from mdband.io.h5md import H5MDReader
from mdband.testing.lj import lennard_jones_potential


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A directory with an argon structure, an LJ model file and a run.toml."""
    monkeypatch.chdir(tmp_path)
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=1)
    ase.io.write(tmp_path / "ar.xyz", atoms)
    lennard_jones_potential().save(tmp_path / "lj.mdband")
    (tmp_path / "run.toml").write_text(
        'structure = "ar.xyz"\nmodel = "lj.mdband"\nensemble = "nvt-bussi"\ntemperature = 80\n'
        "timestep = 5.0\nsteps = 40\nseed = 3\ntraj-every = 10\ncheckpoint_every = 10\n"
        'dtype = "float64"\nprogress = false\n'
    )
    return tmp_path


def invoke(*args):
    return CliRunner().invoke(main, ["run", *map(str, args)])


def snapshot(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def test_toml_and_flags(work):
    res = invoke("--config", "run.toml", "--steps", 20, "--trajectory", "t.h5", "--log", "r.log")
    assert res.exit_code == 0, res.output
    assert "Step" in res.stdout and "ns/day" in res.stdout and res.stderr == ""
    with H5MDReader(work / "t.h5") as r:
        assert list(r.steps) == [0, 10, 20]
        cfg = json.loads(r.parameters["config_json"])
        assert cfg["steps"] == 20 and cfg["ensemble"] == "nvt-bussi" and cfg["temperature"] == 80
        assert cfg["structure"] == str(work / "ar.xyz")  # relative to the TOML file
    log = (work / "r.log").read_text()
    assert "Finished at step 20" in log and log.count("\n") > 5
    # the summary splits a step's time between the model and the rest of the loop
    m = re.search(r"Time per step: ([0-9.]+) ms, of which ([0-9.]+) ms in the model", log)
    assert m, log
    per, in_model = float(m.group(1)), float(m.group(2))
    assert 0 < in_model < per
    # and the steps after the warm-up (first calls, graph capture) apart
    m = re.search(r"after the first 3 steps \(kernel compilation, graph capture\): ([0-9.]+) ms "
                  r"per step, ([0-9.]+) ms in the model", log)  # fmt: skip
    assert m, log
    assert 0 < float(m.group(2)) < float(m.group(1))


def test_resume_from_the_checkpoint_alone(work):
    common = ("--config", "run.toml", "--trajectory")
    assert invoke(*common, "a.h5", "--checkpoint", "a.ckpt").exit_code == 0
    assert invoke(*common, "b.h5", "--checkpoint", "b.ckpt", "--steps", 20).exit_code == 0
    # only the checkpoint and the new length: everything else comes from the checkpoint
    res = invoke("--resume", "--checkpoint", "b.ckpt", "--steps", 40)
    assert res.exit_code == 0, res.output
    assert "Resuming from b.ckpt at step 20" in res.stdout
    a, b = read_checkpoint(work / "a.ckpt"), read_checkpoint(work / "b.ckpt")
    assert a.step == b.step == 40
    assert a.positions.tobytes() == b.positions.tobytes()
    assert a.momenta.tobytes() == b.momenta.tobytes()
    with H5MDReader(work / "b.h5") as r:
        assert list(r.steps) == [0, 10, 20, 30, 40]


def test_overwrite_replaces_outputs(work):
    assert invoke("--config", "run.toml", "--steps", 10, "--trajectory", "t.h5").exit_code == 0
    res = invoke("--config", "run.toml", "--steps", 20, "--trajectory", "t.h5", "--overwrite")
    assert res.exit_code == 0, res.output
    with H5MDReader(work / "t.h5") as r:
        assert list(r.steps) == [0, 10, 20]


def test_float32_model_and_frame_choice(work):
    ase.io.write(work / "two.extxyz", [bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)] * 2)
    res = invoke(
        "--structure",
        "two.extxyz",
        "--frame",
        0,
        "--model",
        "lj.mdband",
        "--steps",
        5,
        "--dtype",
        "float32",
        "--no-progress",
        "--seed",
        1,
        "--threads",
        1,
    )
    assert res.exit_code == 0, res.output
    assert "(float32)" in res.stdout


def _xe(work):
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.numbers[5] = 54
    ase.io.write(work / "xe.xyz", atoms)
    return "xe.xyz"


def _close(work):
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.positions[1] = atoms.positions[0] + [0.3, 0, 0]
    ase.io.write(work / "close.xyz", atoms)
    return "close.xyz"


def _nan(work):
    (work / "nan.xyz").write_text("2\n\nAr 0.0 0.0 0.0\nAr nan 3.0 0.0\n")
    return "nan.xyz"


def _flat(work):
    atoms = Atoms("Ar2", positions=[[0, 0, 0], [3.5, 0, 0]], cell=np.zeros((3, 3)), pbc=True)
    ase.io.write(work / "flat.traj", atoms)
    return "flat.traj"


def _garbage(work):
    (work / "garbage.xyz").write_text("3\nnot really\nthis is not xyz\n")
    return "garbage.xyz"


def _text_model(work):
    (work / "notes.mdband").write_text("I am not a model")
    return "notes.mdband"


def _truncated_model(work):
    data = (work / "lj.mdband").read_bytes()
    (work / "cut.mdband").write_bytes(data[: len(data) // 2])
    return "cut.mdband"


BAD_INPUTS = {
    "missing structure": (["--structure", "nope.xyz"], "structure file nope.xyz does not exist"),
    "unreadable structure": (["--structure", _garbage], "cannot read structure garbage.xyz"),
    "unknown element": (["--structure", _xe], "element(s) Xe not in the model's type map"),
    "close atoms": (["--structure", _close], "closer than the minimum distance 0.5 Å"),
    "nan coordinates": (["--structure", _nan], "positions contain NaN or inf"),
    "flat periodic cell": (["--structure", _flat], "zero volume"),
    "missing model": (["--model", "none.pt"], "model file none.pt does not exist"),
    "not a model": (["--model", _text_model], "cannot read model file notes.mdband"),
    "corrupt model": (["--model", _truncated_model], "cannot read model file cut.mdband"),
    "zero timestep": (["--timestep", "0"], "timestep must be positive"),
    "negative timestep": (["--timestep", "-1"], "timestep must be positive"),
    "zero steps": (["--steps", "0"], "steps must be positive"),
    "negative temperature": (["--temperature", "-5"], "temperature must be >= 0"),
    "bad flag value": (["--steps", "many"], "'many' is not a valid integer"),
    "unknown ensemble": (["--ensemble", "nvt"], "'nvt' is not one of"),
    "missing config": (["--config", "nope.toml"], "config file nope.toml does not exist"),
    "missing checkpoint": (
        ["--resume", "--checkpoint", "gone.ckpt"],
        "checkpoint gone.ckpt does not exist",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_changes_nothing(work, case):
    args, message = BAD_INPUTS[case]
    args = [a(work) if callable(a) else a for a in args]
    before = snapshot(work)
    base = ["--config", "run.toml", "--trajectory", "t.h5", "--checkpoint", "c.ckpt"]
    res = invoke(*base, *args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mdband: error: "), res.stderr
    assert message in lines[0]
    assert "Traceback" not in res.output
    assert snapshot(work) == before


def test_resume_needs_a_checkpoint(work):
    before = snapshot(work)
    res = invoke("--config", "run.toml", "--resume")
    assert res.exit_code == 2 and res.stderr == "mdband: error: --resume needs --checkpoint FILE\n"
    assert snapshot(work) == before


def test_close_atoms_threshold_is_configurable(work):
    res = invoke(
        "--config",
        "run.toml",
        "--structure",
        _close(work),
        "--min-distance",
        0.2,
        "--steps",
        1,
        "--timestep",
        0.1,
    )
    assert res.exit_code == 0, res.output


def test_bad_toml(work):
    (work / "bad.toml").write_text("steps = = 3\n")
    (work / "typo.toml").write_text("stepz = 3\n")
    before = snapshot(work)
    res = invoke("--config", "bad.toml")
    assert res.exit_code == 2 and "cannot parse config file bad.toml" in res.stderr
    res = invoke("--config", "typo.toml")
    assert res.exit_code == 2 and "unknown setting 'stepz'" in res.stderr
    assert snapshot(work) == before


def _existing_outputs(work):
    res = invoke(
        "--config", "run.toml", "--steps", 20, "--trajectory", "t.h5", "--checkpoint", "c.ckpt"
    )
    assert res.exit_code == 0, res.output
    return snapshot(work)


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "trajectory file t.h5 exists; use --overwrite"),
        (["--trajectory", "new.h5"], "checkpoint file c.ckpt exists; use --overwrite"),
        (["--resume", "--timestep", "2"], "cannot resume with changed settings: timestep 5.0"),
        (["--resume", "--ensemble", "nve"], "ensemble 'nvt-bussi' -> 'nve'"),
        (["--resume", "--model", "other.mdband"], "was written with model"),
        (["--resume", "--steps", "10"], "steps 10 is below the checkpoint's step 20"),
    ],
)
def test_refusals_with_existing_outputs(work, args, message):
    lennard_jones_potential(epsilon=0.0105).save(work / "other.mdband")
    before = _existing_outputs(work)
    res = invoke(
        "--config",
        "run.toml",
        "--steps",
        40,
        "--trajectory",
        "t.h5",
        "--checkpoint",
        "c.ckpt",
        *args,
    )
    assert res.exit_code == 2, res.output
    assert len(res.stderr.strip().splitlines()) == 1 and message in res.stderr, res.stderr
    assert snapshot(work) == before


def test_corrupt_checkpoint(work):
    _existing_outputs(work)
    data = (work / "c.ckpt").read_bytes()
    mid = len(data) // 2  # inside the arrays (the file may end in unused space)
    (work / "c.ckpt").write_bytes(data[:mid] + b"\0" * 200 + data[mid + 200 :])
    before = snapshot(work)
    res = invoke(
        "--config",
        "run.toml",
        "--steps",
        40,
        "--trajectory",
        "t.h5",
        "--checkpoint",
        "c.ckpt",
        "--resume",
    )
    assert res.exit_code == 2 and "checkpoint c.ckpt is corrupt" in res.stderr, res.stderr
    assert snapshot(work) == before


def test_trajectory_of_another_run_is_refused(work):
    _existing_outputs(work)
    assert (
        invoke(
            "--config",
            "run.toml",
            "--steps",
            10,
            "--trajectory",
            "o.h5",
            "--checkpoint",
            "o.ckpt",
            "--structure",
            "ar.xyz",
            "--ensemble",
            "npt-mtk",
        ).exit_code
        == 0
    )
    before = snapshot(work)
    res = invoke(
        "--config",
        "run.toml",
        "--steps",
        40,
        "--trajectory",
        "o.h5",
        "--checkpoint",
        "c.ckpt",
        "--resume",
    )
    assert res.exit_code == 2 and "another ensemble" in res.stderr, res.stderr
    assert snapshot(work) == before


def test_nan_during_run_exits_3_and_keeps_outputs(work, monkeypatch):
    import mdband.loader

    real = mdband.loader.load_model

    def poisoned(*args, **kwargs):
        pot = real(*args, **kwargs)
        inner = pot.model.forward
        calls = {"n": 0}

        def forward(*a, **k):
            calls["n"] += 1
            out = inner(*a, **k)
            return out * float("nan") if calls["n"] > 25 else out

        pot.model.forward = forward
        return pot

    monkeypatch.setattr(mdband.loader, "load_model", poisoned)
    res = invoke("--config", "run.toml", "--trajectory", "t.h5", "--checkpoint", "c.ckpt")
    assert res.exit_code == 3, res.output
    assert res.stderr.strip().splitlines() == [
        "mdband: error: run stopped at step 25: the energy, forces, positions or momenta are "
        "NaN/inf; last good checkpoint: step 20 (c.ckpt)"
    ]
    assert read_checkpoint(work / "c.ckpt").step == 20
    with H5MDReader(work / "t.h5") as r:
        assert list(r.steps) == [0, 10, 20] and not r.recovered
