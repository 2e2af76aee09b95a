"""Checkpoint file: exact round trip, atomic replacement, corruption detection."""

import errno
import os

import h5py
import numpy as np
import pytest

from mdband.io.checkpoint import Checkpoint, CheckpointError, read_checkpoint, write_checkpoint


def sample(step=40):
    rng = np.random.default_rng(step)
    gen = np.random.Generator(np.random.PCG64(123))
    gen.standard_normal(5)
    n = 6
    return Checkpoint(
        step=step,
        time=step * 0.0005,
        numbers=np.array([18] * n),
        masses=np.full(n, 39.948),
        positions=rng.normal(size=(n, 3)) * 5,
        momenta=rng.normal(size=(n, 3)),
        cell=np.diag([10.0, 10.5, 11.0]) + 0.1,
        pbc=np.array([True, True, True]),
        config={"ensemble": "npt-mtk", "timestep": 0.5, "seed": 7, "tdamp": None},
        model_hash="f" * 64,
        integrator={"_thermostat._eta": rng.normal(size=3), "_p_eps": np.float64(0.25)},
        rng={"thermostat": gen.bit_generator.state},
        neighbours={
            "positions": rng.normal(size=(n, 3)),
            "cell": np.eye(3),
            "pbc": np.ones(3, dtype=bool),
        },
    )


def test_round_trip_is_exact(tmp_path):
    path = tmp_path / "run.ckpt"
    ck = sample()
    write_checkpoint(path, ck)
    got = read_checkpoint(path)
    assert got.step == ck.step and got.time == ck.time and got.model_hash == ck.model_hash
    assert got.config == ck.config
    for name in ("numbers", "masses", "positions", "momenta", "cell", "pbc"):
        np.testing.assert_array_equal(getattr(got, name), getattr(ck, name))
        assert (
            getattr(got, name).tobytes()
            == np.asarray(getattr(ck, name)).astype(getattr(got, name).dtype).tobytes()
        )
    for name, value in ck.integrator.items():
        np.testing.assert_array_equal(got.integrator[name], value)
    for name, value in ck.neighbours.items():
        np.testing.assert_array_equal(got.neighbours[name], value)
    # the restored random generator continues the same stream
    a = np.random.Generator(np.random.PCG64())
    a.bit_generator.state = got.rng["thermostat"]
    b = np.random.Generator(np.random.PCG64())
    b.bit_generator.state = ck.rng["thermostat"]
    np.testing.assert_array_equal(a.standard_normal(8), b.standard_normal(8))
    np.testing.assert_allclose(got.velocities, ck.momenta / 39.948, rtol=1e-15)
    with h5py.File(path, "r") as f:
        np.testing.assert_allclose(f["velocities"][()], ck.momenta / 39.948, rtol=1e-15)


def test_replacement_is_atomic_and_clean(tmp_path):
    path = tmp_path / "run.ckpt"
    write_checkpoint(path, sample(10))
    write_checkpoint(path, sample(20))
    assert read_checkpoint(path).step == 20
    assert os.listdir(tmp_path) == ["run.ckpt"]


def test_failed_write_keeps_previous(tmp_path):
    path = tmp_path / "run.ckpt"
    write_checkpoint(path, sample(10))
    bad = sample(20)
    bad.config = {"not json": object()}
    with pytest.raises(TypeError):
        write_checkpoint(path, bad)
    assert read_checkpoint(path).step == 10
    assert os.listdir(tmp_path) == ["run.ckpt"]


def test_corrupt_files_are_rejected(tmp_path):
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"\x89HDF garbage" * 10)
    with pytest.raises(CheckpointError, match="corrupt or unreadable"):
        read_checkpoint(garbage)
    with pytest.raises(CheckpointError, match="does not exist"):
        read_checkpoint(tmp_path / "missing.ckpt")
    path = tmp_path / "run.ckpt"
    write_checkpoint(path, sample())
    with h5py.File(path, "r+") as f:  # flip one coordinate: the checksum catches it
        f["positions"][0, 0] += 1e-12
    with pytest.raises(CheckpointError, match="checksum"):
        read_checkpoint(path)
    truncated = tmp_path / "truncated.ckpt"
    write_checkpoint(truncated, sample())
    data = truncated.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError):
        read_checkpoint(truncated)
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = 1
    with pytest.raises(CheckpointError, match="not an mdband checkpoint"):
        read_checkpoint(other)


def test_newer_format_is_refused(tmp_path):
    path = tmp_path / "run.ckpt"
    write_checkpoint(path, sample())
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = 99
    with pytest.raises(CheckpointError, match="newer"):
        read_checkpoint(path)


def test_outputs_record_round_trips_and_is_checksummed(tmp_path):
    path = tmp_path / "run.ckpt"
    ck = sample()
    ck.outputs = {
        "run_id": "ab" * 16,
        "trajectory": {"path": str(tmp_path / "t.h5"), "frames": 9, "last_step": 40},
        "log": {"path": str(tmp_path / "r.log"), "size": 1234},
    }
    write_checkpoint(path, ck)
    assert read_checkpoint(path).outputs == ck.outputs
    with h5py.File(path, "r+") as f:
        f.attrs["outputs_json"] = f.attrs["outputs_json"].replace('"frames": 9', '"frames": 8')
    with pytest.raises(CheckpointError, match="checksum"):
        read_checkpoint(path)


def _fail_inside_write(monkeypatch, exc):
    import mdband.io.checkpoint as checkpoint

    write_body = checkpoint._write_body

    def broken(f, ck):
        write_body(f, ck)  # most of the file is written, then the disk fills up
        raise exc

    monkeypatch.setattr(checkpoint, "_write_body", broken)


@pytest.mark.parametrize(
    "exc, error, message",
    [
        (OSError(errno.ENOSPC, "No space left on device"), "exhausted", "disk full"),
        (OSError(errno.EIO, "Input/output error"), "checkpoint", "cannot write checkpoint"),
    ],
)
def test_failed_write_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, exc, error, message):
    from mdband.errors import ResourceExhaustedError

    path = tmp_path / "run.ckpt"
    write_checkpoint(path, sample(40))
    before = path.read_bytes()
    _fail_inside_write(monkeypatch, exc)
    kind = ResourceExhaustedError if error == "exhausted" else CheckpointError
    with pytest.raises(kind, match=message):
        write_checkpoint(path, sample(50))
    assert path.read_bytes() == before and read_checkpoint(path).step == 40
    assert os.listdir(tmp_path) == ["run.ckpt"]  # no temporary file left


def test_a_file_that_does_not_read_back_is_not_installed(tmp_path, monkeypatch):
    """HDF5 may report a failed write only at close (or not at all): the new file is read
    back before it replaces the old one."""
    import mdband.io.checkpoint as checkpoint

    path = tmp_path / "run.ckpt"
    write_checkpoint(path, sample(40))
    write_body = checkpoint._write_body

    def silently_short(f, ck):
        write_body(f, ck)
        del f["momenta"]  # a dataset lost without an error

    monkeypatch.setattr(checkpoint, "_write_body", silently_short)
    with pytest.raises(CheckpointError, match="does not read back"):
        write_checkpoint(path, sample(50))
    assert read_checkpoint(path).step == 40 and os.listdir(tmp_path) == ["run.ckpt"]
