"""Reliability of the files mdband reads and writes (issue 40), one test per case:

* one writer per file, identified by the file a path reaches: a symbolic link or a hard link
  to an output another process writes is refused, as is a lock-file path that is a link;
* a full disk while the lock is written: one line naming the file, no lock left behind;
* new outputs replace a path (a link included) in one step and never write through it;
* model files: a checksum over their contents, the model hash over the weights (an older
  file without checksum still loads with its recorded hash), the envelope validated (format
  version type, cutoff, type map, configuration, every weight's shape);
* a resumed trajectory whose datasets no longer have the run's dtype or shape is refused
  before anything is appended;
* CSV logs: a bad row is named by file and line; starting structures: an out-of-range frame
  is one line, a deepmd npy system needs only the four files docs/cli.md lists.
"""

import errno
import math
import os

import ase.io
import h5py
import numpy as np
import pytest
import torch
from ase.build import bulk

from mdband.errors import MdbandError, ModelFileError, ResourceExhaustedError, StructureError
from mdband.io.h5md import Frame, H5MDWriter, TrajectoryError, TrajectoryHeader
from mdband.io.locks import OutputLock, OutputLockedError, lock_path
from mdband.io.run_files import read_csv_log
from mdband.io.structure import read_structure
from mdband.loader import load_model
from mdband.testing.lj import lennard_jones_potential

# ----------------------------------------------------------------------------- locks, links


def test_a_link_to_a_locked_output_is_refused(tmp_path):
    """A second run writing the same log through a symbolic link is refused."""
    shared = tmp_path / "shared.csv"
    shared.write_text("step,time_ps\n")
    (tmp_path / "alias.csv").symlink_to(shared)
    with OutputLock(shared, "log"):
        with pytest.raises(OutputLockedError, match=f"log .*alias.csv .*PID {os.getpid()}"):
            OutputLock(tmp_path / "alias.csv", "log").acquire()
    with OutputLock(tmp_path / "alias.csv", "log"):  # and the other way round
        with pytest.raises(OutputLockedError):
            OutputLock(shared, "log").acquire()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alias.csv", "shared.csv"]


def test_a_hard_link_to_a_locked_output_is_refused(tmp_path):
    """``ln a.h5 hard.h5`` of a running trajectory: the second writer is refused."""
    first = tmp_path / "a.h5"
    first.write_bytes(b"frames")
    with OutputLock(first, "trajectory"):
        os.link(first, tmp_path / "hard.h5")
        with pytest.raises(OutputLockedError, match=f"trajectory .*hard.h5 .*PID {os.getpid()}"):
            OutputLock(tmp_path / "hard.h5", "trajectory").acquire()
    assert first.read_bytes() == b"frames"


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_lock_file_path_that_is_a_link_is_never_written_through(tmp_path, kind):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    lock = lock_path(tmp_path / "t.h5")
    if kind == "symlink":
        lock.symlink_to(precious)
    else:
        os.link(precious, lock)
    with pytest.raises(MdbandError, match="lock file .*(symbolic link|plain file)"):
        OutputLock(tmp_path / "t.h5", "trajectory").acquire()
    assert precious.read_text() == "keep me"
    assert os.path.lexists(lock)  # not ours to remove


def test_a_full_disk_while_locking_names_the_file_and_leaves_no_lock(tmp_path, monkeypatch):
    import mdband.io.locks as locks

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(locks.os, "write", full)
    with pytest.raises(ResourceExhaustedError, match=r"disk full: .*\.final\.xyz\.lock .*final"):
        OutputLock(tmp_path / "run.final.xyz", "final").acquire()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("link", ["symlink", "dangling"])
def test_a_new_output_replaces_a_link_and_never_writes_through_it(tmp_path, link):
    from mdband.errors import OutputExistsError  # noqa: I001 (new in issue 40)
    from mdband.io.files import start_new_file

    target = tmp_path / ("precious.txt" if link == "symlink" else "elsewhere.txt")
    if link == "symlink":
        target.write_text("keep me")
    out = tmp_path / "out.csv"
    out.symlink_to(target)
    with pytest.raises(OutputExistsError, match="out.csv exists"):  # a link counts as a file
        start_new_file(out, overwrite=False, what="log")
    start_new_file(out, overwrite=True, what="log")
    assert not out.is_symlink() and out.read_text() == ""
    assert target.read_text() == "keep me" if link == "symlink" else not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_same_file_follows_links_and_inodes(tmp_path):
    from mdband.io.files import same_file

    a = tmp_path / "a.xyz"
    a.write_text("x")
    (tmp_path / "s.xyz").symlink_to(a)
    os.link(a, tmp_path / "h.xyz")
    assert same_file(a, tmp_path / "s.xyz") and same_file(a, tmp_path / "h.xyz")
    assert not same_file(a, tmp_path / "b.xyz")


# ----------------------------------------------------------------------------- model files


@pytest.fixture
def lj_file(tmp_path):
    path = tmp_path / "lj.mdband"
    lennard_jones_potential().save(path)
    return path


def _edit(path, change, checksum=False):
    """Load a model file, ``change`` its dict, save it back (dropping the checksum unless
    ``checksum``: an older file, or an edit the checksum does not know of)."""
    obj = torch.load(path, weights_only=True)
    change(obj)
    if not checksum:
        obj.pop("checksum", None)
    torch.save(obj, path)
    return path


def _flip_bit(obj, key=None):
    sd = obj["state_dict"]
    key = key or next(k for k, v in sd.items() if v.is_floating_point() and v.numel())
    raw = sd[key].detach().clone().reshape(-1).view(torch.uint8)
    raw[0] ^= 1
    sd[key] = raw.view(sd[key].dtype).reshape(sd[key].shape)


def test_a_flipped_bit_is_caught_by_the_checksum(lj_file):
    assert "checksum" in torch.load(lj_file, weights_only=True)
    _edit(lj_file, _flip_bit, checksum=True)
    with pytest.raises(ModelFileError, match="is damaged: its contents do not match its checksum"):
        load_model(lj_file, device="cpu")


def test_an_older_file_keeps_its_hash_and_a_flipped_bit_changes_it(tmp_path):
    """Files without a checksum (written before it) load with their recorded hash when the
    weights give it; one flipped bit in a weight gives another hash (a resume is refused)."""
    intact = load_model("builtin:emt-cuni", device="cpu", dtype="float64")
    old = tmp_path / "old.mdband"
    intact.save(old)
    _edit(old, lambda obj: None)  # no checksum: as an older mdband wrote it
    assert load_model(old, device="cpu").model_hash == intact.model_hash
    _edit(old, _flip_bit)
    damaged = load_model(old, device="cpu")
    assert damaged.model_hash != intact.model_hash


def test_a_float32_source_saved_in_float64_keeps_its_hash(tmp_path):
    """The recorded hash of a float32 model converted to float64 weights is re-derived."""
    src = load_model("builtin:emt-cuni", device="cpu", dtype="float32")
    sd32 = {k: v.to(torch.float32) for k, v in src.model.state_dict().items()}
    from mdband.result import verified_hash, weights_hash  # noqa: I001

    claimed = weights_hash(src.config, sd32)
    sd64 = {k: v.to(torch.float64) for k, v in sd32.items()}
    assert verified_hash(src.config, sd64, claimed) == claimed
    _flip_bit({"state_dict": sd64})
    assert verified_hash(src.config, sd64, claimed) != claimed


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda o: o.update(format_version="1"), "format version '1' is not an integer"),
        (lambda o: o.update(format_version=7), "newer than this mdband"),
        (lambda o: o.update(cutoff=-1.0), "cutoff -1.0 Å must be a finite positive length"),
        (lambda o: o.update(cutoff=math.nan), "cutoff nan Å must be a finite positive length"),
        (lambda o: o.update(cutoff="8"), "cutoff '8' is not a number"),
        (lambda o: o.update(config={}), "configuration is empty"),
        (lambda o: o.update(type_map=[]), "is not a list of element names"),
        (lambda o: o.update(type_map=["Ar", "Ar"]), "names an element twice"),
        (
            lambda o: o["state_dict"].update(epsilon=torch.zeros(3, dtype=torch.float64)),
            r"weight epsilon has shape \(3,\), but the model's configuration gives it \(\)",
        ),
        (lambda o: o["state_dict"].pop("sigma"), "no weight sigma"),
        (lambda o: o["state_dict"].update(extra=torch.zeros(1)), "weights the model does not"),
        (lambda o: o["config"].pop("sigma"), "cannot build the lj model from its configuration"),
    ],
)
def test_a_bad_model_file_is_one_typed_error(lj_file, change, message):
    _edit(lj_file, change)
    with pytest.raises(ModelFileError, match=message) as info:
        load_model(lj_file, device="cpu")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda o: o.update(type_map=["Ni", "Cu", "Zn"]), r"\(3 types\) differs from the model"),
        (
            lambda o: o.update(cutoff=6.0),
            "cutoff 6.0 Å differs from the configuration's rcut",
        ),
        (
            lambda o: o["state_dict"].update(out_bias=torch.zeros(1, 3, 1, dtype=torch.float64)),
            "out_bias",
        ),
    ],
)
def test_a_sezm_file_that_does_not_fit_its_configuration(tmp_path, change, message):
    path = tmp_path / "m.mdband"
    load_model("builtin:emt-cuni", device="cpu", dtype="float64").save(path)
    _edit(path, change)
    with pytest.raises(ModelFileError, match=message):
        load_model(path, device="cpu")


# ----------------------------------------------------------------------------- trajectories


def _trajectory(path, n=4):
    header = TrajectoryHeader(
        species=np.full(n, 18), masses=np.full(n, 39.95), pbc=np.ones(3, bool), precision="float64"
    )
    with H5MDWriter.create(path, header) as w:
        for step in (0, 10):
            w.append(
                Frame(
                    step,
                    step * 1e-3,
                    np.ones((n, 3)),
                    np.ones((n, 3)),
                    np.ones((n, 3)),
                    np.eye(3) * 10,
                )  # fmt: skip
            )


@pytest.mark.parametrize(
    "dataset, dtype",
    [("particles/all/position/value", "int32"), ("particles/all/velocity/value", "float16")],
)
def test_a_resumed_trajectory_with_a_replaced_dataset_is_refused(tmp_path, dataset, dtype):
    path = tmp_path / "t.h5"
    _trajectory(path)
    with h5py.File(path, "r+") as f:
        old = f[dataset][()]
        del f[dataset]
        f.create_dataset(dataset, data=old.astype(dtype), maxshape=(None, 4, 3))
    before = path.read_bytes()
    with pytest.raises(TrajectoryError, match=f"{dataset} holds {dtype} .* appends float64"):
        H5MDWriter.resume(path, 10)
    assert path.read_bytes() == before


# ----------------------------------------------------------------------------- inputs


def test_a_bad_csv_row_is_named_by_file_and_line(tmp_path):
    path = tmp_path / "run.csv"
    path.write_text("step,time_ps,temperature_K\n0,0.0,300\n10,0.01,abc\n")
    with pytest.raises(ValueError, match=r"run.csv, line 3: 'abc' is not a number"):
        read_csv_log(path)
    path.write_text("step,time_ps,temperature_K\n0,0.0\n")
    with pytest.raises(ValueError, match=r"run.csv, line 2: 2 values where the header names 3"):
        read_csv_log(path)


@pytest.mark.parametrize("frame", [-99, -2, 1, 99])
def test_a_frame_out_of_range_is_one_line(tmp_path, frame):
    ase.io.write(tmp_path / "one.xyz", bulk("Cu"))
    with pytest.raises(StructureError, match=f"no frame {frame}") as info:
        read_structure(tmp_path / "one.xyz", frame)
    assert "StopIteration" not in str(info.value)


def _deepmd_system(path, coord=None):
    """A deepmd npy system of the four files docs/cli.md lists (no energies, no forces)."""
    atoms = bulk("Cu", "fcc", a=3.6, cubic=True)
    path.mkdir()
    (path / "type.raw").write_text("0\n0\n1\n0\n")
    (path / "type_map.raw").write_text("Cu\nNi\n")
    (path / "set.000").mkdir()
    frames = np.stack([atoms.positions, atoms.positions + 0.1]).reshape(2, -1)
    np.save(path / "set.000" / "coord.npy", frames if coord is None else coord)
    np.save(path / "set.000" / "box.npy", np.stack([atoms.cell.array.reshape(-1)] * 2))
    return atoms


def test_a_deepmd_structure_needs_only_the_four_listed_files(tmp_path):
    atoms = _deepmd_system(tmp_path / "sys")
    got = read_structure(tmp_path / "sys", 1)
    assert got.get_chemical_symbols() == ["Cu", "Cu", "Ni", "Cu"]
    np.testing.assert_allclose(got.positions, atoms.positions + 0.1)
    np.testing.assert_allclose(got.cell.array, atoms.cell.array)


def test_a_deepmd_coord_file_of_the_wrong_size_is_one_line(tmp_path):
    _deepmd_system(tmp_path / "sys", coord=np.zeros((2, 10)))
    with pytest.raises(StructureError, match=r"as deepmd/npy: cannot reshape array of size 20"):
        read_structure(tmp_path / "sys", 0)
