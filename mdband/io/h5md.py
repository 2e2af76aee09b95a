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
        species         (N,) atomic numbers;   mass (N,) u
    observables/<name>/ {step, time (links), value}  (see OBSERVABLES)
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
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
from ase import units

from mdband._version import __version__
from mdband.errors import MdbandError

H5MD_VERSION = (1, 1)
LIBVER = ("v110", "v110")  # lowest format with SWMR; readable by HDF5 >= 1.10
PARTICLES = "particles/all"
PARTICLE_UNITS = {"position": "Angstrom", "velocity": "Angstrom ps-1", "force": None}
# force unit in the file -> its value for 1 eV/Å
FORCE_UNITS = {"kJ mol-1 Angstrom-1": units.mol / units.kJ, "eV Angstrom-1": 1.0}
# name -> (unit, per-frame shape)
OBSERVABLES = {
    "potential_energy": ("eV", ()),
    "kinetic_energy": ("eV", ()),
    "total_energy": ("eV", ()),
    "conserved_energy": ("eV", ()),
    "temperature": ("K", ()),
    "pressure": ("GPa", ()),
    "volume": ("Angstrom+3", ()),
    "stress": ("GPa", (3, 3)),
}
_CHUNK_BYTES = 1 << 18


class TrajectoryError(MdbandError):
    """A trajectory file is unreadable, not an mdband H5MD file, or does not fit the run."""


@dataclass
class TrajectoryHeader:
    """What stays fixed over a trajectory."""

    species: np.ndarray
    masses: np.ndarray
    pbc: np.ndarray
    variable_cell: bool = False
    parameters: dict = field(default_factory=dict)
    precision: str = "float32"
    force_unit: str = "kJ mol-1 Angstrom-1"
    author: str | None = None

    @property
    def n_atoms(self) -> int:
        return int(len(self.species))


@dataclass
class Frame:
    """One frame: Å, Å/ps, eV/Å (converted to the file's force unit), ps, cell rows in Å;
    observables in the units of :data:`OBSERVABLES`."""

    step: int
    time: float
    positions: np.ndarray
    velocities: np.ndarray
    forces: np.ndarray
    cell: np.ndarray
    observables: dict = field(default_factory=dict)


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
    for name, (unit, shape) in OBSERVABLES.items():
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
        self._obs = {name: f[f"observables/{name}/value"] for name in OBSERVABLES}
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
        arrays = (frame.positions, frame.velocities, forces)
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
                f"observables/{k}/value" for k in OBSERVABLES if f"observables/{k}" in old.file
            ]
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


class H5MDReader:
    """Read an mdband H5MD trajectory.

    Opens files left by a killed writer in SWMR-read mode (``recovered`` is then True). Only
    complete frames are reported: the frame count is the length of the shared ``step``.
    """

    def __init__(self, path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise TrajectoryError(f"trajectory {self.path} does not exist")
        self.recovered = False
        try:
            self.file = h5py.File(self.path, "r")
        except OSError as exc:
            if "already open for write" not in str(exc):
                raise TrajectoryError(f"cannot read trajectory {self.path}: {exc}") from None
            try:
                self.file = h5py.File(self.path, "r", swmr=True, libver=LIBVER)
            except OSError as exc2:
                raise TrajectoryError(f"cannot read trajectory {self.path}: {exc2}") from None
            self.recovered = True
        needed = ["h5md", *(f"{PARTICLES}/{k}/value" for k in PARTICLE_UNITS)]
        if not all(name in self.file for name in needed):
            self.close()
            raise TrajectoryError(
                f"{self.path} is not an H5MD file with position, velocity and force of "
                "particle group 'all'"
            )
        self._part = self.file[PARTICLES]
        self.force_unit = _text(self._part["force/value"].attrs.get("unit", "eV Angstrom-1"))
        if self.force_unit not in FORCE_UNITS:
            self.close()
            raise TrajectoryError(f"{self.path}: unknown force unit {self.force_unit!r}")
        self._force_factor = FORCE_UNITS[self.force_unit]

    # ------------------------------------------------------------------ fixed data
    @property
    def n_frames(self) -> int:
        n = self._part["position/step"].shape[0]
        n = min(n, self._part["position/time"].shape[0])
        return int(min([n] + [self._part[f"{k}/value"].shape[0] for k in PARTICLE_UNITS]))

    def __len__(self) -> int:
        return self.n_frames

    @property
    def n_atoms(self) -> int:
        return int(self._part["species"].shape[0])

    @property
    def species(self) -> np.ndarray:
        return self._part["species"][()]

    @property
    def masses(self) -> np.ndarray:
        return self._part["mass"][()]

    @property
    def pbc(self) -> np.ndarray:
        boundary = self._part["box"].attrs["boundary"]
        return np.array([_text(b) == "periodic" for b in boundary])

    @property
    def variable_cell(self) -> bool:
        """Whether the run could change the cell (NPT); recorded by the writer."""
        params = self.file.get("parameters/mdband")
        if params is not None and "variable_cell" in params.attrs:
            return bool(params.attrs["variable_cell"])
        return isinstance(self._part["box/edges"], h5py.Group)

    @property
    def parameters(self) -> dict:
        if "parameters/mdband" not in self.file:
            return {}
        return {k: _plain(v) for k, v in self.file["parameters/mdband"].attrs.items()}

    @property
    def steps(self) -> np.ndarray:
        return self._part["position/step"][: self.n_frames]

    @property
    def times(self) -> np.ndarray:
        return self._part["position/time"][: self.n_frames]

    def header(self) -> TrajectoryHeader:
        params = self.parameters
        precision = str(params.pop("precision", self._part["position/value"].dtype.name))
        params.pop("variable_cell", None)
        return TrajectoryHeader(
            species=self.species,
            masses=self.masses,
            pbc=self.pbc,
            variable_cell=self.variable_cell,
            parameters=params,
            precision=precision,
            force_unit=self.force_unit,
            author=_text(self.file["h5md/author"].attrs["name"]),
        )

    # ------------------------------------------------------------------ frames
    def _index(self, i: int) -> int:
        n = self.n_frames
        if not -n <= i < n:
            raise IndexError(f"frame {i} out of range for {n} frames")
        return i % n

    def cell(self, i: int) -> np.ndarray:
        edges = self._part["box/edges"]
        if isinstance(edges, h5py.Group):
            return edges["value"][self._index(i)]
        return edges[()]  # a fixed box, as other writers may store it

    def observable(self, name: str) -> np.ndarray:
        """All complete frames of ``observables/<name>``."""
        return self.file[f"observables/{name}/value"][: self.n_frames]

    def frame(self, i: int) -> Frame:
        k = self._index(i)
        part = self._part
        obs = {}
        for name in OBSERVABLES:
            if f"observables/{name}" in self.file:
                obs[name] = self.file[f"observables/{name}/value"][k]
        return Frame(
            step=int(part["position/step"][k]),
            time=float(part["position/time"][k]),
            positions=part["position/value"][k],
            velocities=part["velocity/value"][k],
            forces=part["force/value"][k] / self._force_factor,
            cell=self.cell(k),
            observables=obs,
        )

    def __iter__(self):
        for i in range(self.n_frames):
            yield self.frame(i)

    def to_atoms(self, i: int):
        """Frame ``i`` as :class:`ase.Atoms` (ASE units; forces/energy on a single-point calc)."""
        from ase import Atoms, units
        from ase.calculators.singlepoint import SinglePointCalculator

        fr = self.frame(i)
        atoms = Atoms(
            numbers=self.species,
            positions=fr.positions,
            cell=fr.cell,
            pbc=self.pbc,
            masses=self.masses,
        )
        atoms.set_velocities(np.asarray(fr.velocities, dtype=np.float64) / (1000 * units.fs))
        energy = fr.observables.get("potential_energy")
        atoms.calc = SinglePointCalculator(
            atoms, energy=None if energy is None else float(energy), forces=fr.forces
        )
        return atoms

    def close(self) -> None:
        if self.file.id.valid:
            self.file.close()

    def __enter__(self) -> H5MDReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _plain(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value
