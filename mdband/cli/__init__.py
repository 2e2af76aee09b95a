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
    "repair": "mdband.cli.repair",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(n for n, m in _SUBCOMMANDS.items() if importlib.util.find_spec(m))

    def get_command(self, ctx, name):
        mod = _SUBCOMMANDS.get(name)
        if mod is None or importlib.util.find_spec(mod) is None:
            return None
        return importlib.import_module(mod).command


@click.group(cls=_LazyGroup)
@click.version_option(__version__, prog_name="mdband")
def main() -> None:
    """mdband: fast MD with SeZM (DPA4) potentials."""
