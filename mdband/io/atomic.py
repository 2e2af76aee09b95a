"""Atomic file replacement: write a temporary file beside the target, fsync, rename, fsync dir.

A reader (or a crash at any moment) sees either the old file or the complete new one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

_TMP_SUFFIX = ".tmp"


@contextlib.contextmanager
def atomic_path(path, *, replace: bool = True) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``path`` atomically.

    The temporary file gets the usual permissions (0666 & ~umask); on any exception it is
    removed and ``path`` is left untouched. With ``replace=False`` an existing ``path`` is
    never replaced, not even one another writer created meanwhile: :class:`FileExistsError`.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=_TMP_SUFFIX, dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, umask_mode())
        yield Path(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            _link_new(Path(tmp), path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def _link_new(tmp: Path, path: Path) -> None:
    """Give ``tmp`` the name ``path`` unless ``path`` exists (a hard link fails atomically)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise FileExistsError(f"{path} exists") from None
    except OSError:  # no hard links on this filesystem: check, then rename
        if os.path.lexists(path):
            raise FileExistsError(f"{path} exists") from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def umask_mode() -> int:
    """Mode of a new file under the current umask (0666 & ~umask), as ``open`` gives it."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def temp_files(path) -> list[Path]:
    """Temporary files :func:`atomic_path` leaves beside ``path`` when killed."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    prefix = f".{path.name}."
    return sorted(
        p
        for p in path.parent.iterdir()
        if p.name.startswith(prefix) and p.name.endswith(_TMP_SUFFIX) and p.is_file()
    )


def clean_stale_temps(path) -> list[Path]:
    """Remove the temporary files of killed writers of ``path``; returns what was removed.

    Call it holding the file's lock, see :mod:`mdband.io.locks`.
    """
    removed = []
    for p in temp_files(path):
        try:
            p.unlink()
            removed.append(p)
        except FileNotFoundError:
            pass
    return removed


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# HDF5 reports its write errors in the message, with the errno inside the text
_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded", "File too large")


def is_disk_full(exc: BaseException) -> bool:
    """Tell whether ``exc`` is an ``OSError`` (or an HDF5 error quoting one) for a full disk."""
    if isinstance(exc, OSError) and exc.errno in _DISK_FULL:
        return True
    text = str(exc)
    return any(t in text for t in _DISK_FULL_TEXT) or any(
        f"errno = {code}," in text for code in _DISK_FULL
    )


def no_space_left(directory) -> bool:
    """Tell whether the file system holding ``directory`` has no block left for this user."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return False
    return st.f_bavail == 0


def fsync_dir(directory) -> None:
    """Flush a directory entry (after a rename); silently skipped where unsupported."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
