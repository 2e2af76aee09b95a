"""H5MD 1.1 trajectories: a crash-safe writer (HDF5 SWMR) and a reader.

Layout (one particle group, ``all``; MDAnalysis reads only the first one)::

    h5md/               version=[1, 1]; author/name; creator/{name, version}; modules/units
    particles/all/
        box/            dimension=3, boundary=["periodic"|"none"] x 3
            edges/      {step, time (links), value (T, 3, 3) Å}: rows = cell vectors, every frame
                        (MDAnalysis reads box/edges/value[frame] even for a fixed box)
        position/       {step, time (ps), value (T, N, 3) Å}
        velocity/       {step -> position/step, time -> position/time, value Å ps-1}
        force/          {step, time (links), value}: kJ mol-1 Angstrom-1 by default, which
                        MDAnalysis reads (it knows no eV-based force unit), or eV Angstrom-1
        image/          {step, time (links), value (T, N, 3) int32}: position + image @ edges is
                        the continuous (unwrapped) position; position is folded into the box
        species         (N,) atomic numbers;   mass (N,) u
    observables/<name>/ {step, time (links), value}  (see OBSERVABLES; with a committee also
                        MODEL_DEVI_OBSERVABLES, one value per frame like every observable)
    parameters/mdband   attributes: config_json, model_hash, mdband_version, ...

Every frame is flushed as it is written, value datasets first and the shared ``step`` last,
so after a crash a reader sees only complete frames. A file left by a killed writer still
carries HDF5's "open for write" flag: :class:`H5MDReader` opens it in SWMR-read mode, and
:func:`rewrite_trajectory` writes a clean copy any HDF5 tool can open.
"""

from __future__ import annotations

import getpass
import os
import tempfile
from pathlib import Path

import h5py
import numpy as np

from mdband._version import __version__
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

__all__ = [
    "FORCE_UNITS",
    "OBSERVABLES",
    "Frame",
    "H5MDReader",
    "H5MDWriter",
    "TrajectoryError",
    "TrajectoryHeader",
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
    """Append frames to an H5MD 1.1 file in SWMR mode (each frame flushed when written).

    Use :meth:`create` for a new file and :meth:`resume` to continue an existing one.
    """

    def __init__(self, f: h5py.File, path: Path) -> None:
        self._f = f
        self.path = path
        part = f[PARTICLES]
        self._step = part["position/step"]
        self._time = part["position/time"]
        self._values = [part[f"{name}/value"] for name in PARTICLE_UNITS]
        self._force_factor = FORCE_UNITS[_text(part["force/value"].attrs["unit"])]
        self._edges = part["box/edges/value"]
        self._image = part["image/value"]
        self._pbc = [_text(b) == "periodic" for b in part["box"].attrs["boundary"]]
        names = [*OBSERVABLES, *MODEL_DEVI_OBSERVABLES]
        self._obs = {n: f[f"observables/{n}/value"] for n in names if f"observables/{n}" in f}
        f.swmr_mode = True

    @property
    def n_frames(self) -> int:
        return int(self._step.shape[0])

    @property
    def last_step(self) -> int | None:
        return int(self._step[-1]) if self.n_frames else None

    @classmethod
    def create(cls, path, header: TrajectoryHeader) -> H5MDWriter:
        """Start a new file at ``path`` (replacing any file there)."""
        path = Path(path)
        try:
            f = h5py.File(path, "w", libver=LIBVER)
        except OSError as exc:
            raise TrajectoryError(f"cannot create trajectory {path}: {exc}") from None
        _write_header(f, header)
        return cls(f, path)

    @classmethod
    def resume(cls, path, through_step: int) -> H5MDWriter:
        """Continue ``path`` after dropping every frame with ``step > through_step``."""
        path = Path(path)
        f = _rewrite(path, through_step)
        return cls(f, path)

    def append(self, frame: Frame) -> None:
        """Write one frame and flush it (values first, the shared step counter last)."""
        last = self.last_step
        if last is not None and frame.step <= last:
            raise TrajectoryError(f"frame step {frame.step} is not after the last step {last}")
        n = self.n_frames
        forces = np.asarray(frame.forces, dtype=np.float64) * self._force_factor
        wrapped, image = wrap_positions(frame.positions, frame.cell, self._pbc)
        _put(self._image, n, image)
        arrays = (wrapped, frame.velocities, forces)
        for ds, arr in zip(self._values, arrays):
            _put(ds, n, arr)
        _put(self._edges, n, frame.cell)
        for name, ds in self._obs.items():
            _put(ds, n, frame.observables.get(name, np.nan))
        _put(self._time, n, frame.time)
        _put(self._step, n, frame.step)

    def close(self) -> None:
        if self._f.id.valid:
            self._f.close()

    def __enter__(self) -> H5MDWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _put(ds: h5py.Dataset, row: int, value) -> None:
    ds.resize(row + 1, axis=0)
    ds[row] = value
    ds.flush()


def _copy_rows(src: h5py.Dataset, dst: h5py.Dataset, n: int, block: int = 256) -> None:
    dst.resize(n, axis=0)
    for start in range(0, n, block):
        stop = min(n, start + block)
        dst[start:stop] = src[start:stop]


def _rewrite(path: Path, through_step: int | None) -> h5py.File:
    """Copy ``path`` (frames with step <= through_step) to a clean file that replaces it.

    Returns the new file, open for writing (not yet in SWMR mode).
    """
    with H5MDReader(path) as old:
        header = old.header()
        steps = old.steps
        n_keep = (
            len(steps)
            if through_step is None
            else int(np.searchsorted(steps, through_step, "right"))
        )
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        f = None
        try:
            f = h5py.File(tmp, "w", libver=LIBVER)
            _write_header(f, header)
            names = [f"{PARTICLES}/position/{k}" for k in ("step", "time")]
            names += [f"{PARTICLES}/{k}/value" for k in (*PARTICLE_UNITS, "box/edges")]
            names += [
                f"observables/{k}/value"
                for k in (*OBSERVABLES, *MODEL_DEVI_OBSERVABLES)
                if f"observables/{k}" in old.file
            ]
            if f"{PARTICLES}/image" in old.file:
                names.append(f"{PARTICLES}/image/value")
            else:  # a file from before image flags: its positions are continuous
                f[f"{PARTICLES}/image/value"].resize(n_keep, axis=0)
            for name in names:
                _copy_rows(old.file[name], f[name], n_keep)
            f.flush()
            os.fsync(f.id.get_vfd_handle())
        except BaseException:
            if f is not None and f.id.valid:
                f.close()
            os.unlink(tmp)
            raise
    os.replace(tmp, path)
    return f


def rewrite_trajectory(path, through_step: int | None = None) -> None:
    """Rewrite ``path`` in place as a cleanly closed file (keeping steps <= ``through_step``).

    Use it on a file left by a killed run so tools that cannot open SWMR files read it.
    """
    _rewrite(Path(path), through_step).close()
