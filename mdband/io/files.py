"""Which file a path reaches, and new output files that replace a path atomically.

Every command that writes (``run``, ``relax``, ``fit``, ``export``, ``model-devi``, ``convert``,
``plot``) checks its outputs here before it writes anything (:func:`check_outputs`): an output
is identified by the file it reaches, the resolved path (symbolic links followed) and, where
the file exists, its device and inode (hard links), so no output may be an input of the
command, no two outputs may be one file, and an output's directory must exist.

Outputs written bit by bit (a log, ``model_devi.out``, a relaxation trajectory) start as a new
file made beside the path and renamed onto it (:func:`start_new_file`): an existing file or a
symbolic link at the path is replaced, never written through (the link's target is left as it
is), and without ``overwrite`` nothing existing is replaced, a dangling link included.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mdband.errors import MdbandError, OutputExistsError

__all__ = [
    "FileIdentity",
    "OutputExistsError",
    "OutputPathError",
    "check_outputs",
    "claim_outputs",
    "exists",
    "identity",
    "same_file",
    "start_new_file",
]


class OutputPathError(MdbandError, ValueError):
    """An output cannot or must not be written (an input, another output, a directory...)."""


@dataclass(frozen=True)
class FileIdentity:
    """The file a path reaches.

    ``resolved``: the path with links followed; ``inode``: ``(device, inode)`` when it exists.
    """

    resolved: Path
    inode: tuple[int, int] | None


def identity(path) -> FileIdentity:
    """Return the :class:`FileIdentity` of ``path`` (which need not exist)."""
    path = Path(path)
    try:
        st = path.stat()
        inode = (st.st_dev, st.st_ino)
    except OSError:
        inode = None
    return FileIdentity(path.resolve(), inode)


def same_file(a, b) -> bool:
    """Tell whether ``a`` and ``b`` reach one file.

    They do with the same resolved path, or (both existing) the same device and inode (hard
    links).
    """
    ia, ib = identity(a), identity(b)
    return ia.resolved == ib.resolved or (ia.inode is not None and ia.inode == ib.inode)


def exists(path) -> bool:
    """Tell whether anything stands at ``path``: a file, or a link even when dangling."""
    return os.path.lexists(path)


def check_outputs(
    outputs: Mapping[str, str | os.PathLike | None],
    inputs: Mapping[str, str | os.PathLike | None] | None = None,
    *,
    error: type[Exception] = OutputPathError,
    verb: str = "the command",
    folders: tuple[str, ...] = (),
) -> None:
    """Raise ``error`` (one line) unless every output can be written.

    Parameters
    ----------
    outputs, inputs : mapping of what -> path
        What each file is ("log", "trajectory", "structure", ...) and its path; None values
        are skipped.
    error : exception class
        Raised with the reason (:class:`OutputPathError` by default).
    verb : str
        Who would overwrite its input, for the message ("the run", "the command").
    folders : tuple of str
        Outputs that are folders (a deepmd-kit system): one that exists is no error.
    """
    outs = {what: Path(p) for what, p in outputs.items() if p is not None and str(p) != ""}
    ins = {what: Path(p) for what, p in (inputs or {}).items() if p is not None and str(p) != ""}
    for what, path in outs.items():
        if not path.parent.is_dir():
            raise error(f"directory of {what} file {path} does not exist")
        if path.is_dir() and what not in folders:
            raise error(f"{what} path {path} is a directory")
    names = list(outs)
    for k, a in enumerate(names):
        for b in names[k + 1 :]:
            if same_file(outs[a], outs[b]):
                raise error(
                    f"{a} file {outs[a]} and {b} file {outs[b]} are the same file; "
                    "outputs must be different files"
                )
    for what, path in outs.items():
        for kind, src in ins.items():
            if same_file(path, src):
                raise error(
                    f"{what} file {path} is the {kind}: {verb} would overwrite its own input"
                )


def start_new_file(path, overwrite: bool, what: str = "output") -> Path:
    """Make ``path`` a new empty file (mode 0666 & ~umask) and return it.

    The file is created beside ``path`` and renamed onto it: with ``overwrite`` an existing file
    or symbolic link at ``path`` is replaced in one step (a link's target is not touched);
    without, anything at ``path`` (a dangling link too) raises :class:`OutputExistsError`.
    """
    from mdband.io.atomic import umask_mode

    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, umask_mode())
        if overwrite:
            os.replace(tmp, path)
            return path
        try:
            os.link(tmp, path, follow_symlinks=False)  # fails atomically if anything is there
        except FileExistsError:
            raise OutputExistsError(
                f"{what} file {path} exists; use --overwrite to replace it"
            ) from None
        except OSError:  # no hard links on this file system: check, then rename
            if exists(path):
                raise OutputExistsError(
                    f"{what} file {path} exists; use --overwrite to replace it"
                ) from None
            os.replace(tmp, path)
            return path
        os.unlink(tmp)
        return path
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def claim_outputs(
    outputs: Mapping[str, str | os.PathLike | None],
    inputs: Mapping[str, str | os.PathLike | None] | None = None,
    *,
    overwrite: bool = False,
    error: type[Exception] = OutputPathError,
    verb: str = "the command",
    hint: str = "pass --overwrite to replace it",
    exists_error: type[Exception] = OutputExistsError,
    folders: tuple[str, ...] = (),
):
    """Check ``outputs`` (:func:`check_outputs`), lock them and refuse existing ones.

    The locks are those of :mod:`mdband.io.locks`; under them an existing output is refused
    unless ``overwrite``. Returns the :class:`~mdband.io.locks.OutputLocks` (the caller
    releases them).
    """
    from mdband.io.locks import OutputLocks

    check_outputs(outputs, inputs, error=error, verb=verb, folders=folders)
    outs = {what: p for what, p in outputs.items() if p is not None and str(p) != ""}
    locks = OutputLocks.acquire(outs)
    try:
        if not overwrite:
            for what, p in outs.items():
                if exists(p):
                    raise exists_error(f"{what} file {p} exists; {hint}")
    except BaseException:
        locks.release()
        raise
    return locks
