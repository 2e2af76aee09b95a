"""Every command under adversarial use (issue 40), one test per case:

* outputs may not be inputs, whatever name reaches them (the path, a symbolic link, a hard
  link), in every command that writes: run, relax, fit, export, model-devi, convert, plot;
* ``--overwrite`` replaces an output that is a symbolic link by a new file and leaves the
  link's target as it was (logs, model-deviation files, relaxation trajectories, figures...);
* a second run writing a running run's log through a link, or its trajectory through a hard
  link, is refused with the first one's PID;
* ``mdband model-devi`` failing (an element a model lacks) leaves no file, and an old one as
  it was;
* model files: a damaged weight stops ``--resume`` (checksum, or the hash of an older file);
  a negative or NaN cutoff, an empty configuration, a type map longer than the weights and a
  format version of the wrong type are one line and exit code 2;
* absurd cutoffs and cells: one line and exit code 2, at once;
* ``--resume`` with ``overwrite`` (flag or TOML) ignores it and says so; a resumed trajectory
  whose position or velocity dataset was replaced by another dtype is refused, untouched;
* ``--frame`` out of range, a bad CSV row for ``mdband plot``, deepmd npy structures of the
  four listed files (and one whose coord.npy has the wrong size): one clear line;
* out of memory from torch's CPU allocator: exit code 4 with the last checkpoint; a full disk
  where the final structure goes, at the start: exit code 4 naming it, no lock left.
"""

import errno
import math
import os

import ase.io
import h5py
import numpy as np
import pytest
import test_run
import torch
from ase.build import bulk
from ase.calculators.emt import EMT
from ase.calculators.singlepoint import SinglePointCalculator
from click.testing import CliRunner
from test_run import snapshot

from mdband.cli import main
from mdband.io.checkpoint import read_checkpoint
from mdband.io.locks import OutputLock
from mdband.testing.lj import lennard_jones_potential

work = test_run.work  # test_run's fixture: an argon run directory (ar.xyz, lj.mdband, run.toml)
BASE = ("--config", "run.toml", "--trajectory", "t.h5", "--checkpoint", "c.ckpt")


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line(res, code, message):
    assert res.exit_code == code, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert "Traceback" not in res.output


@pytest.fixture
def files(work):
    """Inputs of every command beside the argon run directory: a second LJ model, labelled
    frames, a short run's trajectory and CSV log."""
    lennard_jones_potential(epsilon=0.0110).save(work / "lj2.mdband")
    frames = []
    for seed in range(4):
        atoms = bulk("Cu", "fcc", a=3.61, cubic=True)
        atoms.rattle(0.05, seed=seed)
        atoms.calc = EMT()
        e, f = atoms.get_potential_energy(), atoms.get_forces()
        atoms.calc = SinglePointCalculator(atoms, energy=e, forces=f)
        frames.append(atoms)
    ase.io.write(work / "cu.extxyz", frames)
    res = cli("run", *BASE, "--steps", 10, "--log", "r.csv")
    assert res.exit_code == 0, res.output
    return work


def _alias(work, name, kind):
    """A name reaching ``work/name``: the path itself, a symbolic link or a hard link."""
    if kind == "path":
        return name
    alias = f"alias-{kind}-{name}"
    if kind == "symlink":
        (work / alias).symlink_to(work / name)
    else:
        os.link(work / name, work / alias)
    return alias


# command -> (args writing its output onto the input ``{0}``, input, what the input is)
SELF_OVERWRITE = {
    "run": (["run", *BASE, "--log", "{0}", "--overwrite"], "ar.xyz", "is the structure"),
    "relax": (
        [*("relax", "--structure", "ar.xyz", "--model", "lj.mdband"), "--output", "{0}"]
        + ["--overwrite"],
        "ar.xyz",
        "is the structure",
    ),
    "fit": (
        ["fit", "cu.extxyz", "-o", "m.mdband", "--log", "{0}", "--overwrite"],
        "cu.extxyz",
        "is the training data",
    ),  # fmt: skip
    "fit --init": (
        ["fit", "cu.extxyz", "--init", "lj.mdband", "-o", "{0}", "--overwrite"],
        "lj.mdband",
        "is the model to fine-tune",
    ),  # fmt: skip
    "convert": (["convert", "lj.mdband", "{0}", "--overwrite"], "lj.mdband", "is the model"),
    "plot": (["plot", "r.csv", "-o", "{0}", "--overwrite"], "r.csv", "is the source"),
}


@pytest.mark.parametrize("kind", ["path", "symlink", "hardlink"])
@pytest.mark.parametrize("command", list(SELF_OVERWRITE))
def test_no_command_overwrites_its_own_input(files, command, kind):
    args, source, message = SELF_OVERWRITE[command]
    target = _alias(files, source, kind)
    before = snapshot(files)
    one_line(cli(*[a.format(target) for a in args]), 2, message)
    assert snapshot(files) == before


# command -> args writing the output ``{0}`` (with --overwrite)
RELAX = ["relax", "--structure", "ar.xyz", "--model", "lj.mdband", "--output", "o.xyz"]
FIT = ["fit", "cu.extxyz", "-o", "m.mdband", "--epochs", 1, "--channels", 4, "--n-radial", 4]
LINKED_OUTPUT = {
    "run log": ["run", *BASE, "--steps", 10, "--log", "{0}", "--overwrite"],
    "run model_devi": [
        *("run", *BASE, "--steps", 10, "--model", "lj.mdband", "--model", "lj2.mdband"),
        *("--model-devi", "{0}", "--overwrite"),
    ],
    "relax trajectory": [*RELAX, "--trajectory", "{0}", "--fmax", 1, "--overwrite"],
    "fit log": [*FIT, "--rcut", 3.0, "-q", "--val-fraction", 0, "--log", "{0}", "--overwrite"],
    "model-devi": [*("model-devi", "lj.mdband", "lj2.mdband", "-s", "ar.xyz"), "-o", "{0}"]
    + ["--overwrite"],
    "export": ["export", "t.h5", "{0}", "--format", "extxyz", "--overwrite"],
    "convert": ["convert", "lj.mdband", "{0}", "--overwrite"],
    "plot": ["plot", "r.csv", "-o", "{0}", "--overwrite"],
}


@pytest.mark.parametrize("output", list(LINKED_OUTPUT))
def test_overwrite_replaces_a_link_and_never_writes_through_it(files, output):
    (files / "precious.txt").write_text("keep me")
    suffix = {"plot": ".png", "convert": ".mdband", "relax trajectory": ".xyz"}.get(output, ".txt")
    name = "out" + suffix
    (files / name).symlink_to(files / "precious.txt")
    res = cli(*[str(a).format(name) for a in LINKED_OUTPUT[output]])
    assert res.exit_code == 0, res.output
    assert (files / "precious.txt").read_text() == "keep me"
    assert (files / name).is_file() and not (files / name).is_symlink()
    assert (files / name).stat().st_size > 0
    assert not list(files.glob(".*.tmp")) and not list(files.glob(".*.lock"))


def test_a_second_run_through_a_linked_log_is_refused(files):
    (files / "alias.csv").symlink_to(files / "r.csv")
    before = (files / "r.csv").read_bytes()
    with OutputLock(files / "r.csv", "log"):  # the first run writes r.csv
        res = cli("run", *BASE, "--trajectory", "u.h5", "--checkpoint", "u.ckpt", "--steps", 10,
                  "--log", "alias.csv", "--overwrite")  # fmt: skip
    one_line(res, 2, "log alias.csv is being written by another process (PID")
    assert (files / "r.csv").read_bytes() == before


def test_a_second_run_through_a_hard_link_of_a_trajectory_is_refused(files):
    os.link(files / "t.h5", files / "hard.h5")
    before = (files / "t.h5").read_bytes()
    with OutputLock(files / "t.h5", "trajectory"):  # the first run writes t.h5
        res = cli("run", *BASE, "--trajectory", "hard.h5", "--checkpoint", "u.ckpt",
                  "--steps", 10, "--overwrite")  # fmt: skip
    one_line(res, 2, "trajectory hard.h5 is being written by another process (PID")
    assert (files / "t.h5").read_bytes() == before


def test_model_devi_failing_leaves_no_file(files):
    xe = bulk("Ar", "fcc", a=5.26, cubic=True)
    xe.symbols[0] = "Xe"
    ase.io.write(files / "xe.xyz", xe)
    res = cli("model-devi", "lj.mdband", "lj2.mdband", "-s", "xe.xyz", "-o", "devi.out")
    one_line(res, 2, "element(s) Xe not in the model's type map")
    assert not (files / "devi.out").exists()
    (files / "devi.out").write_text("old rows\n")
    res = cli("model-devi", "lj.mdband", "lj2.mdband", "-s", "xe.xyz", "-o", "devi.out",
              "--overwrite")  # fmt: skip
    assert res.exit_code == 2 and (files / "devi.out").read_text() == "old rows\n"


# ----------------------------------------------------------------------------- model files


def _flip(path, keep_checksum):
    obj = torch.load(path, weights_only=True)
    sd = obj["state_dict"]
    raw = sd["epsilon"].clone().reshape(-1).view(torch.uint8)
    raw[3] ^= 1
    sd["epsilon"] = raw.view(torch.float64).reshape(())
    if not keep_checksum:
        obj.pop("checksum", None)  # as an older mdband wrote it
    torch.save(obj, path)


@pytest.mark.parametrize("checksum", [True, False])
def test_resume_with_a_damaged_model_is_refused(work, checksum):
    assert cli("run", *BASE, "--steps", 20).exit_code == 0
    if not checksum:  # an older model file: no checksum, the hash of its weights
        obj = torch.load(work / "lj.mdband", weights_only=True)
        obj.pop("checksum")
        torch.save(obj, work / "lj.mdband")
        assert cli("run", *BASE, "--steps", 30, "--resume").exit_code == 0  # intact: resumes
    _flip(work / "lj.mdband", checksum)
    before = snapshot(work)
    res = cli("run", *BASE, "--steps", 40, "--resume")
    one_line(res, 2, "is damaged: its contents do not match" if checksum else "written with model")
    assert snapshot(work) == before


@pytest.mark.parametrize(
    "change, message",
    [
        ({"cutoff": -1.0}, "cutoff -1.0 Å must be a finite positive length"),
        ({"cutoff": math.nan}, "cutoff nan Å must be a finite positive length"),
        ({"config": {}}, "the model configuration is empty"),
        ({"format_version": "1"}, "format version '1' is not an integer"),
    ],
)
@pytest.mark.parametrize("command", ["run", "info"])
def test_a_bad_model_file_is_one_line(work, change, message, command):
    obj = torch.load(work / "lj.mdband", weights_only=True)
    obj.update(change)
    obj.pop("checksum")
    torch.save(obj, work / "bad.mdband")
    args = ["info", "bad.mdband"] if command == "info" else ["run", *BASE, "--model", "bad.mdband"]
    one_line(cli(*args), 2, message)


def test_a_type_map_longer_than_the_weights_is_one_line(work):
    from mdband import load_model

    load_model("builtin:emt-cuni", device="cpu", dtype="float64").save(work / "cuni.mdband")
    obj = torch.load(work / "cuni.mdband", weights_only=True)
    obj["type_map"] = ["Ni", "Cu", "Zn"]
    obj.pop("checksum")
    torch.save(obj, work / "cuni.mdband")
    one_line(cli("info", "cuni.mdband", "--device", "cpu"), 2, "(3 types) differs from the model")


def test_an_atom_at_1e300_is_one_line(work):
    atoms = ase.io.read(work / "ar.xyz")
    atoms.positions[4, 2] = 1e300
    ase.io.write(work / "far.xyz", atoms)
    before = snapshot(work)
    one_line(cli("run", *BASE, "--structure", "far.xyz"), 2, "atom 4 is 1e+300 Å from the origin")
    assert snapshot(work) == before


def test_an_absurd_model_cutoff_is_one_line(work):
    lennard_jones_potential(cutoff=1e6, r_on=9e5).save(work / "far.mdband")
    before = snapshot(work)
    one_line(cli("run", *BASE, "--model", "far.mdband"), 2, "periodic images of the cell")
    assert snapshot(work) == before


# ----------------------------------------------------------------------------- resume, inputs


@pytest.mark.parametrize("how", ["flag", "toml"])
def test_resume_ignores_overwrite_and_says_so(work, how):
    assert cli("run", *BASE, "--steps", 20).exit_code == 0
    extra = ["--overwrite"]
    if how == "toml":
        (work / "run.toml").write_text((work / "run.toml").read_text() + "overwrite = true\n")
        extra = []
    res = cli("run", *BASE, "--steps", 30, "--resume", *extra)
    assert res.exit_code == 0, res.output
    assert "Warning: overwrite is ignored: a resumed run continues its own outputs" in res.output
    assert read_checkpoint(work / "c.ckpt").step == 30


@pytest.mark.parametrize(
    "dataset, dtype",
    [("particles/all/position/value", "int32"), ("particles/all/velocity/value", "float16")],
)
def test_resume_into_a_trajectory_of_another_dtype_is_refused(work, dataset, dtype):
    assert cli("run", *BASE, "--steps", 20).exit_code == 0
    with h5py.File(work / "t.h5", "r+") as f:
        old = f[dataset][()]
        del f[dataset]
        f.create_dataset(dataset, data=old.astype(dtype), maxshape=(None, *old.shape[1:]))
    before = snapshot(work)
    res = cli("run", *BASE, "--steps", 40, "--resume")
    one_line(res, 2, f"dataset {dataset} holds {dtype}")
    assert snapshot(work) == before


@pytest.mark.parametrize("frame", [-99, 99])
def test_a_frame_out_of_range_is_one_line(work, frame):
    res = cli("run", *BASE, "--frame", frame)
    one_line(res, 2, f"ar.xyz has no frame {frame}")
    assert "StopIteration" not in res.output


def test_plot_names_the_file_and_line_of_a_bad_csv_row(files):
    text = (files / "r.csv").read_text().splitlines()
    text[2] = ",".join(["abc"] + text[2].split(",")[1:])
    (files / "bad.csv").write_text("\n".join(text) + "\n")
    one_line(cli("plot", "bad.csv", "-o", "bad.png"), 2, "bad.csv, line 3: 'abc' is not a number")
    assert not (files / "bad.png").exists()


def _deepmd(work, coord=None):
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=2)
    system = work / "ar_npy"
    (system / "set.000").mkdir(parents=True)
    (system / "type.raw").write_text("0\n" * len(atoms))
    (system / "type_map.raw").write_text("Ar\n")
    coords = atoms.positions.reshape(1, -1) if coord is None else coord
    np.save(system / "set.000" / "coord.npy", coords)
    np.save(system / "set.000" / "box.npy", atoms.cell.array.reshape(1, 9))
    return system


def test_a_deepmd_structure_of_the_four_listed_files_runs(work):
    _deepmd(work)
    res = cli("run", *BASE, "--structure", "ar_npy", "--steps", 10)
    assert res.exit_code == 0, res.output


def test_a_deepmd_coord_file_of_the_wrong_size_is_one_line(work):
    _deepmd(work, coord=np.zeros((1, 50)))
    one_line(cli("run", *BASE, "--structure", "ar_npy"), 2, "cannot reshape array of size 50")


# ----------------------------------------------------------------------------- resources


def _allocator_fails_after(monkeypatch, calls):
    """Torch's CPU allocator running out after ``calls`` evaluations (what it raises)."""
    from mdband.testing import lj

    forward = lj.LennardJones.forward
    seen = []

    def hungry(self, *args, **kw):
        seen.append(1)
        if len(seen) > calls:
            raise RuntimeError(
                "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
                "allocate memory: you tried to allocate 68719476736 bytes. Error code 12"
            )
        return forward(self, *args, **kw)

    monkeypatch.setattr(lj.LennardJones, "forward", hungry)


def test_cpu_allocator_out_of_memory_exits_4_with_the_last_checkpoint(work, monkeypatch):
    _allocator_fails_after(monkeypatch, 25)
    res = cli("run", *BASE, "--steps", 40)
    one_line(res, 4, "out of memory (CPU)")
    assert "last good checkpoint: step 20 (c.ckpt)" in res.stderr
    assert read_checkpoint(work / "c.ckpt").step == 20


@pytest.mark.parametrize("command", ["run", "relax"])
def test_cpu_allocator_out_of_memory_at_the_start_exits_4(work, monkeypatch, command):
    _allocator_fails_after(monkeypatch, 0)
    if command == "run":
        args = ["run", *BASE]
    else:
        args = ["relax", "--structure", "ar.xyz", "--model", "lj.mdband", "--output", "o.xyz"]
    res = cli(*args)
    one_line(res, 4, "out of memory")
    assert not list(work.glob(".*.lock"))


def test_a_full_disk_for_the_final_structure_at_the_start_exits_4(work, monkeypatch):
    import mdband.io.locks as locks

    write = os.write

    def full(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".t.final.xyz.lock"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(fd, data)

    monkeypatch.setattr(locks.os, "write", full)
    before = snapshot(work)
    res = cli("run", *BASE)
    one_line(res, 4, "disk full: cannot write the lock file")
    assert "t.final.xyz" in res.stderr
    assert snapshot(work) == before and not list(work.glob(".*"))
