"""``mdband convert IN OUT``: convert a model to an mdband model file or a deepmd-kit checkpoint.

IN is a deepmd-kit SeZM checkpoint, an mdband file or builtin:NAME; OUT an mdband model file
(``OUT.mdband``) or a deepmd-kit training checkpoint (``OUT.pt``).
"""

from __future__ import annotations

import click

from mdband.cli.common import fail_on_user_error, user_error


@click.command("convert")
@click.argument("src")
@click.argument("dst")
@click.option(
    "--to",
    "fmt",
    type=click.Choice(["mdband", "deepmd"]),
    default=None,
    help="Format of DST: mdband (a .mdband file) or deepmd (a deepmd-kit 3.2 training "
    "checkpoint, .pt)  [from DST's name]",
)
@click.option(
    "--precision",
    type=click.Choice(["float32", "float64"]),
    default=None,
    help="deepmd: precision of the checkpoint's weights and computation [float64].",
)
@click.option(
    "--head", default=None, help="Head (name or alias) of a multi-task deepmd-kit checkpoint."
)
@click.option("--overwrite", is_flag=True, help="Replace DST if it exists.")
@click.option(
    "--device", default="auto", show_default=True, help="auto (CUDA when available), cpu, cuda."
)
@fail_on_user_error
def command(src, dst, fmt, precision, head, overwrite, device):
    """Convert the model SRC into DST: an mdband model file or a deepmd-kit checkpoint.

    DST is an mdband model file (DST.mdband, or --to mdband) or a deepmd-kit training
    checkpoint (DST.pt, or --to deepmd) that deepmd-kit's DeepPot, `dp --pt test` and
    `dp --pt freeze` read with the same numbers. A DST named .pt is always a deepmd-kit
    checkpoint.
    """
    from mdband.io.files import claim_outputs
    from mdband.io.model_output import output_model_format
    from mdband.loader import load_model

    fmt = output_model_format(dst, fmt)
    if precision is not None and fmt != "deepmd":
        user_error("--precision applies to deepmd-kit checkpoints (--to deepmd)")
    inputs = {} if str(src).startswith("builtin:") else {"model": src}
    with claim_outputs({"output": dst}, inputs, overwrite=overwrite):
        pot = load_model(src, head=head, dtype="float64", device=device)
        if fmt == "deepmd":
            pot.save_deepmd(dst, precision=precision or "float64")
            what = f"deepmd-kit checkpoint ({precision or 'float64'})"
        else:
            pot.save(dst)
            what = "mdband model file"
    click.echo(
        f"wrote {dst}: {what}, {pot.kind}, type map {' '.join(pot.type_map)}, "
        f"hash {pot.model_hash[:16]}"
    )
