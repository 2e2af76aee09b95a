"""``mdband run``: molecular dynamics from a TOML file and/or flags (flags win).

Exit codes: 0 done; 2 bad input (one line on stderr, nothing written or changed); 3 the run
diverged (NaN/inf) or ran away (``max_temperature``, ``guard_distance``; last checkpoint and
trajectory kept); 4 out of resources: the disk filled up or memory ran out (CPU or GPU; one
line, last good checkpoint and a closed trajectory kept); 130 stopped by SIGINT/SIGTERM
(after writing a checkpoint).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from mdband.cli.common import UserError, interrupted_line
from mdband.cli.setting_options import given_settings, setting_options
from mdband.md.config import RunConfig


class _DivergedError(UserError):
    exit_code = 3


class _InterruptedError(UserError):
    exit_code = 130


class _ExhaustedError(UserError):
    exit_code = 4


def _quiet_on_workers(exc: UserError) -> UserError:
    """Under mpirun only rank 0 prints the error line; the other ranks just exit."""
    from mdband.md.lammps_engine import launcher_rank_size

    if launcher_rank_size()[0] > 0:
        exc.show = lambda file=None: None  # type: ignore[method-assign]  # this one stays quiet
    return exc


class _OneLineCommand(click.Command):
    """Report click's own usage errors (bad flag values) as one line, exit code 2."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _quiet_on_workers(UserError(exc.format_message().replace("\n", " "))) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UserError as exc:
            raise _quiet_on_workers(exc) from None


def _load_toml(path: str) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]  # the same API
    from mdband.md.config import normalise_mapping
    from mdband.md.errors import ConfigError

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    try:
        with open(p, "rb") as fh:
            data = tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot parse config file {p}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from None
    return normalise_mapping(data, base_dir=p.parent)


def _settings(ctx: click.Context, params: dict) -> dict:
    """TOML settings updated by the flags given on the command line."""
    settings = _load_toml(params["config_file"]) if params.get("config_file") else {}
    given = given_settings(ctx, RunConfig, params)
    settings.update(given)
    # --model on the command line replaces the file's model and committee; repeated, it is
    # a committee (the first drives), as is a TOML list
    if "model" in given and "committee" not in given:
        settings.pop("committee", None)
    if isinstance(settings.get("model"), (list, tuple)):
        from mdband.md.config import split_models

        settings.pop("committee", None)
        settings.update(split_models(settings["model"]))
    return settings


def _config(settings: dict):
    from mdband.io.checkpoint import read_checkpoint
    from mdband.md.config import RunConfig, merge_for_resume

    if settings.get("resume"):
        if not settings.get("checkpoint"):
            from mdband.md.errors import ConfigError

            raise ConfigError("--resume needs --checkpoint FILE")
        ck = read_checkpoint(settings["checkpoint"])
        return merge_for_resume(ck.config, settings)
    return RunConfig(**settings)


@click.command("run", cls=_OneLineCommand)
@click.option("--config", "config_file", metavar="FILE", help="TOML file of settings.")
@setting_options(RunConfig)
@click.option(
    "--print-config",
    is_flag=True,
    help="Print the resolved settings as TOML (loadable with --config) and exit.",
)
@click.pass_context
def command(ctx, print_config, **params):
    """Run molecular dynamics with an mdband / SeZM potential.

    Settings come from --config FILE (TOML, keys named like the flags: --traj-every is
    traj_every or traj-every) and the flags, which override it. --print-config prints the
    resolved settings (seed drawn, paths absolute) and exits without loading anything.
    --steps is the run's total length: with --resume the run continues from the checkpoint
    until the step counter reaches it.

    --engine lammps integrates with LAMMPS (pair_style mdband, same outputs); start it as
    `mpirun -np N mdband run --engine lammps ...` to split the cell over N ranks.

    Exit codes: 2 bad input (nothing written), 3 the run diverged (NaN/inf) or ran away
    (--max-temperature, --guard-distance), 4 out of resources (disk full, out of memory;
    the last checkpoint is kept), 130 stopped by Ctrl-C/SIGTERM after writing a checkpoint.
    """
    from mdband.errors import MdbandError, ResourceExhaustedError, is_out_of_memory
    from mdband.md import ConfigError, RunInterrupted, SimulationDivergedError, run
    from mdband.md.outputs import check_output_paths

    quiet = bool((ctx.obj or {}).get("quiet"))
    console = None
    if quiet:
        from rich.console import Console

        console = Console(quiet=True)
    started = False  # whether run() was called: before it, nothing is written
    try:
        config = _config(_settings(ctx, params))
        if print_config:
            click.echo(config.resolved().to_toml(), nl=False)
            return
        check_output_paths(config, {"config file": params.get("config_file")})
        if config.engine == "lammps":
            from mdband.md.lammps_engine import run_lammps

            started = True
            run_lammps(config, console=console)
        else:
            from mdband.md.lammps_engine import launcher_rank_size

            if launcher_rank_size()[1] > 1:
                raise ConfigError(
                    "--engine ase runs in one process; under mpirun use --engine lammps"
                )
            started = True
            run(config, console=console)
    except SimulationDivergedError as exc:
        raise _DivergedError(_line(exc)) from None
    except RunInterrupted as exc:
        raise _InterruptedError(_line(exc)) from None
    except ResourceExhaustedError as exc:
        raise _ExhaustedError(_line(exc)) from None
    except (MemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):
            raise
        raise _ExhaustedError("out of memory before the run started (nothing written)") from None
    except (MdbandError, OSError) as exc:
        raise UserError(_line(exc)) from None
    except KeyboardInterrupt as exc:  # the ASE engine reports RunInterrupted itself
        what = "" if started else "the run had not started: nothing was written"
        raise _InterruptedError(interrupted_line(exc, what)) from None


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


if __name__ == "__main__":  # pragma: no cover
    sys.exit(command())
