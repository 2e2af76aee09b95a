"""Bounded recovery of H5MD files left by a killed writer: count their frames, rewrite them.

A writer killed inside a batch of frames leaves HDF5's "open for write" flag set; plain
``h5py.File(path, "r")``, MDAnalysis and HDF5's tools then refuse the file. Such a file is read
in SWMR mode by a child process running :mod:`mdband.io.h5copy`: on a damaged (e.g. truncated)
file HDF5 can retry its reads without end, and a child that reports no progress for
``stall_seconds`` is stopped, which turns a hang into a one-line :class:`TrajectoryError`.
Clean files are read in this process.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import h5py

from mdband.errors import ResourceExhaustedError
from mdband.io import h5copy
from mdband.io.atomic import atomic_path, is_disk_full
from mdband.io.h5md_format import TrajectoryError

STALL_SECONDS = 20.0  # no progress from the child for this long: the file is taken as damaged
_STARTUP_SECONDS = 60.0  # extra allowance for the child's first line (Python + h5py import)
_H5COPY = Path(h5copy.__file__)
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


@dataclass(frozen=True)
class TrajectoryState:
    """What a trajectory holds: ``frames`` complete frames, the last at ``last_step``.

    ``flagged``: HDF5's "open for write" flag is set (a writer was killed).
    """

    flagged: bool
    frames: int
    last_step: int | None


def is_flagged(path) -> bool:
    """Tell whether ``path`` carries HDF5's "open for write" flag (plain readers refuse it)."""
    try:
        h5py.File(path, "r").close()
    except OSError as exc:
        if "already open for write" in str(exc):
            return True
        raise TrajectoryError(f"cannot read trajectory {path}: {_short(exc)}") from None
    return False


def inspect_trajectory(path, *, stall_seconds: float | None = None) -> TrajectoryState:
    """Count the complete frames of ``path`` (a flagged file in a bounded child process)."""
    path = _existing(path)
    if is_flagged(path):
        keep, last, _ = _child(path, None, None, stall_seconds)
        return TrajectoryState(True, keep, last)
    keep, last, _ = _in_process(path, None, None)
    return TrajectoryState(False, keep, last)


def uneven_series(path) -> bool:
    """Tell whether the time series of a clean file differ in length.

    They do after a batch that failed and could not be rolled back: readers that trust
    ``position/value`` would misread the file.
    """
    try:
        with h5py.File(path, "r") as f:
            lengths = {
                obj.shape[0]
                for _, kind, obj in h5copy._objects(f)
                if kind == "dataset" and h5copy._is_series(obj)
            }
    except OSError as exc:
        raise TrajectoryError(f"cannot read trajectory {path}: {_short(exc)}") from None
    return len(lengths) > 1


def repair_trajectory(
    path, through_step: int | None = None, *, stall_seconds: float | None = None
) -> TrajectoryState:
    """Rewrite ``path`` atomically as a cleanly closed file with every complete frame.

    Only those with ``step <= through_step`` when given. The new file's mode follows the umask.

    Raises
    ------
    TrajectoryError
        The file is unreadable or HDF5 stopped answering on it (the file is left as it was).
    ResourceExhaustedError
        The disk filled up while writing the copy (the file is left as it was).
    """
    path = _existing(path)
    flagged = is_flagged(path)
    try:
        with atomic_path(path) as tmp:
            if flagged:
                keep, last, _ = _child(path, tmp, through_step, stall_seconds)
            else:
                keep, last, _ = _in_process(path, tmp, through_step)
    except (OSError, RuntimeError) as exc:
        if is_disk_full(exc):
            raise ResourceExhaustedError(
                f"disk full while rewriting trajectory {path} (it is left as it was)"
            ) from None
        raise TrajectoryError(f"cannot rewrite trajectory {path}: {_short(exc)}") from None
    return TrajectoryState(False, keep, last)


def _existing(path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise TrajectoryError(f"trajectory {path} does not exist")
    return path


def _in_process(path: Path, dst, through_step):
    try:
        return h5copy.copy_file(path, dst, through_step)
    except OSError as exc:
        if dst is not None and is_disk_full(exc):
            raise
        raise TrajectoryError(f"cannot read trajectory {path}: {_short(exc)}") from None
    except (KeyError, ValueError, RuntimeError) as exc:
        raise TrajectoryError(f"cannot read trajectory {path}: {_short(exc)}") from None


def _child(path: Path, dst, through_step, stall_seconds):
    """Run h5copy.py on ``path`` in a child process; stop it when it stalls."""
    stall = STALL_SECONDS if stall_seconds is None else float(stall_seconds)
    args = [sys.executable, "-I", str(_H5COPY), str(path), "-" if dst is None else str(dst)]
    if through_step is not None:
        args.append(str(int(through_step)))
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None  # stdout=PIPE
    lines: list[str] = []
    buf = b""
    deadline = time.monotonic() + stall + _STARTUP_SECONDS
    try:
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], 0.2)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break  # the child closed its output: it is done
                buf += chunk
                *done, buf = buf.split(b"\n")
                lines += [d.decode(errors="replace") for d in done]
                deadline = time.monotonic() + stall
            elif time.monotonic() > deadline:
                proc.kill()
                raise TrajectoryError(
                    f"trajectory {path} is damaged: HDF5 stopped answering while reading it "
                    f"(no progress for {stall:.0f} s){_truncation_hint(path)}"
                )
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
    last = lines[-1] if lines else ""
    if last.startswith("done "):
        keep, step, n = last.split()[1:4]
        return int(keep), (None if step == "none" else int(step)), int(n)
    if "No space left" in last or "errno = 28" in last:
        raise OSError(28, "No space left on device")
    detail = last[6:] if last.startswith("error ") else f"reader exited with {proc.returncode}"
    raise TrajectoryError(f"cannot read trajectory {path}: {detail[:200]}")


def _truncation_hint(path: Path) -> str:
    eof, size = _superblock_eof(path), path.stat().st_size
    if eof is not None and eof > size:
        return f"; it is {size} bytes long but its header says {eof}: it was truncated"
    return ""


def _superblock_eof(path: Path) -> int | None:
    """End-of-file address in an HDF5 superblock of version 2 or 3 (None: other versions)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
    except OSError:
        return None
    if not head.startswith(_HDF5_SIGNATURE) or len(head) < 12 or head[8] not in (2, 3):
        return None
    width = head[9]
    start = 12 + 2 * width
    if width not in (4, 8) or len(head) < start + width:
        return None
    return int.from_bytes(head[start : start + width], "little")


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__
