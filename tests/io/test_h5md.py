"""H5MD writer/reader: schema, hard links, units, round trip, crash safety, truncation."""

import errno
import os
import signal
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

from mdband.io.h5md import (
    OBSERVABLES,
    Frame,
    H5MDReader,
    H5MDWriter,
    TrajectoryError,
    TrajectoryHeader,
    rewrite_trajectory,
)

N = 7


def header(variable_cell=False, precision="float32", force_unit="eV Angstrom-1"):
    return TrajectoryHeader(
        species=np.array([18] * 5 + [36] * 2),
        masses=np.array([39.948] * 5 + [83.798] * 2),
        pbc=np.array([True, True, False]),
        variable_cell=variable_cell,
        parameters={"model_hash": "abc123", "config_json": '{"steps": 10}', "timestep_fs": 2.0},
        precision=precision,
        force_unit=force_unit,
        author="tester",
    )


def frame(step, rng):
    cell = np.diag([10.0, 11.0, 12.0]) * (1 + 0.01 * step)
    obs = {
        name: (rng.normal(size=shape) if shape else float(rng.normal()))
        for name, (_, shape) in OBSERVABLES.items()
    }
    return Frame(
        step=step,
        time=step * 0.002,
        positions=rng.normal(size=(N, 3)),
        velocities=rng.normal(size=(N, 3)),
        forces=rng.normal(size=(N, 3)),
        cell=cell,
        observables=obs,
    )


def write(path, steps, **kw):
    rng = np.random.default_rng(0)
    frames = [frame(s, rng) for s in steps]
    with H5MDWriter.create(path, header(**kw)) as w:
        for fr in frames:
            w.append(fr)
    return frames


def test_schema_links_and_units(tmp_path):
    path = tmp_path / "t.h5"
    write(path, [0, 5, 10], variable_cell=True, force_unit="kJ mol-1 Angstrom-1")
    with h5py.File(path, "r") as f:
        assert list(f["h5md"].attrs["version"]) == [1, 1]
        assert f["h5md/author"].attrs["name"] == "tester"
        assert f["h5md/creator"].attrs["name"] == "mdband"
        assert "version" in f["h5md/creator"].attrs
        assert list(f["particles"]) == ["all"]
        part = f["particles/all"]
        box = part["box"]
        assert box.attrs["dimension"] == 3
        assert [b.decode() if isinstance(b, bytes) else b for b in box.attrs["boundary"]] == [
            "periodic",
            "periodic",
            "none",
        ]
        pos = part["position"]
        assert pos["step"].dtype.kind == "i" and pos["time"].attrs["unit"] == "ps"
        units = {
            "position": "Angstrom",
            "velocity": "Angstrom ps-1",
            "force": "kJ mol-1 Angstrom-1",  # a force unit MDAnalysis knows
        }
        elements = [part[name] for name in units] + [box["edges"]]
        elements += [f[f"observables/{name}"] for name in OBSERVABLES]
        for el in elements:
            for key in ("step", "time"):
                link = el.get(key, getlink=True)
                assert isinstance(link, h5py.HardLink)
                assert el[key] == pos[key], f"{el.name}/{key} is not position's {key}"
            assert "unit" in el["value"].attrs, el.name
            assert el["time"].attrs["unit"] == "ps"
        for name, unit in units.items():
            assert part[f"{name}/value"].attrs["unit"] == unit
            assert part[f"{name}/value"].shape == (3, N, 3)
        assert box["edges/value"].shape == (3, 3, 3)
        assert box["edges/value"].attrs["unit"] == "Angstrom"
        for name, (unit, shape) in OBSERVABLES.items():
            assert f[f"observables/{name}/value"].attrs["unit"] == unit
            assert f[f"observables/{name}/value"].shape == (3, *shape)
        assert list(part["species"][()]) == [18] * 5 + [36] * 2
        assert part["mass"].attrs["unit"] == "u"
        params = f["parameters/mdband"].attrs
        assert params["model_hash"] == "abc123"
        assert list(pos["step"][()]) == [0, 5, 10]


def test_round_trip(tmp_path):
    path = tmp_path / "t.h5"
    frames = write(path, [0, 3, 6, 9], precision="float64")
    with H5MDReader(path) as r:
        assert not r.recovered
        assert len(r) == 4 and r.n_atoms == N
        np.testing.assert_array_equal(r.steps, [0, 3, 6, 9])
        np.testing.assert_allclose(r.times, [0, 0.006, 0.012, 0.018], rtol=0, atol=1e-15)
        np.testing.assert_array_equal(r.pbc, [True, True, False])
        assert not r.variable_cell
        for got, want in zip(r, frames):
            # stored folded into the box with image flags: back to within rounding
            np.testing.assert_allclose(got.positions, want.positions, rtol=0, atol=1e-13)
            np.testing.assert_array_equal(got.velocities, want.velocities)
            np.testing.assert_array_equal(got.forces, want.forces)
            np.testing.assert_array_equal(got.cell, want.cell)
            for name in OBSERVABLES:
                np.testing.assert_array_equal(got.observables[name], want.observables[name])
        atoms = r.to_atoms(-1)
        assert atoms.get_chemical_symbols()[-1] == "Kr"
        np.testing.assert_allclose(atoms.get_masses()[0], 39.948)
        np.testing.assert_array_equal(atoms.get_forces(), frames[-1].forces)
        assert r.parameters["timestep_fs"] == 2.0


def test_force_unit_conversion(tmp_path):
    path = tmp_path / "t.h5"
    frames = write(path, [0, 1], precision="float64", force_unit="kJ mol-1 Angstrom-1")
    with h5py.File(path, "r") as f:
        stored = f["particles/all/force/value"][1]
    np.testing.assert_allclose(stored, frames[1].forces * 96.4853321, rtol=1e-8)
    with H5MDReader(path) as r:
        assert r.force_unit == "kJ mol-1 Angstrom-1"
        np.testing.assert_allclose(r.frame(1).forces, frames[1].forces, rtol=1e-14, atol=0)
    with pytest.raises(TrajectoryError, match="force unit"):
        H5MDWriter.create(tmp_path / "bad.h5", header(force_unit="N"))


def test_float32_frames_and_variable_cell(tmp_path):
    path = tmp_path / "t.h5"
    frames = write(path, [0, 1], variable_cell=True)
    with H5MDReader(path) as r:
        assert r.variable_cell
        got = r.frame(1)
        stored = r.file["particles/all/position/value"]
        assert stored.dtype == np.float32
        np.testing.assert_allclose(got.positions, frames[1].positions, rtol=0, atol=2e-6)
        np.testing.assert_array_equal(got.cell, frames[1].cell)
        with pytest.raises(IndexError):
            r.frame(2)


def test_steps_must_increase(tmp_path):
    rng = np.random.default_rng(1)
    with H5MDWriter.create(tmp_path / "t.h5", header()) as w:
        w.append(frame(4, rng))
        with pytest.raises(TrajectoryError, match="not after"):
            w.append(frame(4, rng))


def test_resume_drops_later_frames(tmp_path):
    path = tmp_path / "t.h5"
    frames = write(path, [0, 5, 10, 15, 20])
    rng = np.random.default_rng(9)
    extra = frame(15, rng)
    with H5MDWriter.resume(path, 10) as w:
        assert w.n_frames == 3 and w.last_step == 10
        w.append(extra)
    with H5MDReader(path) as r:
        np.testing.assert_array_equal(r.steps, [0, 5, 10, 15])
        np.testing.assert_array_equal(r.frame(1).forces, frames[1].forces.astype(np.float32))
        np.testing.assert_array_equal(r.frame(3).forces, extra.forces.astype(np.float32))
        assert r.parameters["model_hash"] == "abc123"
    assert sorted(os.listdir(tmp_path)) == ["t.h5"]  # no temporary left behind


def test_not_a_trajectory(tmp_path):
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not hdf5 at all")
    with pytest.raises(TrajectoryError, match="cannot read"):
        H5MDReader(bad)
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = 1
    with pytest.raises(TrajectoryError, match="not an H5MD"):
        H5MDReader(tmp_path / "other.h5")
    with pytest.raises(TrajectoryError, match="does not exist"):
        H5MDReader(tmp_path / "missing.h5")


_KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    sys.path.insert(0, sys.argv[2])
    from test_h5md import frame, header
    import mdband.io.h5md as h5md
    target, when = sys.argv[3], sys.argv[4]
    rng = np.random.default_rng(0)
    w = h5md.H5MDWriter.create(sys.argv[1], header(variable_cell=True), batch_seconds=1e9)
    for step in range(6):
        w.append(frame(step, rng))
        w.flush()
    put = h5md._put_rows

    def put_then_die(ds, row, values):
        if when == "before" and ds.name.endswith(target):
            os.kill(os.getpid(), signal.SIGKILL)
        put(ds, row, values)
        if when == "after" and ds.name.endswith(target):
            os.kill(os.getpid(), signal.SIGKILL)

    h5md._put_rows = put_then_die
    for step in range(6, 9):  # one batch of three frames, or (target "none") never written
        w.append(frame(step, rng))
    if target != "none":
        w.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _killed_writer(path, target, when="before"):
    here = os.path.dirname(__file__)
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(path), here, target, when],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    rng = np.random.default_rng(0)
    return [frame(s, rng) for s in range(9)]


def test_killed_between_batches_leaves_a_closed_file(tmp_path):
    path = tmp_path / "t.h5"
    _killed_writer(path, "none")  # killed with three frames waiting in memory
    with h5py.File(path, "r") as f:  # any HDF5 reader opens it
        assert list(f["particles/all/position/step"][()]) == list(range(6))
        assert f["particles/all/force/value"].shape == (6, N, 3)
    with H5MDReader(path) as r:
        assert not r.recovered and len(r) == 6


@pytest.mark.parametrize(
    "target, when, kept",
    [
        ("position/value", "before", 6),
        ("observables/stress/value", "after", 6),
        ("position/step", "before", 6),
        ("position/step", "after", 9),  # the batch is complete, only the close is missing
    ],
)
def test_killed_inside_a_batch_is_recovered(tmp_path, target, when, kept):
    path = tmp_path / "t.h5"
    expected = _killed_writer(path, target, when)
    with pytest.raises(OSError, match="already open for write"):
        h5py.File(path, "r")  # what MDAnalysis and HDF5's tools meet
    with H5MDReader(path) as r:
        assert r.recovered
        np.testing.assert_array_equal(r.steps, np.arange(kept))
        for got, want in zip(r, expected):
            np.testing.assert_allclose(got.positions, want.positions, rtol=0, atol=2e-6)
            np.testing.assert_array_equal(got.cell, want.cell)
    old_umask = os.umask(0o027)
    try:
        rewrite_trajectory(path)
    finally:
        os.umask(old_umask)
    assert os.stat(path).st_mode & 0o777 == 0o640  # the umask's mode, not mkstemp's 0600
    assert sorted(os.listdir(tmp_path)) == ["t.h5"]
    with h5py.File(path, "r") as f:  # a plain (non-SWMR) open works after the rewrite
        part = f["particles/all"]
        assert part["position/value"].shape == (kept, N, 3)
        assert part["velocity/step"] == part["position/step"]  # hard links kept
        assert part["force/value"].attrs["unit"] == "eV Angstrom-1"
    with H5MDWriter.resume(path, 100) as w:  # and it can be continued
        w.append(frame(20, np.random.default_rng(3)))
    with H5MDReader(path) as r:
        assert list(r.steps) == [*range(kept), 20] and not r.recovered


def test_frames_wait_for_their_batch(tmp_path):
    path = tmp_path / "t.h5"
    rng = np.random.default_rng(0)
    w = H5MDWriter.create(path, header(), batch_seconds=1e9)
    w.append(frame(0, rng))
    w.append(frame(5, rng))
    assert w.n_frames == 2 and w.last_step == 5 and w.written == (0, None)
    with H5MDReader(path) as r:
        assert len(r) == 0
    w.flush()
    assert w.written == (2, 5)
    w.append(frame(7, rng))
    w.close()  # writes the waiting frame
    with H5MDReader(path) as r:
        assert list(r.steps) == [0, 5, 7]
    eager = H5MDWriter.create(tmp_path / "e.h5", header(), batch_seconds=0)
    eager.append(frame(0, rng))
    assert eager.written == (1, 0)  # written at once
    eager.close()


_HDF5_ENOSPC = (  # how h5py reports a real full disk (seen on a 1.3 MB tmpfs)
    "Unable to flush dataset (file write failed: time = Tue Dec 1 11:11:40 2026 , filename = "
    "'t.h5', file descriptor = 5, errno = 28, error message = 'No space left on device')"
)


@pytest.mark.parametrize(
    "failure",
    [OSError(errno.ENOSPC, "No space left on device"), RuntimeError(_HDF5_ENOSPC)],
    ids=["oserror", "hdf5-runtimeerror"],
)
def test_a_failed_batch_is_rolled_back(tmp_path, monkeypatch, failure):
    import mdband.io.h5md as h5md
    from mdband.errors import ResourceExhaustedError

    path = tmp_path / "t.h5"
    rng = np.random.default_rng(0)
    w = H5MDWriter.create(path, header(), batch_seconds=1e9)
    w.append(frame(0, rng))
    w.flush()
    put = h5md._put_rows

    def disk_full_at_step(ds, row, values):
        if ds.name.endswith("position/step"):
            raise failure
        put(ds, row, values)

    monkeypatch.setattr(h5md, "_put_rows", disk_full_at_step)
    w.append(frame(1, rng))
    with pytest.raises(ResourceExhaustedError, match="disk full.*through step 0 are kept"):
        w.flush()
    w.close()  # no second attempt, no error
    with h5py.File(path, "r") as f:  # closed, and every time series is one frame long
        for name in ("position", "velocity", "force", "box/edges"):
            assert f[f"particles/all/{name}/value"].shape[0] == 1
        assert f["observables/temperature/value"].shape == (1,)
    monkeypatch.setattr(h5md, "_put_rows", put)
    with pytest.raises(TrajectoryError, match="closed"):
        w.append(frame(2, rng))


_READER = (
    "import h5py, sys, time; f = h5py.File(sys.argv[1], 'r'); print('open', flush=True); "
    "time.sleep(30)"
)


def test_a_plain_reader_does_not_block_the_writer(tmp_path):
    path = tmp_path / "t.h5"
    rng = np.random.default_rng(0)
    w = H5MDWriter.create(path, header(), batch_seconds=0)
    w.append(frame(0, rng))
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(path)], stdout=subprocess.PIPE)
    try:
        assert reader.stdout.readline().strip() == b"open"  # it holds HDF5's file lock
        w.append(frame(1, rng))
        w.close()
    finally:
        reader.kill()
        reader.wait()
    with H5MDReader(path) as r:
        assert list(r.steps) == [0, 1]


def test_create_replaces_only_a_complete_file(tmp_path, monkeypatch):
    import mdband.io.h5md as h5md

    path = tmp_path / "t.h5"
    write(path, [0, 5])
    old = path.read_bytes()

    def broken(f, header):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(h5md, "_write_header", broken)
    with pytest.raises(TrajectoryError, match="cannot create"):
        H5MDWriter.create(path, header())
    assert path.read_bytes() == old and sorted(os.listdir(tmp_path)) == ["t.h5"]
