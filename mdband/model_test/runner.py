"""``mdband test``: a model's errors against labelled frames, system by system (``dp test``).

Data paths are read with :func:`mdband.io.systems.read_systems` (every deepmd-kit and dpdata
format, extxyz, ASE databases, mdband H5MD, ...). A *system* is what ``dp test`` calls one: a
deepmd-kit system directory (a directory without ``type.raw`` stands for the systems below it,
in natural order), a group of a deepmd/hdf5 file, or one structure file. The first
``numb_test`` frames of each system (all when 0, as ``dp test -n 0``) are evaluated together
in batches (:meth:`mdband.Potential.evaluate_many`), and every system's errors and their
weighted average are reported as deepmd-kit does (:mod:`mdband.model_test.metrics`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from mdband.io.frames import DatasetError, Frame
from mdband.io.systems import deepmd_systems, read_systems
from mdband.model_test.details import DetailWriter
from mdband.model_test.metrics import Errors, merge, system_errors

_INDEX = re.compile(r"\[\d+\]$")


@dataclass
class SystemErrors:
    """One system tested: its label, frames, atoms per frame and errors."""

    system: str
    frames: int
    atoms: list[int]
    errors: Errors


@dataclass
class ModelTestReport:
    """Everything ``mdband test`` prints: per system and their weighted average."""

    systems: list[SystemErrors]
    average: Errors
    seconds: float = 0.0  # wall time of the model evaluations
    notes: list[str] = field(default_factory=list)

    @property
    def frames(self) -> int:
        """Return the number of frames of all systems."""
        return sum(s.frames for s in self.systems)

    def as_dict(self) -> dict:
        """Return the JSON summary: errors as ``{key: value}`` with their ``weights``."""

        def errs(e: Errors) -> dict:
            return {"errors": {k: v for k, (v, _) in e.items()},
                    "weights": {k: w for k, (_, w) in e.items()}}  # fmt: skip

        return {
            "systems": [
                {
                    "system": s.system,
                    "frames": s.frames,
                    "atoms": sorted(set(s.atoms)),
                    **errs(s.errors),
                }  # fmt: skip
                for s in self.systems
            ],
            "average": {
                "systems": len(self.systems),
                "frames": self.frames,
                **errs(self.average),
            },  # fmt: skip
            "seconds": self.seconds,
            "frames_per_second": self.frames / self.seconds if self.seconds > 0 else None,
        }


def system_paths(paths) -> list[Path]:
    """Return every path, directories without ``type.raw`` replaced by the systems below them.

    The deepmd-kit systems below such a directory come in natural order; a missing path or a
    directory without systems raises :class:`DatasetError`.
    """
    out = []
    for p in map(Path, paths):
        if not p.exists():
            raise DatasetError(f"{p} does not exist")
        if p.is_dir() and not (p / "type.raw").is_file():
            found = deepmd_systems(p)
            if not found:
                raise DatasetError(f"{p} is a directory without deepmd-kit systems (no type.raw)")
            out += found
        else:
            out.append(p)
    return out


def read_test_systems(paths, fmt=None, type_map=None, default_type_map=None,
                      numb_test: int = 0, notes=None) -> list[tuple[str, list[Frame]]]:  # fmt: skip
    """Read ``(label, frames)`` of every system of ``paths``.

    Only the first ``numb_test`` frames are kept (all for 0). A file with several systems
    (deepmd/hdf5 groups) gives one per group.
    """
    if numb_test < 0:
        raise DatasetError(f"the number of test frames must be >= 0, got {numb_test}")
    systems: list[tuple[str, list[Frame]]] = []
    for path in system_paths(paths):
        frames = read_systems([path], fmt, type_map, default_type_map=default_type_map,
                              notes=notes)  # fmt: skip
        here: list[tuple[str, list[Frame]]] = []
        for frame in frames:
            label = _INDEX.sub("", frame.source) or str(path)
            if not here or here[-1][0] != label:
                here.append((label, []))
            here[-1][1].append(frame)
        systems += here
    if numb_test:
        systems = [(label, frames[:numb_test]) for label, frames in systems]
    return systems


def run_test(potential, systems, *, batch_size=None, batch_atoms=None, detail_file=None,
             overwrite: bool = False, progress=None) -> ModelTestReport:  # fmt: skip
    """Evaluate ``potential`` on ``systems`` (from :func:`read_test_systems`), compute errors.

    With ``detail_file``, deepmd-kit's detail files (:mod:`.details`) are written too.

    ``progress(n)`` is called with the number of frames done after every model call. The
    detail files are checked before anything is evaluated.
    """
    frames = [f for _, fs in systems for f in fs]
    writer = DetailWriter(detail_file, overwrite) if detail_file is not None else None
    t0 = time.perf_counter()
    results = potential.evaluate_many(frames, batch_size=batch_size, batch_atoms=batch_atoms,
                                      progress=progress)  # fmt: skip
    seconds = time.perf_counter() - t0
    out, start = [], 0
    for label, fs in systems:
        res = results[start : start + len(fs)]
        start += len(fs)
        out.append(SystemErrors(label, len(fs), [f.n_atoms for f in fs], system_errors(fs, res)))
    if writer is not None:
        with writer:
            start = 0
            for label, fs in systems:
                writer.write_system(label, fs, results[start : start + len(fs)])
                start += len(fs)
    return ModelTestReport(out, merge(s.errors for s in out), seconds)


def report_text(report: ModelTestReport) -> list[str]:
    """Return the lines ``dp test`` logs, for every system and their weighted average."""
    from mdband.model_test.metrics import report_lines

    bar = "# ----------------------------------------------- "
    lines = []
    for s in report.systems:
        lines += [
            "# ---------------output of mdband test------------ ",
            f"# testing system : {s.system}",
            f"# number of test data : {s.frames:d} ",
        ]
        lines += report_lines(s.errors) + [bar]  # fmt: skip
    lines += ["# ----------weighted average of errors----------- ",
              f"# number of systems : {len(report.systems)}"]  # fmt: skip
    lines += report_lines(report.average) + [bar]
    return lines
