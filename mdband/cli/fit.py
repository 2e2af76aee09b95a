"""``mdband fit``: train a SeZM model from scratch or fine-tune one; write an mdband model file.

Settings come from ``--config fit.toml`` (see :mod:`mdband.fit.config`) and the flags; flags
given on the command line win. Exit codes: 0 done; 2 bad input (one line on stderr);
3 the training diverged; 4 out of memory; 130 stopped by SIGINT or SIGTERM (the last
checkpoint is kept; ``--resume`` continues).
"""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from mdband.cli.common import Interrupted, UserError, fail_on_user_error, interrupted_line


class _DivergedError(UserError):
    exit_code = 3


class _OneLineCommand(click.Command):
    """Report click's own usage errors (bad flag values) as one line, exit code 2."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise UserError(exc.format_message().replace("\n", " ")) from None


def _int_list(value: str | None):
    if value is None:
        return None
    try:
        return [int(x) for x in str(value).replace(" ", "").split(",") if x]
    except ValueError:
        raise UserError(f"--l-schedule must be comma-separated integers, got {value!r}") from None


# flag -> FitConfig field (training settings)
_TRAIN_FLAGS = (
    "epochs",
    "batch_size",
    "lr",
    "lr_final_ratio",
    "warmup",
    "weight_decay",
    "ema_decay",
    "energy_weight",
    "force_weight",
    "virial_weight",
    "val_fraction",
    "seed",
    "refit_shift",
    "max_frames",
    "energy_key",
    "forces_key",
    "virial_key",
    "checkpoint",
    "checkpoint_every",
    "resume",
    "overwrite",
    "device",
    "dtype",
    "threads",
    "log",
    "head",
    "data_format",
    "format",
)
# flag -> [model] option (architecture of a model trained from scratch)
_MODEL_FLAGS = ("channels", "lmax", "n_blocks", "rcut", "n_radial", "mixing_layers")


@click.command("fit", cls=_OneLineCommand)
@click.argument("data", nargs=-1, type=click.Path())
@click.option(
    "-o",
    "--output",
    type=click.Path(),
    help="Model to write: NAME.mdband (mdband's file) or NAME.pt (deepmd-kit checkpoint).",
)
@click.option(
    "--format",
    type=click.Choice(["mdband", "deepmd"]),
    help="Format of --output: mdband, or deepmd (a deepmd-kit 3.2 training checkpoint that "
    "DeepPot, dp --pt test and dp --pt freeze read) [from the output's name].",
)
@click.option(
    "--data-format",
    metavar="FMT",
    help="Format of DATA as dpdata names it (deepmd/npy, deepmd/npy/mixed, deepmd/hdf5, "
    "deepmd/raw, lammps/dump, vasp/outcar, vasp/xml, extxyz, ...) [from each path].",
)
@click.option("--init", default=None, help="Model to fine-tune (checkpoint, mdband file).")
@click.option("--config", "config_file", type=click.Path(), help="TOML file with the settings.")
@click.option("--epochs", type=int, help="Passes over the training set [50].")
@click.option("--batch-size", type=int, help="Frames per optimiser step [4].")
@click.option("--lr", type=float, help="Peak learning rate of AdamW [3e-3].")
@click.option("--lr-final-ratio", type=float, help="Final / peak learning rate [0.01].")
@click.option("--warmup", type=float, help="Fraction of the steps with linear warm-up [0.05].")
@click.option("--weight-decay", type=float, help="AdamW weight decay [0].")
@click.option("--ema-decay", type=float, help="Weight averaging (0 disables) [0.99].")
@click.option("--energy-weight", type=float, help="Weight of the per-atom energy MSE [10].")
@click.option("--force-weight", type=float, help="Weight of the force MSE [1].")
@click.option("--virial-weight", type=float, help="Weight of the per-atom virial MSE [1].")
@click.option("--val-fraction", type=float, help="Fraction of frames held out [0.1].")
@click.option("--seed", type=int, help="Seed of the split, shuffling and initial weights [0].")
@click.option("--refit-shift", is_flag=True, default=None, help="Fine-tuning: refit energy shift.")
@click.option("--max-frames", type=int, help="Use a random subset of this many frames.")
@click.option("--energy-key", help="info key of the energy (default: calculator / 'energy').")
@click.option("--forces-key", help="arrays key of the forces (default: calculator / 'forces').")
@click.option("--virial-key", help="info key of the virial (default: 'virial' or stress).")
@click.option(
    "--type-map",
    help="Type map of a new model, e.g. Cu,Ni: its types in order, which also name the numbered "
    "types of the data (type 0, LAMMPS type 1, is Cu) [elements of the data].",
)
@click.option("--channels", type=int, help="New model: channels [16].")
@click.option("--lmax", type=int, help="New model: maximum degree [1].")
@click.option("--n-blocks", type=int, help="New model: interaction blocks [1].")
@click.option("--l-schedule", help="New model: lmax of each block, e.g. 2,1.")
@click.option("--rcut", type=float, help="New model: cutoff in Å [5.0].")
@click.option("--n-radial", type=int, help="New model: radial basis functions [8].")
@click.option("--mixing-layers", type=int, help="New model: SO(2) mixing layers [1].")
@click.option("--checkpoint", type=click.Path(), help="Training checkpoint [OUTPUT.ckpt].")
@click.option("--checkpoint-every", type=int, help="Write the checkpoint every N epochs [5].")
@click.option("--resume", is_flag=True, default=None, help="Continue from the checkpoint.")
@click.option("--overwrite", is_flag=True, default=None, help="Replace existing outputs.")
@click.option("--device", help="auto (CUDA when available, else CPU), cpu, cuda [auto].")
@click.option("--dtype", help="Training precision, float32 or float64 [float32].")
@click.option("--threads", type=int, help="CPU threads for torch.")
@click.option(
    "--head", help="Head (name or alias) of a multi-task deepmd-kit checkpoint (with --init)."
)
@click.option("--log", type=click.Path(), help="Also write the per-epoch lines to this file.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@click.pass_context
@fail_on_user_error
def command(ctx, data, output, init, config_file, quiet, type_map, l_schedule, **flags):
    """Train a SeZM model on DATA: deepmd-kit systems, LAMMPS dumps, VASP or ASE files.

    DATA: deepmd-kit systems (npy, npy/mixed, hdf5, raw), LAMMPS dumps with --type-map, VASP
    OUTCAR/vasprun.xml, extxyz and other ASE files, ASE .db.

    From scratch (architecture from [model] in --config or the model flags), or fine-tune
    --init MODEL keeping its type map. Writes the averaged weights as an mdband model file
    (-o NAME.mdband) or a deepmd-kit checkpoint (-o NAME.pt) and prints the validation errors.
    """
    from rich.console import Console

    from mdband.fit import FitConfig, TrainingDivergedError, fit

    def given(name):
        return ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE

    quiet = quiet or bool((ctx.obj or {}).get("quiet"))  # mdband -q fit ...

    settings: dict = {}
    if data:
        settings["data"] = list(data)
    if output:
        settings["output"] = output
    if init:
        settings["init"] = init
    for name in _TRAIN_FLAGS:
        if given(name) and flags.get(name) is not None:
            settings[name] = flags[name]
    if type_map:
        settings["type_map"] = [s for s in type_map.replace(" ", "").split(",") if s]
    model = {k: flags[k] for k in _MODEL_FLAGS if given(k) and flags.get(k) is not None}
    if l_schedule is not None:
        model["l_schedule"] = _int_list(l_schedule)
    if config_file:
        cfg = FitConfig.from_toml(config_file, settings)
        if model:
            cfg = FitConfig.from_mapping({**cfg.to_dict(), "model": {**cfg.model, **model}})
    else:
        if model:
            settings["model"] = model
        cfg = FitConfig.from_mapping(settings)
    if not cfg.data:
        raise UserError("no training data: give DATA paths or 'data' in --config")
    if cfg.output is None:
        raise UserError("--output FILE is required")
    console = Console(stderr=True)
    try:
        result = fit(config=cfg, progress=not quiet, console=console)
    except TrainingDivergedError as exc:
        raise _DivergedError(str(exc)) from None
    except KeyboardInterrupt as exc:
        ck = cfg.checkpoint_path
        hint = f"continue with --resume ({ck})" if Path(ck).exists() else ""
        raise Interrupted(interrupted_line(exc, hint)) from None
    _report(result, console)


def _report(result, console) -> None:
    from rich.table import Table

    table = Table(title="validation errors", title_justify="left")
    table.add_column("")
    table.add_column("E RMSE\nmeV/atom", justify="right")
    table.add_column("E MAE\nmeV/atom", justify="right")
    table.add_column("F RMSE\nmeV/Å", justify="right")
    table.add_column("F MAE\nmeV/Å", justify="right")
    rows = (("before", result.initial_metrics), ("after", result.metrics))
    for name, m in rows:
        if m is None:
            continue
        table.add_row(
            name,
            f"{m.energy_rmse:.3f}",
            f"{m.energy_mae:.3f}",
            f"{m.force_rmse:.2f}",
            f"{m.force_mae:.2f}",
        )
    if result.metrics is None:
        console.print("no validation frames (val_fraction = 0 or a single frame)")
    else:
        console.print(table)
    click.echo(
        f"wrote {result.output} ({result.n_train} training / {result.n_val} validation frames, "
        f"{result.elapsed:.1f} s)"
    )
    m = result.metrics
    if m is not None:
        click.echo(
            f"validation: energy RMSE {m.energy_rmse:.3f} meV/atom (MAE {m.energy_mae:.3f}), "
            f"force RMSE {m.force_rmse:.2f} meV/Å (MAE {m.force_mae:.2f})"
        )
