"""``mdband info MODEL``: what a model file is and how mdband will run it."""

from __future__ import annotations

import json

import click

from mdband.cli.common import fail_on_user_error


@click.command("info")
@click.argument("model")
@click.option(
    "--head",
    default=None,
    help="Head of a multi-task deepmd-kit checkpoint, by name or alias (default: the head "
    "aliased Default).",
)
@click.option(
    "--device", default="auto", show_default=True, help="auto (CUDA when available), cpu, cuda."
)
@click.option("--dtype", default="float32", show_default=True, help="float32 or float64.")
@click.option("--rotation-layout", default=None, help="auto (default), band or dense.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@fail_on_user_error
def command(model, head, device, dtype, rotation_layout, as_json):
    """Show a model's configuration, type map, cutoff, size and rotation layout."""
    from mdband.loader import load_model
    from mdband.settings import ENV, PRECISION_ACCURACY, EngineSettings

    settings = EngineSettings.resolve(rotation_layout=rotation_layout)
    pot = load_model(model, device=device, dtype=dtype, head=head, rotation_layout=rotation_layout)
    info = {
        "model": str(model),
        "kind": pot.kind,
        "type_map": pot.type_map,
        "cutoff": pot.cutoff,
        "parameters": pot.n_parameters(),
        "device": str(pot.device),
        "dtype": str(pot.dtype).replace("torch.", ""),
        "rotation_layout": pot.rotation_layout,
        "rotation_layout_reason": pot.rotation_layout_reason,
        "rotation_layout_requested": settings.rotation_layout,
        "settings": settings.to_dict(),
        "cuda_graphs": pot.cuda_graphs,
        "neighbour_list": pot.neighbour_backend,
        "memory_budget": pot.memory_budget,
        "host_memory": pot.host_memory,
        "stack_precision_accuracy": PRECISION_ACCURACY[settings.stack_precision],
        "charge_spin": None
        if pot.charge_spin is None
        else {"inputs": ["charge", "spin"], "default": pot.charge_spin.default},
        "model_hash": pot.model_hash,
        "mode": "dens" if pot.direct_forces else "ener",
        "head": pot.metadata.get("head"),
        "heads": pot.metadata.get("heads"),
        "spin": None
        if pot.spin is None
        else {
            **pot.spin.to_dict(),
            "magnetic_types": pot.spin.magnetic_types(pot.type_map),
        },  # fmt: skip
        "bridging": _bridging(pot.config) if pot.kind == "sezm" else None,
        "metadata": pot.metadata,
        "config": pot.config,
    }
    if as_json:
        click.echo(json.dumps(info, indent=2, default=str))
        return
    click.echo(f"model            {info['model']} ({pot.kind})")
    click.echo(f"type map         {' '.join(pot.type_map)}")
    click.echo(f"cutoff           {pot.cutoff:g} Å")
    if pot.spin is not None:
        click.echo(f"spin model       {_spin_line(pot)}")
    for line in _head_lines(pot):
        click.echo(line)
    if pot.charge_spin is None:
        click.echo("charge / spin    not used (no add_chg_spin_ebd)")
    else:
        click.echo(f"charge / spin    {pot.charge_spin.describe()}")
    click.echo(f"parameters       {info['parameters']:,}")
    click.echo(f"device / dtype   {info['device']} / {info['dtype']}")
    click.echo(
        f"rotation layout  {info['rotation_layout']} (requested "
        f"{info['rotation_layout_requested']}, {ENV['rotation_layout']} may override): "
        f"{info['rotation_layout_reason']}"
    )
    click.echo(f"cuda graphs      {info['cuda_graphs']}")
    click.echo(f"neighbour list   {info['neighbour_list']}")
    click.echo(f"memory budget    {info['memory_budget']} (${ENV['memory_budget']})")
    click.echo(f"host memory      {info['host_memory']} (${ENV['host_memory']})")
    click.echo(
        f"SO(2) products   {settings.stack_precision} (${ENV['stack_precision']}): "
        f"{info['stack_precision_accuracy']}"
    )
    click.echo(f"model hash       {pot.model_hash[:16]}")
    click.echo(
        "settings         "
        + ", ".join(f"{k}={v} (${ENV[k]})" for k, v in settings.to_dict().items())
    )
    if pot.kind == "sezm":
        cfg = pot.config
        keys = (
            "channels",
            "l_schedule",
            "n_radial",
            "mixing_layers",
            "n_focus",
            "n_atten_head",
            "radial_so2_mode",
            "radial_so2_rank",
            "edge_norm",
            "ffn_so3_grid",
            "message_node_so3",
            "so3_readout",
            "version",
        )
        click.echo("config           " + ", ".join(f"{k}={cfg[k]}" for k in keys if k in cfg))
        click.echo(f"bridging         {_bridging_text(info['bridging'])}")


def _bridging(config: dict) -> dict:
    """Return the zone bridging of a SeZM config: method and window (Å)."""
    from mdband.config import SeZMConfig

    cfg = SeZMConfig.from_dict(config)  # the window's defaults are left out of the dict
    if cfg.bridging == "none":
        return {"method": "none"}
    return {
        "method": cfg.bridging,
        "r_inner": cfg.bridging_r_inner,
        "r_outer": cfg.bridging_r_outer,
    }


def _bridging_text(b: dict) -> str:
    if b["method"] == "none":
        return "none"
    return (
        f"{b['method'].upper()} (deepmd-kit bridging_method): ZBL repulsion on every pair within "
        f"the cutoff; network geometry clamped and sources gated over "
        f"[{b['r_inner']:g}, {b['r_outer']:g}] Å"
    )


def _head_lines(pot) -> list[str]:
    """List the heads of a multi-task checkpoint (with aliases), the one evaluated, and the mode."""
    from mdband.io.deepmd import describe_heads

    lines = []
    heads, head = pot.metadata.get("heads"), pot.metadata.get("head")
    if heads:
        lines.append(f"heads            {describe_heads(heads)}")
        asked = pot.metadata.get("head_requested")
        how = "none given: the head aliased Default" if asked is None else f"asked for {asked!r}"
        lines.append(f"head             {head} ({how})")
    if pot.direct_forces:
        sel = pot.config.get("sel") if isinstance(pot.config, dict) else None
        near = f", the {sel} nearest neighbours of each atom (sel)" if sel else ""
        lines.append(
            "mode             dens (deepmd-kit's denoising heads): energy from the dens energy "
            f"head, direct forces, no virial{near}"
        )
    else:
        lines.append("mode             ener: forces and virial from the energy's gradient")
    return lines


def _spin_line(pot) -> str:
    """Describe in one line what a spin model is and what it needs."""
    sp = pot.spin
    magnetic = " ".join(sp.magnetic_types(pot.type_map)) or "none"
    line = f"scheme {sp.scheme}, magnetic types {magnetic}"
    if sp.scheme == "deepspin":
        scales = ", ".join(f"{t} {v:g}" for t, v in zip(pot.type_map, sp.virtual_scale) if v)
        line += f", virtual_scale {scales or 'none'} (Å/μB), sel {sp.sel}"
    return line + "; needs per-atom magnetic moment vectors (μB)"
