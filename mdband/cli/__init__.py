"""The ``mdband`` command line (click). Each subcommand lives in its own module."""

from __future__ import annotations

import importlib
import importlib.util

import click

from mdband._version import __version__

# subcommand name -> module defining a click command called ``command``
_SUBCOMMANDS = {
    "info": "mdband.cli.info",
    "convert": "mdband.cli.convert",
    "run": "mdband.cli.run",
    "fit": "mdband.cli.fit",
    "relax": "mdband.cli.relax",
    "export": "mdband.cli.export",
    "plot": "mdband.cli.plot",
    "model-devi": "mdband.cli.model_devi",
    "repair": "mdband.cli.repair",
    "test": "mdband.cli.test",
}


class _LazyGroup(click.Group):
    """The ``mdband`` group, its subcommands imported when named.

    Whatever a command does not report itself ends as one line: SIGINT/SIGTERM
    (KeyboardInterrupt) exit code 130, out of memory exit code 4.
    """

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            from mdband.cli.common import Interrupted, interrupted_line

            raise Interrupted(interrupted_line(exc)) from None
        except (MemoryError, RuntimeError) as exc:
            from mdband.cli.common import OutOfMemory
            from mdband.errors import is_out_of_memory

            if not is_out_of_memory(exc):
                raise
            text = " ".join(str(exc).split())[:160] or type(exc).__name__
            raise OutOfMemory(f"out of memory ({text})") from None

    def list_commands(self, ctx):
        return sorted(n for n, m in _SUBCOMMANDS.items() if importlib.util.find_spec(m))

    def get_command(self, ctx, name):
        mod = _SUBCOMMANDS.get(name)
        if mod is None or importlib.util.find_spec(mod) is None:
            return None
        return importlib.import_module(mod).command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="mdband")
@click.option("-v", "--verbose", count=True, help="Log more on stderr (-v INFO, -vv DEBUG).")
@click.option("-q", "--quiet", is_flag=True, help="Errors only: no progress, thermo or logs.")
@click.pass_context
def main(ctx, verbose, quiet) -> None:
    """mdband: fast MD with SeZM (DPA4) potentials.

    Devices: every command's --device auto (the default) is CUDA when available, else CPU.
    """
    from mdband.cli.common import UserError
    from mdband.cli.log_setup import configure_logging

    if verbose and quiet:
        raise UserError("-v and -q exclude each other")
    ctx.ensure_object(dict).update(verbose=verbose, quiet=quiet)
    configure_logging(-1 if quiet else verbose)
