"""``mdband test --detail-file PREFIX``: deepmd-kit's per-frame detail files, same layout.

For the prefix ``P`` (named as ``dp test -d P`` names them: ``Path(P).with_suffix(...)``):

==================  =========================================================================
file                rows (``numpy.savetxt``, ``%.18e``, one ``#`` header line)
==================  =========================================================================
``P.e.out``         per frame: ``data_e pred_e`` (eV)
``P.e_peratom.out`` the same divided by the frame's atom count
``P.f.out``         per atom: ``data_fx data_fy data_fz pred_fx pred_fy pred_fz`` (eV/Å)
``P.v.out``         per frame: the 9 label then the 9 predicted virial components (xx, xy, …)
``P.v_peratom.out`` the same divided by the atom count
``P.s.out``         per frame of periodic systems with virial labels: stress −W/V (eV/Å³)
==================  =========================================================================

Systems follow each other in the order tested; as in deepmd-kit, a file's header is the one
line of the first system written to it (``{system}: data_e pred_e``) and a missing label is
written as zeros. Unlike deepmd-kit, the files appear only complete: they are written to
temporary files beside the targets and renamed at the end (:func:`mdband.io.atomic.atomic_path`),
never over existing files unless asked (then the prefix's other detail files, which this run
does not write, are removed so that none is stale).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TextIO

import numpy as np

from mdband.errors import MdbandError
from mdband.io.atomic import atomic_path

SUFFIXES = (".e.out", ".e_peratom.out", ".f.out", ".v.out", ".v_peratom.out", ".s.out")
_V = " ".join(f"{{0}}_v{a}{b}" for a in "xyz" for b in "xyz")
_S = " ".join(f"{{0}}_s{a}{b}" for a in "xyz" for b in "xyz")
HEADERS = {
    ".e.out": "{}: data_e pred_e",
    ".e_peratom.out": "{}: data_e pred_e",
    ".f.out": "{}: data_fx data_fy data_fz pred_fx pred_fy pred_fz",
    ".v.out": "{}: " + _V.format("data") + " " + _V.format("pred"),
    ".v_peratom.out": "{}: " + _V.format("data") + " " + _V.format("pred"),
    ".s.out": "{} (eV/Å³): " + _S.format("data") + " " + _S.format("pred"),
}


class DetailFileError(MdbandError, ValueError):
    """A detail file exists (and overwriting was not asked) or cannot be written."""


def detail_paths(prefix) -> dict[str, Path]:
    """``{suffix: path}`` of the detail files of ``prefix`` (``Path(prefix).with_suffix``)."""
    base = Path(prefix)
    try:
        return {s: base.with_suffix(s) for s in SUFFIXES}
    except ValueError as exc:
        raise DetailFileError(f"detail-file prefix {prefix!r}: {exc}") from None


def check_detail_files(prefix, overwrite: bool = False) -> dict[str, Path]:
    """Return the detail files' paths, after checking that they can be written.

    Their directory exists, none is a directory, and none exists unless ``overwrite``.
    """
    paths = detail_paths(prefix)
    for path in paths.values():
        if not path.parent.is_dir():
            raise DetailFileError(f"directory of detail file {path} does not exist")
        if path.is_dir():
            raise DetailFileError(f"detail file {path} is a directory")
        if path.exists() and not overwrite:
            raise DetailFileError(f"detail file {path} exists; use --overwrite to replace it")
    return paths


class DetailWriter:
    """Writes the detail files of one ``mdband test`` run, system after system.

    It is a context manager: the files appear when it exits without an error, else nothing is
    written.
    """

    def __init__(self, prefix, overwrite: bool = False) -> None:
        self.paths = check_detail_files(prefix, overwrite)
        self.overwrite = overwrite
        self._stack = contextlib.ExitStack()
        self._handles: dict[str, TextIO] = {}
        self._tmp: dict[str, Path] = {}

    def __enter__(self) -> DetailWriter:
        """Return the writer itself."""
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Put the files in place after success (stale ones removed with overwrite), else none."""
        for fh in self._handles.values():
            fh.close()
        if exc_type is None and self.overwrite:
            for suffix, path in self.paths.items():
                if suffix not in self._tmp and path.is_file():
                    path.unlink()  # stale: this run does not write it
        try:
            self._stack.__exit__(exc_type, exc, tb)
        except FileExistsError as err:  # another writer made it meanwhile
            raise DetailFileError(f"{err}; not replaced (use --overwrite)") from None

    def _write(self, suffix: str, system: str, rows: np.ndarray) -> None:
        fh = self._handles.get(suffix)
        header = ""
        if fh is None:
            tmp = self._stack.enter_context(atomic_path(self.paths[suffix], replace=self.overwrite))
            self._tmp[suffix] = tmp
            fh = self._handles[suffix] = open(tmp, "w", encoding="utf-8")  # noqa: SIM115
            header = HEADERS[suffix].format(system)
        np.savetxt(fh, rows, header=header)

    def write_system(self, system: str, frames, results) -> None:
        """Write the rows of one system: its frames and the model's result of each."""
        n = np.array([f.n_atoms for f in frames], dtype=np.float64)[:, None]
        e = np.array([[_or(f.energy, 0.0), r.energy] for f, r in zip(frames, results)])
        e = e.reshape(-1, 2)
        self._write(".e.out", system, e)
        self._write(".e_peratom.out", system, e / n)
        f = [np.hstack([_or_zeros(fr.forces, r.forces.shape), r.forces])
             for fr, r in zip(frames, results)]  # fmt: skip
        self._write(".f.out", system, np.concatenate(f).reshape(-1, 6))
        v = np.stack([np.concatenate([_or_zeros(fr.virial, (3, 3)).reshape(9),
                                      r.virial.reshape(9)])
                      for fr, r in zip(frames, results)])  # fmt: skip
        self._write(".v.out", system, v)
        self._write(".v_peratom.out", system, v / n)
        periodic = all(bool(np.all(fr.pbc)) for fr in frames)
        if periodic and all(fr.virial is not None for fr in frames):
            volume = np.abs(np.linalg.det(np.stack([fr.cell for fr in frames])))[:, None]
            self._write(".s.out", system, -v / volume)


def _or(value, default):
    return default if value is None else float(value)


def _or_zeros(value, shape) -> np.ndarray:
    return np.zeros(shape) if value is None else np.asarray(value, dtype=np.float64)
