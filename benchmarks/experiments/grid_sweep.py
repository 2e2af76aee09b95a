"""Launch sweep of the fused grid product (``kernels/grid_product.py``) against the torch product.

The grid nets of DPA4-Mini (SO(3) grid, L = 2, kmax = 1: block FFN C = 96, readout C = 192 with
one output row, message-node grid C = 32) and of the default config (S2 grid, L = 3, C = 192),
``--nodes`` nodes (default 4,096), float32: forward and forward + backward ms of the torch path
and of each launch (channels per program BC × warps, the same in both passes), with the
largest relative error against float64. One JSON line per row. ``--device cpu`` is a smoke run
under TRITON_INTERPRET=1 (its times mean nothing).

Usage (device): ``python3 -m benchmarks.experiments.grid_sweep``; put the fastest launches in
the tuning table's ``grid_product`` record (``mdband.kernels.tuning``; backward ms ≈ the
difference). Times by :func:`benchmarks.gpu_kernels.bench` (CUDA events, L2 flushed).
"""

# ruff: noqa: B023  (every timed lambda runs inside its own loop iteration)
from __future__ import annotations

import torch

from benchmarks import harness
from benchmarks.gpu_kernels import bench
from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.model.grids import grid_product, s2_projector, so3_projector

CASES = {
    "mini ffn": (lambda: so3_projector(2, 1), 96, None),
    "mini readout": (lambda: so3_projector(2, 1), 192, 1),
    "mini message": (lambda: so3_projector(2, 1), 32, None),
    "default ffn (s2)": (lambda: s2_projector(3), 192, None),
}
LAUNCHES = ("16x2", "16x4", "32x2", "32x4", "32x8", "64x4", "64x8")


def rel(a, b):
    a, b = a.detach().double(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def sweep(name, nodes, device, launches, results):
    make, C, n_rows = CASES[name]
    proj = make()
    K, D = proj.n_frames, (proj.lmax + 1) ** 2
    g = torch.Generator().manual_seed(0)
    left64, right64, gout64 = (
        torch.randn(nodes, D, K * C, generator=g, dtype=torch.float64) for _ in range(3)
    )
    left64, right64, gout64 = left64.to(device), right64.to(device), gout64.to(device)
    gouts = {torch.float64: gout64, torch.float32: gout64.float()}  # no copies inside the timing
    left, right = left64.float().requires_grad_(), right64.float().requires_grad_()

    def run(lft, rgt, fused, backward):
        out = grid_product(proj, lft, rgt, n_rows, fused)
        if not backward:
            return (out,)
        go = gouts[out.dtype][:, : out.shape[1]]
        return (out, *torch.autograd.grad(out, (lft, rgt), go))

    ref = run(left64.requires_grad_(), right64.requires_grad_(), False, True)
    rows = []

    def row(launch, fused):
        res = run(left, right, fused, True)
        err = max(rel(a, b) for a, b in zip(res, ref))
        fwd = bench(lambda: run(left, right, fused, False), device)[0]
        both = bench(lambda: run(left, right, fused, True), device)[0]
        rows.append(
            results.add(
                "row",
                case=name,
                nodes=nodes,
                C=C,
                launch=launch,
                fwd_ms=fwd,
                fwd_bwd_ms=both,
                rel_err_vs_fp64=err,
            )
        )

    row("torch", False)
    with cm.force_backend("triton"):
        for launch in launches:
            bc, warps = (int(v) for v in launch.split("x"))
            each = tuning.GridLaunch(channels=bc, warps=warps)
            # every row runs its own launch, in both passes (no per-shape launch)
            with tuning.override(grid_product={"fwd": each, "bwd": each, "shapes": {}}):
                row(launch, True)
    return rows


def main(argv=None):
    ap = harness.parser("experiments.grid_sweep", __doc__, device="auto")
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--launches", nargs="+", default=list(LAUNCHES), help="BCxWARPS")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    results = harness.Results("experiments.grid_sweep", args.out, vars(args))
    return [
        r for name in args.cases for r in sweep(name, args.nodes, device, args.launches, results)
    ]


if __name__ == "__main__":
    main()
