"""Where the model step's time goes, and what compiling the torch glue buys (one device call).

For DPA4-Mini and the default DPA4 config (random weights, rattled diamond, float32, energy +
forces + virial through ``Potential.evaluate`` with its GPU neighbour list, CUDA graphs on):

* ``profile``: self CUDA time per kernel and input shape of one eager call (graphs off), and
  the forward time of each module (CUDA events around its forward; the backward is not split);
* ``compile``: the user-level call with the torch code between mdband's fused ops compiled by
  ``torch.compile`` in one of these variants, against the same weights uncompiled:

  - ``modules``: every pure-torch module compiled on its own (norms, linear maps, FFNs, the
    message-node grid, radial MLP, readout, fitting net); ``modules:<Class>`` (e.g.
    ``modules:EquivariantFFN``) compiles only the modules of that class;
  - ``breaks``: the setting ``compile=on``: the model compiled with a graph break at each
    fused op, so that every stretch of torch code between two ops is one compiled region.

Usage (device)::

    python3 -m benchmarks.experiments.gpu_profile --configs mini default --sizes 4 8 \
        --variants modules breaks

Records (JSON lines): ``call_ms`` and ``profile`` per config, ``compile`` per variant.
"""

# ruff: noqa: B023  (every timed lambda runs inside its own loop iteration)
from __future__ import annotations

import contextlib
import json
import time
from collections import defaultdict

import numpy as np
import torch

from benchmarks import harness

diamond = harness.diamond
call_args = harness.evaluate_args


def potential(name: str, device: str, **options):
    """Random weights (seed 0, gain 0.5), float32; ``options`` are engine settings."""
    cfg = harness.models.config(name)
    return harness.models.potential(
        cfg, seed=0, gain=0.5, device=device, dtype="float32", **options
    )


def use_stack_configs(paths):
    """The tuning-table override (a context manager) with the best launches of
    ``experiments.gpu_stack`` sweeps for their (L, C) (the last ``best`` record of each file)."""
    from mdband.kernels import tuning

    shapes = dict(tuning.current().so2_stack.shapes)
    for path in paths:
        best = harness.results.read(path, kind="best")[-1]
        key = (best["lmax"], best["channels"])
        lin, gate = best["linear"]["tf32x3"], best["gate"]
        linear = tuning.LinearLaunch(edges=lin["BE"], warps=lin["warps"], stages=lin["stages"])
        gate = tuning.GateLaunch(
            edges=gate["BE"], fwd_warps=gate["fwd_warps"], bwd_warps=gate["bwd_warps"]
        )
        shapes[key] = tuning.StackShape(linear={"tf32x3": linear}, gate=gate)
        print("so2_mix_layer launch", key, shapes[key], flush=True)
    return tuning.override(so2_stack={"shapes": shapes})


# ------------------------------------------------------------------ profile
def kernel_table(pot, atoms, rows: int) -> str:
    with harness.profiling.eager(pot):
        prof = harness.profiling.profile(
            lambda: pot.evaluate(*call_args(atoms)), pot.device, record_shapes=True
        )
    key = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    avg = prof.key_averages(group_by_input_shape=True)
    return avg.table(
        sort_by=key, row_limit=rows, max_name_column_width=40, max_shapes_column_width=70
    )


def source_table(pot, atoms, rows: int) -> str:
    """Self device time of the torch ops of one eager call, per op and the mdband source lines
    that called it (forward ops; backward ops are attributed by autograd node name), largest
    first: where the ~600 small torch kernels of a call come from. Each op is named by the
    innermost model module it ran in (a ``record_function`` range per module, recorded by every
    torch version) and by the mdband Python frames above it where the profiler records them
    (torch 2.13 on the CPU; torch 2.11 on the H200 recorded none on 2026-12-02)."""
    from torch.profiler import record_function

    cuda = torch.cuda.is_available()
    ranges: list = []

    def enter(mod, args, name=""):
        ranges.append(record_function(f"module: {name}").__enter__())

    def leave(mod, args, out):
        ranges.pop().__exit__(None, None, None)

    hooks = []
    for name, mod in pot.model.named_modules():
        if name:
            hooks.append(mod.register_forward_pre_hook(lambda m, a, name=name: enter(m, a, name)))
            hooks.append(mod.register_forward_hook(leave))
    try:
        with harness.profiling.eager(pot):
            prof = harness.profiling.profile(
                lambda: pot.evaluate(*call_args(atoms)), pot.device, with_stack=True
            )
    finally:
        for h in hooks:
            h.remove()

    def source(ev):
        """(innermost module and python frames of mdband above ev, its autograd node if a
        backward op)."""
        # torch ≤ 2.11 lists the frames in ev.stack; newer ones as parent events
        where = [f.split("mdband/")[-1] for f in (ev.stack or []) if "mdband/" in f][:2]
        module, node = None, ev.cpu_parent
        while node is not None:
            if "evaluate_function" in node.name:
                return where, node
            if module is None and node.name.startswith("module: "):
                module = node.name[len("module: ") :]
            if len(where) < 2 and "mdband/" in node.name and ".py(" in node.name:
                where.append(node.name.split("mdband/")[-1])
            node = node.cpu_parent
        return ([f"[{module}]"] if module else []) + where, None

    events = [ev for ev in prof.events() if ev.name.startswith("aten::")]
    # a backward node carries the sequence number of the forward op that made it
    forward_at = {}
    for ev in events:
        where, node = source(ev)
        if node is None and where and ev.sequence_nr >= 0:
            forward_at.setdefault(ev.sequence_nr, where[0])
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for ev in events:
        us = ev.self_device_time_total if cuda else ev.self_cpu_time_total
        if us <= 0:
            continue
        where, node = source(ev)
        if node is not None:
            fwd = forward_at.get(node.sequence_nr, "?")
            where = [f"{node.name.split(': ')[-1]} of {fwd}"]
        acc = sums[(ev.name, " < ".join(where or ["?"]))]
        acc[0] += us / 1e3
        acc[1] += 1
    total = sum(v[0] for v in sums.values())
    lines = [f"{'ms':>8} {'calls':>6}  op  @ source (torch ops: {total:.1f} ms)"]
    for (name, where), (ms, n) in sorted(sums.items(), key=lambda kv: -kv[1][0])[:rows]:
        lines.append(f"{ms:8.3f} {n:6d}  {name}  @ {where}")
    return "\n".join(lines)


def module_forward_ms(pot, atoms) -> dict[str, float]:
    """Forward CUDA time of named modules (summed over calls) in one eager call."""
    model = pot.model
    names = {"descriptor.radial_embedding", "descriptor.output_ffn", "fitting_net"}
    for i, blk in enumerate(model.descriptor.blocks):
        p = f"descriptor.blocks.{i}"
        names |= {f"{p}.pre_so2_norm", f"{p}.so2_conv", f"{p}.post_so2_norm"}
        names |= {f"{p}.so2_conv.message_node_grid_product", f"{p}.so2_conv.post_focus_mix"}
        for j in range(len(blk.ffns)):
            names |= {f"{p}.ffns.{j}", f"{p}.pre_ffn_norms.{j}", f"{p}.post_ffn_norms.{j}"}
    events: dict[str, list] = defaultdict(list)
    handles = []
    cuda = torch.cuda.is_available()
    for name, mod in model.named_modules():
        if name not in names:
            continue

        def pre(m, args, name=name):
            if cuda:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                events[name].append([ev, None])
            else:
                events[name].append([time.perf_counter(), None])

        def post(m, args, out, name=name):
            if cuda:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                events[name][-1][1] = ev
            else:
                events[name][-1][1] = time.perf_counter()

        handles += [mod.register_forward_pre_hook(pre), mod.register_forward_hook(post)]
    try:
        with harness.profiling.eager(pot):
            _, t = harness.once(lambda: pot.evaluate(*call_args(atoms)), pot.device)
    finally:
        for h in handles:
            h.remove()
    out = {"eager call (fwd + bwd)": t.ms}
    for name, pairs in sorted(events.items()):
        if cuda:
            out[name] = sum(a.elapsed_time(b) for a, b in pairs if b is not None)
        else:
            out[name] = 1e3 * sum(b - a for a, b in pairs if b is not None)
    return out


# ------------------------------------------------------------------ compile variants
def pure_torch_modules(model, only: str | None = None):
    from mdband.model.block import InteractionBlock
    from mdband.model.energy import FittingNet
    from mdband.model.ffn import EquivariantFFN
    from mdband.model.layers import EquivariantRMSNorm, SO3Linear
    from mdband.model.message_grid import MessageNodeSO3
    from mdband.model.radial import RadialMLP

    kinds = (EquivariantFFN, EquivariantRMSNorm, SO3Linear, MessageNodeSO3, RadialMLP, FittingNet)
    if only is not None:
        kinds = tuple(k for k in kinds if k.__name__ == only)
    found = []
    for name, mod in model.named_modules():
        if isinstance(mod, kinds) and not isinstance(mod, InteractionBlock):
            # the outermost match only: a compiled module's children are compiled with it
            if not any(name.startswith(f + ".") for f, _ in found):
                found.append((name, mod))
    return found


def compiled_potential(name: str, variant: str, device: str):
    """A potential of ``name`` with the torch code compiled per ``variant``."""
    if variant == "breaks":  # the compile=on setting: graph breaks at the fused ops
        return potential(name, device, compile="on")
    if variant == "modules" or variant.startswith("modules:"):  # modules:<class>: that kind
        pot = potential(name, device)
        only = variant.split(":", 1)[1] if ":" in variant else None
        for _, mod in pure_torch_modules(pot.model, only):
            mod.compile(dynamic=False)
        return pot
    raise SystemExit(f"unknown variant {variant}")


def run_variant(name: str, variant: str, sizes: list[int], repeat: int, device: str) -> dict:
    import torch._dynamo

    torch._dynamo.reset()
    pot = potential(name, device)
    base = {}
    for n in sizes:
        atoms = diamond(n)
        base[n] = pot.evaluate(*call_args(atoms))
    clock = harness.timer.timer(device)
    ref_ms = {
        n: clock.measure(lambda: pot.evaluate(*call_args(diamond(n))), repeat).ms for n in sizes
    }
    del pot
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    pot = compiled_potential(name, variant, device)
    row = {"config": name, "variant": variant}
    try:
        for n in sizes:
            atoms = diamond(n)
            _, first = harness.once(lambda: pot.evaluate(*call_args(atoms)), device)
            ms = clock.measure(lambda: pot.evaluate(*call_args(atoms)), repeat).ms
            r = pot.evaluate(*call_args(atoms))
            row[str(n)] = {
                "atoms": len(atoms),
                "uncompiled_ms": ref_ms[n],
                "compiled_ms": ms,
                "first_call_s": first.ms / 1e3,
                "max_force_diff": float(np.abs(r.forces - base[n].forces).max()),
                "energy_diff": float(abs(r.energy - base[n].energy)),
            }
    except Exception as exc:  # a failing variant is a result, not the end of the run
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    return row


def main(argv=None) -> None:
    ap = harness.parser(
        "experiments.gpu_profile",
        __doc__,
        device="auto",
        configs=["mini", "default"],
        sizes=[4, 8],
        repeat=5,
    )
    ap.add_argument("--profile-size", type=int, default=8)
    ap.add_argument("--variants", nargs="*", default=["modules", "breaks"])
    ap.add_argument("--rows", type=int, default=45)
    ap.add_argument("--sources", action="store_true", help="torch ops by calling source line")
    ap.add_argument(
        "--ops",
        action="store_true",
        help="the fused ops on any device (kernels=ops: the CPU under TRITON_INTERPRET=1)",
    )
    ap.add_argument("--budget-s", type=float, default=480.0, help="skip what would start later")
    ap.add_argument(
        "--stack-config",
        nargs="*",
        default=[],
        help="experiments.gpu_stack JSON-lines files whose best launches to use",
    )
    args = ap.parse_args(argv)
    # the whole run with those launches (left when the script ends)
    contextlib.ExitStack().enter_context(use_stack_configs(args.stack_config))
    results = harness.Results("experiments.gpu_profile", args.out, vars(args), echo=False)
    t_start = time.perf_counter()  # the time budget's clock, not a measurement
    clock = harness.timer.timer(args.device)
    if args.profile_size:
        for name in args.configs:
            pot = potential(name, args.device, **({"kernels": "ops"} if args.ops else {}))
            calls = {}
            for n in args.sizes:
                atoms = diamond(n)
                calls[len(atoms)] = clock.measure(
                    lambda: pot.evaluate(*call_args(atoms)), args.repeat
                ).ms
            print(json.dumps({"call_ms": {name: calls}}), flush=True)
            results.add("call_ms", config=name, ms=calls)
            atoms = diamond(args.profile_size)
            table = kernel_table(pot, atoms, args.rows)
            print(f"== {name}: kernels of one eager call, {len(atoms)} atoms ==\n{table}")
            src = None
            if args.sources:
                src = source_table(pot, atoms, args.rows)
                print(f"== {name}: torch ops by source, {len(atoms)} atoms ==\n{src}", flush=True)
            mods = module_forward_ms(pot, atoms)
            print(json.dumps({"module_forward_ms": {name: mods}}, indent=1), flush=True)
            results.add(
                "profile",
                config=name,
                atoms=len(atoms),
                kernels=table,
                sources=src,
                module_forward_ms=mods,
            )
            del pot
    for variant in args.variants:
        for name in args.configs:
            if time.perf_counter() - t_start > args.budget_s:
                print(f"skipped {name}/{variant}: past the budget", flush=True)
                continue
            row = run_variant(name, variant, args.sizes, args.repeat, args.device)
            print(json.dumps({"compile": row}), flush=True)
            results.add("compile", **row)
    print(f"done in {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
