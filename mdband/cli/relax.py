"""``mdband relax``: minimise the energy of a structure (optionally its cell) with ASE.

Exit codes: 0 converged; 1 not converged within --steps (the last structure is written);
2 bad input (one line on stderr, nothing written); 4 out of memory; 130 stopped by SIGINT or
SIGTERM (no output written).
"""

from __future__ import annotations

import sys

import click

from mdband.cli.common import Interrupted, UserError, interrupted_line
from mdband.cli.setting_options import given_settings, setting_options
from mdband.md.relax import RelaxConfig


class _OneLineCommand(click.Command):
    """Report click's own usage errors (bad flag values) as one line, exit code 2."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise UserError(exc.format_message().replace("\n", " ")) from None


class _NotConverged(UserError):
    exit_code = 1


@click.command("relax", cls=_OneLineCommand)
@setting_options(RelaxConfig)
@click.pass_context
def command(ctx, **params):
    """Relax atom positions (and with --cell the cell) until every force is below --fmax.

    ASE's FIRE or BFGS optimiser (FrechetCellFilter for --cell) with the structure's ASE
    constraints kept; prints ASE's step table, then the final energy and largest force, and
    writes --output atomically (never over an existing file unless --overwrite).
    """
    from mdband.errors import MdbandError
    from mdband.md.relax import is_batch, relax

    quiet = bool((ctx.obj or {}).get("quiet"))
    try:
        config = RelaxConfig(**given_settings(ctx, RelaxConfig, params))
        batch = is_batch(config)
        if not quiet:
            mode = "positions and cell" if config.cell else "positions"
            what = " ".join(config.structure) + (" (every image)" if config.all_frames else "")
            click.echo(
                f"mdband relax: {what} with {config.optimizer.upper()}, {mode}, "
                f"fmax {config.fmax:g} eV/Å, at most {config.steps} steps"
            )
            sys.stdout.flush()
        if batch:
            return _relax_many(config, quiet)
        res = relax(config, logfile=None if quiet else sys.stdout)
    except (MdbandError, OSError) as exc:
        raise UserError(" ".join(str(exc).split()) or type(exc).__name__) from None
    except KeyboardInterrupt as exc:
        raise Interrupted(interrupted_line(exc, "no output written")) from None
    if not quiet:
        for note in res.notes:
            click.echo(note)
        line = f"Energy {res.energy:.6f} eV, max force {res.max_force:.4g} eV/Å"
        if res.max_stress is not None:
            line += f", max stress {res.max_stress:.4g} GPa, volume {res.volume:.3f} Å^3"
        click.echo(line)
        state = "Converged" if res.converged else "Not converged"
        click.echo(f"{state} after {res.steps} steps; wrote {config.output}")
    if not res.converged:
        raise _NotConverged(
            f"not converged to fmax {config.fmax:g} eV/Å in {config.steps} steps (max force "
            f"{res.max_force:.4g} eV/Å); the last structure is in {config.output}"
        )


def _relax_many(config, quiet: bool) -> None:
    """Relax several structures in lockstep (:mod:`mdband.md.relax_batch`).

    Exit code 1 when one of them did not converge (all are written).
    """
    from mdband.md.relax_batch import relax_many

    res = relax_many(config, logfile=None if quiet else sys.stdout)
    n, done = len(res.structures), sum(r.converged for r in res.structures)
    if not quiet:
        for note in res.notes:
            click.echo(note)
        click.echo(
            f"Converged {done} of {n} structures (at most {res.steps} steps, "
            f"{res.model_calls} batched model calls); wrote {config.output}"
        )
    if done < n:
        late = [r.source for r in res.structures if not r.converged]
        more = f" and {len(late) - 3} more" if len(late) > 3 else ""
        raise _NotConverged(
            f"{n - done} of {n} structures not converged to fmax {config.fmax:g} eV/Å in "
            f"{config.steps} steps ({', '.join(late[:3])}{more}); all are in {config.output}"
        )
