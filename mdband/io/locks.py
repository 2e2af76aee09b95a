"""One writer per output file: an exclusive ``flock`` on a lock file beside it.

The lock file of ``dir/name`` is ``dir/.name.lock``; it holds the writer's PID and host. The
kernel drops the lock when the process ends (also on SIGKILL), so a stale lock file never
blocks a later run; a released lock removes its file. Locks are taken before anything is
created or truncated, and a second writer is refused at once, with the first one's PID.

An output is locked by the file it reaches, not by the name it was given: the lock beside the
resolved path (a symbolic link's target; the link's own name is locked too), and, for a file
with several hard links, the locks of its other names in that directory. So a second run
writing the same log through a link, or a running trajectory through a hard link, is refused.
Lock files are opened without following links and must be plain files with one name: a link
or a hard-linked file at a lock file's path is refused, never written through.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
from collections.abc import Mapping
from pathlib import Path

from mdband.errors import MdbandError, ResourceExhaustedError
from mdband.io.atomic import is_disk_full


class OutputLockedError(MdbandError):
    """Another process (another ``mdband run``, ``mdband repair`` ...) writes the file."""


def lock_path(path) -> Path:
    """Return the lock file of the file ``path`` reaches (links followed)."""
    path = Path(path).resolve()
    return path.with_name(f".{path.name}.lock")


def _lock_files(path: Path) -> list[tuple[Path, bool]]:
    """List every lock file of ``path`` and whether it may be skipped.

    A lock file may be skipped where it cannot be created (a directory we may not write). The
    files are the resolved path's (optional for a link, whose own name's lock comes first) and
    those of the file's other hard links in its directory (optional).
    """
    target = lock_path(path)
    if path.is_symlink():
        out = [(path.parent.resolve() / f".{path.name}.lock", False), (target, True)]
    else:
        out = [(target, False)]
    resolved = path.resolve()
    try:
        st = resolved.stat()
    except OSError:
        return out
    if st.st_nlink > 1 and stat.S_ISREG(st.st_mode):
        try:
            names = sorted(os.listdir(resolved.parent))
        except OSError:
            names = []
        for name in names:
            if name == resolved.name or name.startswith("."):
                continue
            try:
                other = os.stat(resolved.parent / name, follow_symlinks=False)
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                out.append((resolved.parent / f".{name}.lock", True))
    first: dict[Path, bool] = {}
    for p, opt in out:
        first.setdefault(p, opt)
    return list(first.items())


class OutputLock:
    """An exclusive lock on ``path`` (see the module docstring); a context manager."""

    def __init__(self, path, what: str = "file") -> None:
        self.path = Path(path)
        self.what = what
        self._held: list[tuple[Path, int]] = []

    @property
    def held(self) -> bool:
        """Whether the lock is held (some lock file taken)."""
        return bool(self._held)

    def acquire(self) -> OutputLock:
        """Take the lock or raise :class:`OutputLockedError` naming the holder's PID.

        Raises :class:`~mdband.errors.MdbandError` when a lock file cannot be created (e.g.
        the directory is not writable, or a link stands at its path): nothing could be written
        there; :class:`~mdband.errors.ResourceExhaustedError` when the disk is full.
        """
        files = _lock_files(self.path)
        try:
            for lock, optional in files:
                fd = self._take(lock, optional)
                if fd is not None:
                    self._held.append((lock, fd))
        except BaseException:
            self.release()
            raise
        return self

    def _take(self, lock: Path, optional: bool) -> int | None:
        """Lock ``lock`` (a lock file); None when an optional one cannot be created."""
        while True:
            try:
                fd = os.open(
                    lock,
                    os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK,
                    0o666,
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise MdbandError(
                        f"cannot write {self.what} {self.path}: its lock file {lock} is a "
                        "symbolic link (not made by mdband; remove it)"
                    ) from None
                if optional and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                    return None
                if is_disk_full(exc):
                    raise ResourceExhaustedError(
                        f"disk full: cannot create the lock file {lock} of {self.what} {self.path}"
                    ) from None
                raise MdbandError(
                    f"cannot write {self.what} {self.path}: {exc.strerror} ({lock})"
                ) from None
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                os.close(fd)
                raise MdbandError(
                    f"cannot write {self.what} {self.path}: its lock file {lock} is not a "
                    "plain file of its own (a hard link or special file; remove it)"
                )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _holder(fd)
                os.close(fd)
                raise OutputLockedError(
                    f"{self.what} {self.path} is being written by another process ({holder}); "
                    "wait for it to end or choose another file"
                ) from None
            # the previous holder may have removed the file between our open and flock
            try:
                same = os.path.samestat(st, os.stat(lock, follow_symlinks=False))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        except OSError as exc:
            _drop(lock, fd)
            if is_disk_full(exc):
                raise ResourceExhaustedError(
                    f"disk full: cannot write the lock file {lock} of {self.what} {self.path}"
                ) from None
            raise MdbandError(
                f"cannot write {self.what} {self.path}: {exc.strerror} ({lock})"
            ) from None
        return fd

    def release(self) -> None:
        """Remove the lock files and drop the locks (a no-op when not held)."""
        while self._held:
            lock, fd = self._held.pop()
            _drop(lock, fd)

    def __enter__(self) -> OutputLock:
        """Take the lock (see :meth:`acquire`)."""
        return self.acquire()

    def __exit__(self, *exc) -> None:
        """Release the lock."""
        self.release()


def _drop(lock: Path, fd: int) -> None:
    """Remove ``lock`` (ours: we hold its flock) and close ``fd`` (which drops the flock)."""
    try:
        os.unlink(lock)
    except FileNotFoundError:
        pass
    os.close(fd)


class OutputLocks:
    """Locks on several outputs, taken in order and released together."""

    def __init__(self) -> None:
        self.locks: list[OutputLock] = []

    @classmethod
    def acquire(cls, outputs: Mapping[str, str | os.PathLike]) -> OutputLocks:
        """Lock every ``{what: path}``; on a failure release those already taken and raise."""
        held = cls()
        try:
            for what, path in outputs.items():
                held.locks.append(OutputLock(path, what).acquire())
        except BaseException:
            held.release()
            raise
        return held

    def release(self) -> None:
        """Release every lock held, the last taken first."""
        for lock in reversed(self.locks):
            lock.release()
        self.locks.clear()

    def __enter__(self) -> OutputLocks:
        """Return the locks (already taken by :meth:`acquire`)."""
        return self

    def __exit__(self, *exc) -> None:
        """Release every lock."""
        self.release()


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").split()
    except OSError:
        text = []
    if not text:
        return "PID unknown"
    host = f" on {text[1]}" if len(text) > 1 and text[1] != socket.gethostname() else ""
    return f"PID {text[0]}{host}"
