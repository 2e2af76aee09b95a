"""``mdband model-devi MODELS... --structure FILE``: a committee's deviations over a file.

The deviations over the frames of the file are written as deepmd-kit's ``model_devi.out``
(like ``dp model-devi``).
"""

from __future__ import annotations

from pathlib import Path

import click

from mdband.cli.common import fail_on_user_error, user_error


@click.command("model-devi")
@click.argument("models", nargs=-1, required=True)
@click.option(
    "--structure",
    "-s",
    metavar="FILE",
    required=True,
    help="Frames to evaluate: a deepmd-kit system (npy, npy/mixed, hdf5, raw), a LAMMPS dump, "
    "an mdband H5MD trajectory, VASP OUTCAR/vasprun.xml, extxyz or any ase.io.read file.",
)
@click.option(
    "--format",
    "fmt",
    metavar="FMT",
    default=None,
    help="Format of --structure as dpdata names it (deepmd/npy, lammps/dump, ...), h5md or an "
    "ASE format  [from the path]",
)
@click.option(
    "--type-map",
    metavar="EL,EL",
    default=None,
    help="Type map: the element of each type number (O,H: type 0, LAMMPS type 1, is O) for "
    "files that number their types  [the first model's type map]",
)
@click.option(
    "--output",
    "-o",
    metavar="FILE",
    default="model_devi.out",
    show_default=True,
    help="Model-deviation file to write.",
)
@click.option(
    "--every",
    "-f",
    type=int,
    default=1,
    show_default=True,
    metavar="N",
    help="MD steps between the frames: frame k is step k*N (files that record steps, H5MD "
    "trajectories, LAMMPS dumps, mdband's extxyz exports, keep theirs).",
)
@click.option("--atomic", is_flag=True, help="Append the per-atom force deviations to each row.")
@click.option("--device", default="auto", show_default=True, help="cpu, cuda or auto.")
@click.option(
    "--dtype",
    type=click.Choice(["float32", "float64"]),
    default="float32",
    show_default=True,
    help="Model precision (the deviations are computed in float64).",
)
@click.option(
    "--head", default=None, help="Head (name or alias) of multi-task deepmd-kit checkpoints."
)
@click.option(
    "--batch-size",
    type=int,
    default=None,
    metavar="N",
    help="Most frames per model call  [no limit of its own]",
)
@click.option(
    "--batch-atoms",
    type=int,
    default=None,
    metavar="N",
    help="Most atoms per model call  [1024 on CPU, 32768 on CUDA]",
)
@click.option(
    "--charge",
    type=int,
    default=None,
    metavar="E",
    help="Total charge (e) of every frame, for models trained with deepmd-kit's "
    "add_chg_spin_ebd  [each frame's own (info charge, deepmd-kit data's charge_spin.npy), "
    "else the model's default_chg_spin]",
)
@click.option(
    "--spin",
    type=int,
    default=None,
    metavar="2S+1",
    help="Spin multiplicity of every frame, like --charge.",
)
@click.option("--overwrite", is_flag=True, help="Replace the output file if it exists.")
@fail_on_user_error
def command(
    models,
    structure,
    fmt,
    type_map,
    output,
    every,
    atomic,
    device,
    dtype,
    head,
    batch_size,
    batch_atoms,
    charge,
    spin,
    overwrite,
):
    """Evaluate a committee of MODELS on every frame of --structure; write the deviations.

    MODELS: at least two; deepmd-kit SeZM checkpoints, mdband files or builtin:NAME. The model
    deviations are written in the layout of pair_style deepmd's model_devi.out (7 columns,
    numpy.loadtxt-readable). Every model evaluates the frames in batches; charge/spin models
    each frame under its own total charge and spin multiplicity (--charge, --spin, else the
    frame's, else the model's default).
    """
    from mdband.committee import Committee, model_devi_frames
    from mdband.committee.frames import read_frames
    from mdband.io.files import claim_outputs

    if len(models) < 2:
        user_error(f"a committee needs at least two models, got {len(models)}")
    if every < 1:
        user_error(f"--every must be a positive number of steps, got {every}")
    for flag, value in (("--batch-size", batch_size), ("--batch-atoms", batch_atoms)):
        if value is not None and value < 1:
            user_error(f"{flag} must be a positive integer, got {value}")
    out = Path(output)
    inputs = {"structure": structure}
    for k, model in enumerate(models):
        if not model.startswith("builtin:"):
            inputs[f"model {k + 1}"] = model
    with claim_outputs({"output": out}, inputs, overwrite=overwrite):
        committee = Committee.load(models, device=device, dtype=dtype, head=head)
        notes: list[str] = []
        frames, steps = read_frames(
            structure, fmt, type_map, default_type_map=committee.potentials[0].type_map, notes=notes
        )
        for note in notes:
            click.echo(note, err=True)
        _set_charge_spin(committee, frames, charge, spin)
        rows = model_devi_frames(
            committee,
            frames,
            out,
            every=every,
            steps=steps,
            atomic=atomic,
            overwrite=overwrite,
            batch_size=batch_size,
            batch_atoms=batch_atoms,
        )
    step, worst = max(rows, key=lambda r: r[1].max_devi_f)
    click.echo(
        f"wrote {out}: {len(rows)} frame(s), {len(models)} models; largest max_devi_f "
        f"{worst.max_devi_f:.4g} eV/A at step {step}"
    )


def _set_charge_spin(committee, frames, charge, spin) -> None:
    """Set ``--charge`` / ``--spin`` in every frame's ``info`` (over the file's values).

    Refused when no model of the committee takes them.
    """
    given = {k: v for k, v in (("charge", charge), ("spin", spin)) if v is not None}
    if not given:
        return
    if all(p.charge_spin is None for p in committee.potentials):
        user_error(
            "no model of the committee takes a total charge or spin multiplicity (none was "
            f"trained with add_chg_spin_ebd); remove {' and '.join(f'--{k}' for k in given)}"
        )
    for atoms in frames:
        atoms.info.update(given)
