"""``mdband test -m MODEL DATA...``: a model's errors against labelled frames, like ``dp test``.

Exit codes: 0 done; 2 bad input (one line on stderr, nothing written); 130 interrupted
(nothing written).
"""

from __future__ import annotations

import json
import sys

import click

from mdband.cli.common import OneLineCommand, UserError, fail_on_user_error


def _positive(ctx, param, value):
    if value is not None and value < 1:
        raise UserError(f"--{param.name.replace('_', '-')} must be a positive integer, got {value}")
    return value


@click.command("test", cls=OneLineCommand)
@click.argument("data", nargs=-1, required=True)
@click.option(
    "-m",
    "--model",
    required=True,
    metavar="PATH",
    help="Model file (deepmd-kit SeZM checkpoint, mdband file) or builtin:NAME.",
)
@click.option("--head", default=None, help="Head of a multi-task deepmd-kit checkpoint.")
@click.option(
    "-n",
    "--numb-test",
    type=int,
    default=0,
    show_default=True,
    metavar="N",
    help="Frames tested per system: the first N (0: all), as dp test -n.",
)
@click.option(
    "--format",
    "fmt",
    metavar="FMT",
    default=None,
    help="Format of every DATA path as dpdata names it (deepmd/npy, deepmd/hdf5, "
    "vasp/outcar, ...), h5md or an ASE format  [from each path]",
)
@click.option(
    "--type-map",
    metavar="EL,EL",
    default=None,
    help="Elements of numbered types (O,H: type 0 is O) for data that only number "
    "them  [the model's type map]",
)
@click.option(
    "--batch-size",
    type=int,
    default=None,
    callback=_positive,
    metavar="N",
    help="Most frames per model call  [no limit of its own]",
)
@click.option(
    "--batch-atoms",
    type=int,
    default=None,
    callback=_positive,
    metavar="N",
    help="Most atoms per model call  [1024 on CPU, 32768 on CUDA]",
)
@click.option(
    "-d",
    "--detail-file",
    metavar="PREFIX",
    default=None,
    help="Write deepmd-kit's detail files PREFIX.e.out, .e_peratom.out, .f.out, "
    ".v.out, .v_peratom.out (and .s.out for periodic systems with virials).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print a JSON summary on stdout instead of the report."
)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option(
    "--dtype",
    type=click.Choice(["float32", "float64"]),
    default="float32",
    show_default=True,
    help="Model precision (errors computed in float64).",
)
@click.option(
    "--memory-budget",
    default=None,
    metavar="SIZE",
    help="Bytes one model call may use (8GB, 512MiB, auto, off); batches are cut to "
    "fit  [auto: 90 % of the free GPU memory, no limit on CPU]",
)
@click.option(
    "--threads",
    type=int,
    default=None,
    callback=_positive,
    help="CPU threads for torch (process-wide)  [torch's choice]",
)
@click.option("--overwrite", is_flag=True, help="Replace existing detail files.")
@click.pass_context
@fail_on_user_error
def command(ctx, data, model, head, numb_test, fmt, type_map, batch_size, batch_atoms,
            detail_file, as_json, device, dtype, memory_budget, threads, overwrite):  # fmt: skip
    """Test MODEL on the labelled frames of DATA: energy, force, virial errors as dp test.

    DATA: deepmd-kit systems or directories of them, deepmd/hdf5, VASP outputs, extxyz, ASE
    databases, mdband H5MD, any ase.io.read file. Reported are the energy, force and virial MAE
    and RMSE of every system and their weighted average, in the layout and units of
    deepmd-kit's dp test. Frames are evaluated in batches.
    """
    from mdband.loader import load_model
    from mdband.model_test import read_test_systems, report_text, run_test
    from mdband.model_test.details import check_detail_files

    quiet = bool((ctx.obj or {}).get("quiet"))
    if numb_test < 0:
        raise UserError(f"--numb-test must be >= 0, got {numb_test}")
    if detail_file is not None:
        check_detail_files(detail_file, overwrite)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    try:
        pot = load_model(model, device=device, dtype=dtype, head=head,
                         memory_budget=memory_budget)  # fmt: skip
        notes: list[str] = []
        systems = read_test_systems(data, fmt, type_map, pot.type_map, numb_test, notes)
        for note in notes:
            click.echo(note, err=True)
        total = sum(len(fs) for _, fs in systems)
        with _Progress(total, quiet) as advance:
            report = run_test(pot, systems, batch_size=batch_size, batch_atoms=batch_atoms,
                              detail_file=detail_file, overwrite=overwrite,
                              progress=advance)  # fmt: skip
    except KeyboardInterrupt:
        err = UserError("interrupted; nothing written")
        err.exit_code = 130
        raise err from None
    if as_json:
        summary = {"model": str(model), "dtype": dtype, "device": str(pot.device),
                   **report.as_dict()}  # fmt: skip
        click.echo(json.dumps(summary, indent=1))
        return
    for line in report_text(report):
        click.echo(line)
    if not quiet:
        rate = report.frames / report.seconds if report.seconds > 0 else float("inf")
        click.echo(f"# {report.frames} frames in {report.seconds:.3g} s ({rate:.4g} frames/s)"
                   + (f"; wrote {detail_file}.*" if detail_file else ""), err=True)  # fmt: skip


class _Progress:
    """A rich progress bar of frames on stderr (nothing when quiet or not a terminal)."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.quiet = total, quiet
        self._bar = None

    def __enter__(self):
        if self.quiet or not sys.stderr.isatty():
            return lambda n: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        self._bar = Progress("testing", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                             console=Console(stderr=True), transient=True)  # fmt: skip
        self._bar.start()
        task = self._bar.add_task("frames", total=self.total)
        return lambda n: self._bar.update(task, completed=n)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
