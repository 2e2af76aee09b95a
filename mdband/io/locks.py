"""One writer per output file: an exclusive ``flock`` on a lock file beside it.

The lock file of ``dir/name`` is ``dir/.name.lock``; it holds the writer's PID and host. The
kernel drops the lock when the process ends (also on SIGKILL), so a stale lock file never
blocks a later run; a released lock removes its file. Locks are taken before anything is
created or truncated, and a second writer is refused at once, with the first one's PID.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from mdband.errors import MdbandError


class OutputLockedError(MdbandError):
    """Another process (another ``mdband run``, ``mdband repair`` ...) writes the file."""


def lock_path(path) -> Path:
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


class OutputLock:
    """An exclusive lock on ``path`` (see the module docstring); a context manager."""

    def __init__(self, path, what: str = "file") -> None:
        self.path = Path(path)
        self.what = what
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> OutputLock:
        """Take the lock or raise :class:`OutputLockedError` naming the holder's PID.

        Raises :class:`~mdband.errors.MdbandError` when the lock file cannot be created (e.g.
        the directory is not writable): nothing could be written there.
        """
        lock = lock_path(self.path)
        while True:
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except OSError as exc:
                raise MdbandError(
                    f"cannot write {self.what} {self.path}: {exc.strerror} ({lock})"
                ) from None
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
                same = os.path.samestat(os.fstat(fd), os.stat(lock))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file and drop the lock (a no-op when not held)."""
        if self._fd is None:
            return
        try:
            os.unlink(lock_path(self.path))
        except FileNotFoundError:
            pass
        os.close(self._fd)  # closing the descriptor drops the flock
        self._fd = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class OutputLocks:
    """Locks on several outputs, taken in order and released together."""

    def __init__(self) -> None:
        self.locks: list[OutputLock] = []

    @classmethod
    def acquire(cls, outputs: dict[str, str | os.PathLike]) -> OutputLocks:
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
        for lock in reversed(self.locks):
            lock.release()
        self.locks.clear()

    def __enter__(self) -> OutputLocks:
        return self

    def __exit__(self, *exc) -> None:
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
