"""Shared CLI helpers: turn user errors into one line on stderr and exit code 2."""

from __future__ import annotations

import functools
from typing import NoReturn

import click

from mdband.errors import MdbandError


class UserError(click.ClickException):
    """A user error: shown as one line ``mdband: error: ...`` on stderr, exit code 2."""

    exit_code = 2

    def show(self, file=None):
        """Print the message as one line on stderr (``file`` is ignored)."""
        click.echo(f"mdband: error: {self.format_message()}", err=True)


class Interrupted(UserError):
    """SIGINT or SIGTERM: one line, exit code 130.

    ``mdband``'s console script turns both into KeyboardInterrupt, named by the signal.
    """

    exit_code = 130


class OutOfMemory(UserError):
    """Memory ran out (any allocator, :func:`mdband.errors.is_out_of_memory`): exit code 4."""

    exit_code = 4


def interrupted_line(exc: BaseException, what: str = "") -> str:
    """Return the line of an interruption.

    It names the signal (SIGINT unless the console script named another) and what became of
    the outputs.
    """
    name = str(exc) if str(exc).startswith("SIG") else "SIGINT"
    return f"stopped by {name}" + (f"; {what}" if what else "")


def user_error(message: str) -> NoReturn:
    """Raise :class:`UserError` with ``message``."""
    raise UserError(message)


def fail_on_user_error(fn):
    """Turn MdbandError / ValueError / OSError from the API into one line, exit code 2.

    A decorator; the line is the first line of the error's message (its type name when the
    message is empty).
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError:
            raise
        except (MdbandError, ValueError, OSError) as exc:
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError(msg) from None

    return wrapper


class OneLineCommand(click.Command):
    """A command whose click usage errors (bad flag values) are one line, exit code 2."""

    def parse_args(self, ctx, args):
        """Parse ``args`` as click does; a usage error becomes a one-line :class:`UserError`."""
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise UserError(exc.format_message().replace("\n", " ")) from None
