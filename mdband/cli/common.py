"""Shared CLI helpers: turn user errors into one line on stderr and exit code 2."""

from __future__ import annotations

import functools
import sys

import click

from mdband.errors import MdbandError


class UserError(click.ClickException):
    exit_code = 2

    def show(self, file=None):
        click.echo(f"mdband: error: {self.format_message()}", err=True)


class Interrupted(UserError):
    """SIGINT or SIGTERM (``mdband``'s console script turns both into KeyboardInterrupt,
    named by the signal): one line, exit code 130."""

    exit_code = 130


class OutOfMemory(UserError):
    """Memory ran out (any allocator, :func:`mdband.errors.is_out_of_memory`): exit code 4."""

    exit_code = 4


def interrupted_line(exc: BaseException, what: str = "") -> str:
    """The line of an interruption: the signal (SIGINT unless the console script named
    another) and what became of the outputs."""
    name = str(exc) if str(exc).startswith("SIG") else "SIGINT"
    return f"stopped by {name}" + (f"; {what}" if what else "")


def user_error(message: str):
    raise UserError(message)


def fail_on_user_error(fn):
    """Decorator: MdbandError / ValueError / OSError from the API → one line, exit code 2."""

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


def echo_err(msg: str) -> None:
    click.echo(msg, err=True)
    sys.stderr.flush()


class OneLineCommand(click.Command):
    """A command whose click usage errors (bad flag values) are one line, exit code 2."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise UserError(exc.format_message().replace("\n", " ")) from None
