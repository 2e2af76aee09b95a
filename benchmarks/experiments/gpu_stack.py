"""GPU check and launch sweep of the fused SO(2) mixing layer (``mdband::so2_mix_layer``).

Checks every precision (``ieee``, ``tf32x3``, ``fp16x3``, ``fp16``) forward and backward against a
float64 reference,
times the op against mdband's torch path of the same layer (SO2Linear + GatedActivation, exact
fp32 cuBLAS), sweeps launch configurations (linear kernel, then the gate kernels) and records
the fastest (kind ``best``: ``benchmarks.gpu_model --stack-config`` and
``experiments.gpu_profile --stack-config`` read it from ``--out``).

    python -m benchmarks.experiments.gpu_stack [--edges 647154] [--lmax 3] [--channels 64]

Times by :func:`benchmarks.gpu_kernels.bench` (CUDA events, L2 flushed).
"""

from __future__ import annotations

import itertools
import sys

import torch
import triton

from benchmarks import harness
from benchmarks.gpu_kernels import bench
from mdband.kernels import _common as cm
from mdband.kernels import so2_stack as ss
from mdband.kernels import tuning
from mdband.model.so2 import GatedActivation, SO2Linear

F64, F32 = torch.float64, torch.float32
CUDA = torch.device("cuda")
THRESHOLD = {"ieee": 2e-6, "tf32x3": 2e-5, "fp16x3": 2e-5, "fp16": 2e-3}  # max |err| / max |value|


def inputs(L, C, F, E, device, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(F, E, 3 * L + 1, C, generator=g, dtype=F64)
    w0 = torch.randn((L + 1) * C, F * (L + 1) * C, generator=g, dtype=F64) / ((L + 1) * C) ** 0.5
    wm = torch.randn(L * C, F * 2 * L * C, generator=g, dtype=F64) / (L * C) ** 0.5
    wg = torch.randn(C, F * L * C, generator=g, dtype=F64) / C**0.5
    gy = torch.randn(F, E, 3 * L + 1, C, generator=g, dtype=F64)
    return [t.to(device) for t in (x, w0, wm, wg, gy)]


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max())


def checks(device, L, C):
    rows = []
    for prec, F, gated in itertools.product(ss.PRECISIONS, (1, 2), (True, False)):
        E = 20000
        x, w0, wm, wg, gy = inputs(L, C, F, E, device, seed=F)
        xa = x.clone().requires_grad_(True)
        with cm.force_backend("reference"):
            want, _ = ss.so2_mix_layer_reference(xa, w0, wm, wg, L, gated)
            (gwant,) = torch.autograd.grad(want, xa, gy)
        x32 = x.to(F32).requires_grad_(True)
        with cm.force_backend("triton"):
            y = ss.so2_mix_layer(
                x32, w0.float(), wm.float(), wg.float() if gated else None, L, prec
            )
            (gx,) = torch.autograd.grad(y, x32, gy.float())
        for what, a, b in (("y", y, want), ("grad_x", gx, gwant)):
            r = rel(a, b)
            ok = r <= THRESHOLD[prec]
            rows.append(dict(F=F, E=E, gated=gated, precision=prec, output=what, rel=r, ok=ok))
            print(
                f"  {'ok ' if ok else 'FAIL'} F={F} gated={gated} {prec:6s} {what:6s} {r:.2e}",
                flush=True,
            )
    return rows


def time_config(x, w0, wm, wg, gy, L, prec):
    op, bwd = torch.ops.mdband.so2_mix_layer, torch.ops.mdband.so2_mix_layer_bwd
    with cm.force_backend("triton"):
        _, h = op(x, w0, wm, wg, L, True, prec, True)
        return {
            "fwd_ms": bench(lambda: op(x, w0, wm, wg, L, True, prec, True), CUDA)[0],
            # no backward to come (no_grad): h is not written
            "fwd_nosave_ms": bench(lambda: op(x, w0, wm, wg, L, True, prec, False), CUDA)[0],
            "bwd_ms": bench(lambda: bwd(gy, h, w0, wm, wg, L, True, prec), CUDA)[0],
            "linear_ms": bench(lambda: op(x, w0, wm, wg, L, False, prec, False), CUDA)[0],
        }


def timing(device, L, C, E, configs, precisions=("tf32x3",), gates=True):
    x, w0, wm, wg, gy = (t.float() for t in inputs(L, C, 1, E, device))
    lin = SO2Linear(L, C, C, 1).to(device)
    act = GatedActivation(L, C, 1).to(device)
    with torch.no_grad():
        lin.weight_m0.copy_(w0)
        lin.weight_m[0].copy_(wm)
        act.gate_linear.weight.copy_(wg)
    for p in (*lin.parameters(), *act.parameters()):
        p.requires_grad_(False)
    xa = x.clone().requires_grad_(True)
    out = {}
    y_t = xa + act(lin(xa))
    out["torch_fwd_ms"] = bench(lambda: xa + act(lin(xa)), CUDA)[0]
    out["torch_bwd_ms"] = bench(lambda: torch.autograd.grad(y_t, xa, gy, retain_graph=True), CUDA)[
        0
    ]
    y_t = None
    base = torch.cuda.memory_allocated()
    y_t = xa + act(lin(xa))
    out["torch_saved_MB"] = (torch.cuda.memory_allocated() - base) / 2**20
    y_t = None
    sweep = []
    runs = [(p, c) for p in precisions for c in configs] + [("ieee", (64, 4, 2))]  # ieee: cuBLAS
    table = tuning.current().so2_stack
    # the sweep's launch, not a tuned per-shape one
    shapes = {key: shape for key, shape in table.shapes.items() if key != (L, C)}
    for prec, (be, warps, stages) in runs:
        linear = dict(table.linear)
        if prec in tuning.SPLIT_MODES:
            linear[prec] = tuning.LinearLaunch(edges=be, warps=warps, stages=stages)
        try:
            with tuning.override(so2_stack={"linear": linear, "shapes": shapes}):
                row = time_config(x, w0, wm, wg, gy, L, prec)
        except Exception as exc:  # a config the compiler refuses (shared memory, registers)
            print(f"  config {be}/{warps}/{stages} {prec}: {type(exc).__name__}: {exc}"[:200])
            continue
        flop = 2 * C * C * ((L + 1) ** 2 + 4 * L * L) * E
        row.update(precision=prec, BE=be, warps=warps, stages=stages)
        row["linear_tflops"] = flop / row["linear_ms"] / 1e9
        sweep.append(row)
        print(
            f"  {prec:7s} BE={be:3d} w={warps} s={stages}: "
            f"fwd {row['fwd_ms']:6.2f} ms (no h {row['fwd_nosave_ms']:6.2f}), "
            f"bwd {row['bwd_ms']:6.2f} ms, linear {row['linear_ms']:6.2f} ms "
            f"({row['linear_tflops']:.1f} TFLOP/s)",
            flush=True,
        )
    out["sweep"] = sweep
    best = {}
    for prec in ss.PRECISIONS:
        rows = [r for r in sweep if r["precision"] == prec]
        if rows:
            b = min(rows, key=lambda r: r["fwd_ms"] + r["bwd_ms"])
            best[prec] = {k: b[k] for k in ("BE", "warps", "stages")}
    out["best"] = best
    linear = dict(table.linear)
    linear.update(
        {
            p: tuning.LinearLaunch(edges=b["BE"], warps=b["warps"], stages=b["stages"])
            for p, b in best.items()
            if p in tuning.SPLIT_MODES
        }
    )
    with tuning.override(so2_stack={"linear": linear, "shapes": shapes}):
        out["gate_sweep"], out["best_gate"] = (
            gate_sweep(x, w0, wm, wg, gy, L) if gates else ([], None)
        )
    return out


def gate_sweep(x, w0, wm, wg, gy, L):
    """Gate kernels' launch (edges per program, warps): the whole op timed per launch with the
    linear kernel at its best; returns (rows, best {BE, fwd_warps, bwd_warps})."""
    C = x.shape[-1]
    rows = []
    for be in (16, 32, 64, 128):
        for warps in (2, 4, 8):
            gate = tuning.GateLaunch(edges=be, fwd_warps=warps, bwd_warps=warps)
            try:
                shapes = {(L, C): tuning.StackShape(gate=gate)}
                with tuning.override(so2_stack={"shapes": shapes}):
                    t = time_config(x, w0, wm, wg, gy, L, "tf32x3")
            except Exception as exc:  # registers or shared memory: not a candidate
                print(f"  gate BE={be} w={warps}: {type(exc).__name__}"[:200])
                continue
            rows.append({"BE": be, "warps": warps, "fwd_ms": t["fwd_ms"], "bwd_ms": t["bwd_ms"]})
            print(
                f"  gate BE={be:3d} w={warps}: fwd {t['fwd_ms']:6.2f} ms, "
                f"bwd {t['bwd_ms']:6.2f} ms",
                flush=True,
            )
    best, best_ms = None, float("inf")
    for be in sorted({r["BE"] for r in rows}):
        fwd = min((r for r in rows if r["BE"] == be), key=lambda r: r["fwd_ms"])
        bwd = min((r for r in rows if r["BE"] == be), key=lambda r: r["bwd_ms"])
        if fwd["fwd_ms"] + bwd["bwd_ms"] < best_ms:
            best_ms = fwd["fwd_ms"] + bwd["bwd_ms"]
            best = {"BE": be, "fwd_warps": fwd["warps"], "bwd_warps": bwd["warps"]}
    return rows, best


def main(argv=None):
    ap = harness.parser("experiments.gpu_stack", __doc__)
    ap.add_argument("--edges", type=int, default=647154)
    ap.add_argument("--lmax", type=int, default=3)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="sweep 6 configurations only")
    ap.add_argument(
        "--precisions",
        nargs="+",
        default=["tf32x3", "fp16x3", "fp16"],
        help="linear-kernel modes swept (ieee is always timed once)",
    )
    ap.add_argument(
        "--configs",
        nargs="+",
        default=None,
        help="linear launches BExWARPSxSTAGES to time (default: the sweep's)",
    )
    ap.add_argument("--no-gate-sweep", action="store_true", help="skip the gate kernels' sweep")
    args = ap.parse_args(argv)
    device = torch.device("cuda")
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    results = harness.Results("experiments.gpu_stack", args.out, vars(args), echo=False)
    result = {"checks": checks(device, args.lmax, args.channels)}
    if args.configs:
        configs = [tuple(int(v) for v in c.split("x")) for c in args.configs]
    elif args.quick:
        configs = [(128, 8, 2), (128, 8, 3), (64, 4, 2), (64, 4, 3), (256, 8, 2), (256, 4, 3)]
    else:
        configs = [(be, w, s) for be in (64, 128, 256) for w in (4, 8) for s in (1, 2, 3)]
    result["timing"] = timing(
        device,
        args.lmax,
        args.channels,
        args.edges,
        configs,
        args.precisions,
        gates=not args.no_gate_sweep,
    )
    ok = all(r["ok"] for r in result["checks"])
    shape = {"lmax": args.lmax, "channels": args.channels, "edges": args.edges}
    for r in result["checks"]:
        results.add("check", **shape, **r)
    t = result["timing"]
    for r in t["sweep"]:
        results.add("linear", **shape, **r)
    for r in t["gate_sweep"]:
        results.add("gate", **shape, **r)
    results.add("torch", **shape, **{k: v for k, v in t.items() if k.startswith("torch_")})
    results.add("best", **shape, linear=t["best"], gate=t["best_gate"], ok=ok)
    print(
        f"torch path: fwd {t['torch_fwd_ms']:.2f} ms, bwd {t['torch_bwd_ms']:.2f} ms, "
        f"saved {t['torch_saved_MB']:.0f} MB; best {t['best']}, "
        f"gate {t['best_gate']}"
    )
    print("ALL CHECKS PASSED" if ok else "CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
