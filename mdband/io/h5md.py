"""H5MD 1.1 trajectories: a crash-safe writer (HDF5 SWMR) and a reader.

Layout (one particle group, ``all``; MDAnalysis reads only the first one)::

    h5md/               version=[1, 1]; author/name; creator/{name, version}; modules/units
    particles/all/
        box/            dimension=3, boundary=["periodic"|"none"] x 3
            edges/      {step, time (links), value (T, 3, 3) Å}: rows = cell vectors, every frame
                        (MDAnalysis reads box/edges/value[frame] even for a fixed box)
        position/       {step, time (ps), value (T, N, 3) Å}
        velocity/       {step -> position/step, time -> position/time, value Å ps-1}
        force/          {step, time (links), value}: kJ mol-1 Angstrom-1 by default, kcal
                        mol-1 Angstrom-1 or kJ mol-1 nm-1 (MDAnalysis converts them), or
                        eV Angstrom-1 (MDAnalysis reads it through mdband.io.mdanalysis)
        image/          {step, time (links), value (T, N, 3) int32}: position + image @ edges is
                        the continuous (unwrapped) position; position is folded into the box
        species         (N,) atomic numbers;   mass (N,) u
        magnetic_moment (N, 3) Bohr magneton: a spin model's moments, held fixed (only then)
    observables/<name>/ {step, time (links), value}  (see OBSERVABLES; with a committee also
                        MODEL_DEVI_OBSERVABLES, one value per frame like every observable)
    parameters/mdband   attributes: config_json, model_hash, mdband_version, ...

The file is open only while a batch of frames is written, so a run killed at almost any
moment leaves a closed file that every HDF5 reader (h5py, MDAnalysis, h5dump) opens. During a
batch the file is in SWMR mode and each dataset is flushed as it is written, value datasets
first and the shared ``step`` last, so a kill inside a batch leaves the earlier frames
readable; such a file carries HDF5's "open for write" flag: :class:`H5MDReader` opens it in
SWMR-read mode, and :func:`rewrite_trajectory` (``mdband repair``, ``mdband run --resume``)
rewrites it into a clean file (bounded: see :mod:`mdband.io.repair`). A failed batch (disk
full) is rolled back.
"""

from __future__ import annotations

import getpass
import time
from pathlib import Path

import h5py
import numpy as np

from mdband._version import __version__
from mdband.errors import ResourceExhaustedError
from mdband.io.atomic import atomic_path, is_disk_full, no_space_left
from mdband.io.h5md_format import (
    _CHUNK_BYTES,
    FORCE_UNITS,
    H5MD_VERSION,
    LIBVER,
    MODEL_DEVI_OBSERVABLES,
    OBSERVABLES,
    PARTICLE_UNITS,
    PARTICLES,
    UNITS_SYSTEM,
    Frame,
    TrajectoryError,
    TrajectoryHeader,
    wrap_positions,
)
from mdband.io.h5md_reader import H5MDReader, _text
from mdband.io.repair import is_flagged, repair_trajectory

BATCH_SECONDS = 1.0  # longest time frames wait in memory before they are written

__all__ = [
    "FORCE_UNITS",
    "OBSERVABLES",
    "Frame",
    "H5MDReader",
    "H5MDWriter",
    "TrajectoryError",
    "TrajectoryHeader",
    "check_series",
    "rewrite_trajectory",
]


def _chunks(shape: tuple, itemsize: int) -> tuple:
    rows = max(1, min(1024, _CHUNK_BYTES // max(1, int(np.prod(shape)) * itemsize)))
    return (rows, *shape)


def _timeseries(group: h5py.Group, shape: tuple, dtype, unit: str | None, clock) -> h5py.Dataset:
    """Create ``group/value`` (resizable) and the ``step``/``time`` of ``clock`` (or new ones)."""
    if clock is None:
        group.create_dataset("step", (0,), maxshape=(None,), dtype="i8", chunks=(1024,))
        t = group.create_dataset("time", (0,), maxshape=(None,), dtype="f8", chunks=(1024,))
        t.attrs["unit"] = "ps"
    else:
        group["step"], group["time"] = clock  # hard links: the same datasets
    itemsize = np.dtype(dtype).itemsize
    value = group.create_dataset(
        "value", (0, *shape), maxshape=(None, *shape), dtype=dtype, chunks=_chunks(shape, itemsize)
    )
    if unit is not None:
        value.attrs["unit"] = unit
    return value


def _write_header(f: h5py.File, header: TrajectoryHeader) -> None:
    root = f.create_group("h5md")
    root.attrs["version"] = np.asarray(H5MD_VERSION, dtype=np.int32)
    author = header.author or _default_author()
    root.create_group("author").attrs["name"] = author
    creator = root.create_group("creator")
    creator.attrs["name"] = "mdband"
    creator.attrs["version"] = __version__
    root.create_group("modules/units").attrs["version"] = np.asarray([1, 0], dtype=np.int32)
    root["modules/units"].attrs["system"] = UNITS_SYSTEM
    part = f.create_group(PARTICLES)
    n = header.n_atoms
    part.create_dataset("species", data=np.asarray(header.species, dtype=np.int32))
    mass = part.create_dataset("mass", data=np.asarray(header.masses, dtype=np.float64))
    mass.attrs["unit"] = "u"
    if header.magmoms is not None:
        mm = part.create_dataset("magnetic_moment", data=np.asarray(header.magmoms, np.float64))
        mm.attrs["unit"] = "Bohr magneton"
    box = part.create_group("box")
    box.attrs["dimension"] = np.int32(3)
    boundary = ["periodic" if p else "none" for p in np.asarray(header.pbc, dtype=bool)]
    box.attrs.create("boundary", boundary, dtype=h5py.string_dtype())
    dtype = np.dtype(header.precision)
    value = _timeseries(part.create_group("position"), (n, 3), dtype, "Angstrom", None)
    clock = (value.parent["step"], value.parent["time"])
    if header.force_unit not in FORCE_UNITS:
        raise TrajectoryError(f"force unit must be one of {list(FORCE_UNITS)}")
    units_of = {**PARTICLE_UNITS, "force": header.force_unit}
    for name in ("velocity", "force"):
        _timeseries(part.create_group(name), (n, 3), dtype, units_of[name], clock)
    _timeseries(box.create_group("edges"), (3, 3), np.float64, "Angstrom", clock)
    _timeseries(part.create_group("image"), (n, 3), np.int32, None, clock)
    observables = {**OBSERVABLES, **(MODEL_DEVI_OBSERVABLES if header.model_devi else {})}
    for name, (unit, shape) in observables.items():
        _timeseries(f.create_group(f"observables/{name}"), shape, np.float64, unit, clock)
    params = f.create_group("parameters/mdband")
    for key, val in header.parameters.items():
        params.attrs[key] = val
    params.attrs["precision"] = header.precision
    params.attrs["variable_cell"] = bool(header.variable_cell)


def _default_author() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in some containers
        return "unknown"


class H5MDWriter:
    """Append frames to an H5MD 1.1 file that is open only while a batch of frames is written.

    Frames are collected and written together once the last write is ``batch_seconds`` old
    (default :data:`BATCH_SECONDS`; so each frame is written at once when frames come
    slower than that), and on :meth:`flush` and :meth:`close`. Opening and closing costs
    ~5-10 ms per batch more than appending to a file kept open (2048 atoms, measured on a
    loaded 2-core CPU), at most once per ``batch_seconds``: about 1 % of a run's time in the
    worst case. Use :meth:`create` for a new file and :meth:`resume` to continue one.
    """

    def __init__(self, path, *, batch_seconds: float | None = None) -> None:
        self.path = Path(path)
        self.batch_seconds = float(BATCH_SECONDS if batch_seconds is None else batch_seconds)
        try:
            with h5py.File(self.path, "r") as f:
                check_series(f, self.path)
                part = f[PARTICLES]
                self._written = int(part["position/step"].shape[0])
                self._last = int(part["position/step"][-1]) if self._written else None
                self._force_factor = FORCE_UNITS[_text(part["force/value"].attrs["unit"])]
                self._observables = _observables_in(f)
                # positions are folded into the box with image flags; a file from before
                # image flags (no particles/all/image) keeps continuous positions
                self._pbc = (
                    [_text(b) == "periodic" for b in part["box"].attrs["boundary"]]
                    if "image" in part
                    else None
                )
        except (OSError, KeyError) as exc:
            raise TrajectoryError(f"cannot append to trajectory {self.path}: {exc}") from None
        self._pending: list[Frame] = []
        self._last_write = time.monotonic()
        self._failed: str | None = None
        self._closed = False

    @property
    def n_frames(self) -> int:
        """Frames appended so far (written or waiting for the next batch)."""
        return self._written + len(self._pending)

    @property
    def last_step(self) -> int | None:
        """Step of the last frame appended (written or pending), None before the first one."""
        return self._pending[-1].step if self._pending else self._last

    @property
    def written(self) -> tuple[int, int | None]:
        """``(frames, last step)`` on disk (after :meth:`flush`: all of them)."""
        return self._written, self._last

    @classmethod
    def create(cls, path, header: TrajectoryHeader, **kw) -> H5MDWriter:
        """Start a new file at ``path``.

        An old file there is replaced once the new one is complete (atomic rename; the mode
        follows the umask).
        """
        path = Path(path)
        if header.force_unit not in FORCE_UNITS:
            raise TrajectoryError(f"force unit must be one of {list(FORCE_UNITS)}")
        try:
            with atomic_path(path) as tmp, h5py.File(tmp, "w", libver=LIBVER) as f:
                _write_header(f, header)
        except (OSError, RuntimeError) as exc:
            if is_disk_full(exc) or no_space_left(path.parent):
                raise ResourceExhaustedError(
                    f"disk full: cannot create trajectory {path}"
                ) from None
            raise TrajectoryError(f"cannot create trajectory {path}: {exc}") from None
        return cls(path, **kw)

    @classmethod
    def resume(cls, path, through_step: int, **kw) -> H5MDWriter:
        """Continue ``path`` after dropping every frame with ``step > through_step``.

        A file left flagged by a killed writer is first rewritten into a clean one (bounded,
        see :mod:`mdband.io.repair`); frames of a clean file are dropped in place.
        """
        path = Path(path)
        if is_flagged(path):
            repair_trajectory(path, through_step)
        else:
            _drop_after(path, through_step)
        return cls(path, **kw)

    def append(self, frame: Frame) -> None:
        """Add one frame; the batch is written when the last write is ``batch_seconds`` old."""
        if self._closed:
            raise TrajectoryError(f"trajectory {self.path} is closed")
        last = self.last_step
        if last is not None and frame.step <= last:
            raise TrajectoryError(f"frame step {frame.step} is not after the last step {last}")
        self._pending.append(frame)
        if time.monotonic() - self._last_write >= self.batch_seconds:
            self.flush()

    def flush(self) -> None:
        """Write the waiting frames: open, write (values first, ``step`` last), close.

        A failed batch is rolled back (the file keeps its earlier frames, any reader opens it)
        and raises :class:`~mdband.errors.ResourceExhaustedError` (disk full) or
        :class:`TrajectoryError`; the writer then takes no more frames.
        """
        if not self._pending:
            return
        if self._failed is not None:
            raise TrajectoryError(f"trajectory {self.path} could not be written: {self._failed}")
        frames, self._pending = self._pending, []
        try:
            _write_batch(
                self.path, frames, self._written, self._force_factor, self._observables, self._pbc
            )
        except BaseException as exc:
            self._failed = _short(exc)
            if not isinstance(exc, Exception):  # KeyboardInterrupt and the like
                raise
            # h5py raises OSError or RuntimeError, with the errno in the text
            if is_disk_full(exc) or no_space_left(self.path.parent):
                kept = (
                    "no frame was written"
                    if self._last is None
                    else f"frames through step {self._last} are kept"
                )
                raise ResourceExhaustedError(
                    f"disk full while writing trajectory {self.path} ({kept})"
                ) from None
            if isinstance(exc, (OSError, RuntimeError, ValueError)):
                raise TrajectoryError(
                    f"cannot write trajectory {self.path}: {self._failed}"
                ) from None
            raise
        self._written += len(frames)
        self._last = frames[-1].step
        self._last_write = time.monotonic()

    def close(self) -> None:
        """Write the waiting frames (unless an earlier batch failed) and stop."""
        if self._closed:
            return
        self._closed = True
        if self._failed is None:
            self.flush()

    def __enter__(self) -> H5MDWriter:
        """Return the writer itself."""
        return self

    def __exit__(self, *exc) -> None:
        """Close the writer (see :meth:`close`)."""
        self.close()


def check_series(f: h5py.File, path) -> None:
    """Raise :class:`TrajectoryError` unless the per-frame datasets of ``f`` fit the writer.

    Every per-frame dataset must have the dtype and shape the writer appends (so a resumed run
    never writes values truncated or rounded into a dataset replaced meanwhile): position,
    velocity and force in the file's precision (``parameters/mdband/precision``) with (N, 3)
    per frame, box edges float64 (3, 3), image flags int32 (N, 3), the observables float64 of
    their shapes, integer steps, float times.
    """
    part = f[PARTICLES]
    n = int(part["species"].shape[0]) if "species" in part else None
    params = f["parameters/mdband"].attrs if "parameters/mdband" in f else {}
    precision = _text(params.get("precision", part["position/value"].dtype.name))
    if precision not in ("float32", "float64"):
        raise TrajectoryError(f"trajectory {path} records an unknown precision {precision!r}")
    want: dict[str, tuple[str, tuple[int | None, ...]]] = {
        f"{PARTICLES}/{k}/value": (precision, (n, 3)) for k in PARTICLE_UNITS
    }
    want[f"{PARTICLES}/box/edges/value"] = ("float64", (3, 3))
    if "image" in part:
        want[f"{PARTICLES}/image/value"] = ("int32", (n, 3))
    for name in _observables_in(f):
        obs_shape = {**OBSERVABLES, **MODEL_DEVI_OBSERVABLES}[name][1]
        want[f"observables/{name}/value"] = ("float64", obs_shape)
    for name, (dtype, shape) in want.items():
        ds = f.get(name)
        if not isinstance(ds, h5py.Dataset):
            raise TrajectoryError(f"trajectory {path} lacks the dataset {name}")
        if ds.dtype != np.dtype(dtype) or ds.ndim != 1 + len(shape) or ds.shape[1:] != shape:
            raise TrajectoryError(
                f"trajectory {path}: dataset {name} holds {ds.dtype} of shape {ds.shape}, but "
                f"the run appends {dtype} of shape (frames, {', '.join(map(str, shape))}); "
                "it cannot continue this file"
            )
    for name, kind in (("step", "iu"), ("time", "f")):
        ds = part.get(f"position/{name}")
        if not isinstance(ds, h5py.Dataset) or ds.dtype.kind not in kind or ds.ndim != 1:
            raise TrajectoryError(f"trajectory {path}: dataset position/{name} is not a series")


def _open_for_append(path: Path) -> h5py.File:
    try:
        return h5py.File(path, "r+", libver=LIBVER)
    except OSError as exc:
        if "unable to lock file" not in str(exc):
            raise
    # a plain reader holds HDF5's own lock: write anyway (our lock file keeps other writers
    # out; HDF5 still refuses a file another program opened for writing)
    return h5py.File(path, "r+", libver=LIBVER, locking=False)


def _observables_in(f: h5py.File) -> list[str]:
    """List the observables of the file (the committee's deviations only where it has them)."""
    return [k for k in (*OBSERVABLES, *MODEL_DEVI_OBSERVABLES) if f"observables/{k}" in f]


def _series(f: h5py.File, observables: list[str]) -> list[h5py.Dataset]:
    """Return the datasets of one frame in write order: values first, ``time``, ``step`` last."""
    part = f[PARTICLES]
    out = [part[f"{name}/value"] for name in PARTICLE_UNITS]
    out.append(part["box/edges/value"])
    if "image" in part:
        out.append(part["image/value"])
    out += [f[f"observables/{name}/value"] for name in observables]
    return [*out, part["position/time"], part["position/step"]]


def _write_batch(path: Path, frames: list[Frame], row: int, force_factor, observables, pbc) -> None:
    """Append ``frames`` at ``row``.

    ``pbc`` None: the file has no image flags (positions are written as they are), else
    positions are folded along its periodic axes.
    """
    if pbc is None:
        positions, images = [fr.positions for fr in frames], []
    else:
        folded = [wrap_positions(fr.positions, fr.cell, pbc) for fr in frames]
        positions, images = [w for w, _ in folded], [[i for _, i in folded]]
    columns = [
        positions,
        [fr.velocities for fr in frames],
        [np.asarray(fr.forces, dtype=np.float64) * force_factor for fr in frames],
        [fr.cell for fr in frames],
        *images,
        *([_observable(fr, name) for fr in frames] for name in observables),
        [fr.time for fr in frames],
        [fr.step for fr in frames],
    ]
    f = _open_for_append(path)
    try:
        f.swmr_mode = True
        datasets = _series(f, observables)
        try:
            for ds, values in zip(datasets, columns):
                _put_rows(ds, row, np.asarray(values))
        except BaseException:
            _truncate(datasets, row)
            raise
    finally:
        try:
            f.close()
        except Exception:  # noqa: BLE001 - the write error above is the one to report
            pass


def _observable(frame: Frame, name: str):
    """Return the frame's value of an observable (NaN of its shape when the frame has none)."""
    value = frame.observables.get(name)
    shape = {**OBSERVABLES, **MODEL_DEVI_OBSERVABLES}[name][1]
    return np.full(shape, np.nan) if value is None else value


def _put_rows(ds: h5py.Dataset, row: int, values: np.ndarray) -> None:
    ds.resize(row + len(values), axis=0)
    ds[row:] = values
    ds.flush()


def _truncate(datasets: list[h5py.Dataset], rows: int) -> None:
    """Best-effort roll back to ``rows`` frames, the shared ``step`` first."""
    for ds in reversed(datasets):
        try:
            if ds.shape[0] > rows:
                ds.resize(rows, axis=0)
                ds.flush()
        except Exception:  # noqa: BLE001 - the file may be unwritable (disk full)
            pass


def _drop_after(path: Path, through_step: int) -> None:
    """Drop the frames after ``through_step`` of a clean file, in place.

    Also drops the rows of a batch that failed without being rolled back.
    """
    with h5py.File(path, "r") as f:
        steps = f[f"{PARTICLES}/position/step"][()]
        observables = _observables_in(f)
        longest = max(ds.shape[0] for ds in _series(f, observables))
    keep = int(np.searchsorted(steps, through_step, "right"))
    if keep == len(steps) == longest:
        return
    f = _open_for_append(path)
    try:
        f.swmr_mode = True
        _truncate(_series(f, observables), keep)
    finally:
        f.close()


def rewrite_trajectory(path, through_step: int | None = None) -> None:
    """Rewrite ``path`` in place as a cleanly closed file (keeping steps <= ``through_step``).

    Use it on a file left by a killed run so tools that cannot open SWMR files read it
    (``mdband repair``; see :func:`mdband.io.repair.repair_trajectory`).
    """
    repair_trajectory(path, through_step)


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__
