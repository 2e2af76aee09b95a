"""The ``mdband`` console script: SIGINT and SIGTERM handled from its first line.

This module lives outside the package because importing ``mdband`` imports torch (seconds):
the handlers are installed before that, so a signal at any moment of the start-up ends the
command with one line and exit code 130, like a signal later on, never with a traceback.
Both signals raise KeyboardInterrupt named by the signal (``KeyboardInterrupt("SIGTERM")``),
so ``finally`` blocks run (locks released, temporary files removed); the commands report it
(``mdband.cli.common.Interrupted``), and ``mdband run`` turns it into a checkpoint first.
A signal repeated while the first one is being handled is ignored: the clean-up finishes.
A signal that arrives while a module is being imported is delivered again 50 ms later: an
exception raised inside an import can reach C++ code that cannot pass it on (a compiled
module's initialisation), which aborts the process.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_stopping: list[str] = []
INTERRUPTED = 130


def _importing(frame) -> bool:
    """True when ``frame`` (the signal's) or one of its callers runs Python's import system."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _handler(signum, frame) -> None:
    if _stopping:
        return  # the first signal is being handled: let its clean-up finish
    if _importing(frame):  # not now: the same signal again once the import is done
        later = threading.Timer(0.05, os.kill, (os.getpid(), signum))
        later.daemon = True
        later.start()
        return
    name = signal.Signals(signum).name
    _stopping.append(name)
    raise KeyboardInterrupt(name)


def install() -> None:
    """Turn SIGINT and SIGTERM into KeyboardInterrupt (main thread only)."""
    for s in _SIGNALS:
        signal.signal(s, _handler)


def _line(text: str) -> None:
    try:
        sys.stderr.write(f"mdband: error: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Run ``mdband`` with ``argv`` (default: the command line); returns the exit code."""
    install()
    try:
        import click

        from mdband.cli import main as group
    except KeyboardInterrupt as exc:
        _line(f"{_stopped(exc)} during start-up; nothing was written")
        return INTERRUPTED
    try:
        return _exit_code(group.main(args=argv, prog_name="mdband", standalone_mode=False))
    except KeyboardInterrupt as exc:  # outside a command (the commands report their own)
        _line(f"{_stopped(exc)} before the command started; nothing was written")
        return INTERRUPTED
    except click.exceptions.Abort as exc:  # click's word for a KeyboardInterrupt it caught
        if isinstance(exc.__context__, KeyboardInterrupt):
            _line(f"{_stopped(exc.__context__)} before the command started; nothing was written")
            return INTERRUPTED
        _line("aborted")
        return 1
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code


def _stopped(exc: BaseException) -> str:
    name = str(exc) if str(exc).startswith("SIG") else "SIGINT"
    return f"stopped by {name}"


def _exit_code(result) -> int:
    return result if isinstance(result, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
