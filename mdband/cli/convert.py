"""``mdband convert IN OUT``: deepmd-kit SeZM checkpoint → mdband model file."""

from __future__ import annotations

from pathlib import Path

import click

from mdband.cli.common import fail_on_user_error, user_error


@click.command("convert")
@click.argument("src")
@click.argument("dst")
@click.option("--head", default=None, help="Head of a multi-task deepmd-kit checkpoint.")
@click.option("--overwrite", is_flag=True, help="Replace DST if it exists.")
@click.option(
    "--device", default="auto", show_default=True, help="auto (CUDA when available), cpu, cuda."
)
@fail_on_user_error
def command(src, dst, head, overwrite, device):
    """Convert a deepmd-kit SeZM checkpoint (or mdband file) SRC into an mdband model file DST."""
    from mdband.loader import load_model

    if Path(dst).exists() and not overwrite:
        user_error(f"{dst} exists; pass --overwrite to replace it")
    pot = load_model(src, head=head, dtype="float64", device=device)
    pot.save(dst)
    click.echo(
        f"wrote {dst}: {pot.kind}, type map {' '.join(pot.type_map)}, hash {pot.model_hash[:16]}"
    )
