"""Atomic file replacement: write a temporary file beside the target, fsync, rename, fsync dir.

A reader (or a crash at any moment) sees either the old file or the complete new one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path, *, replace: bool = True) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``path`` atomically.

    The temporary file gets the usual permissions (0666 & ~umask); on any exception it is
    removed and ``path`` is left untouched. With ``replace=False`` an existing ``path`` is
    never replaced, not even one another writer created meanwhile: :class:`FileExistsError`.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)
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
