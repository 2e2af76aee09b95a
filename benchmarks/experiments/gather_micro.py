"""Experiment: what gathering 647,154 rows of a (4,096, W) tensor costs on a GPU (torch vs Triton).

Not part of the product: the measurement behind :mod:`mdband.kernels.take_rows`
(``results/2026-12-02-h200-gather-micro.log``, made by two drafts of this script: torch's
``index_select`` ≈ 0.39 ms at every W from 8 to 192, a Triton copy 0.04–0.05 ms). Usage (device):
``python3 -m benchmarks.experiments.gather_micro``. Times by
:func:`benchmarks.gpu_kernels.bench` (CUDA events, L2 flushed); one record per width.
"""

# ruff: noqa: B023  (every timed lambda runs inside its own loop iteration)
from __future__ import annotations

import torch
import triton
import triton.language as tl

from benchmarks import harness
from benchmarks.gpu_kernels import bench

E, N = 647154, 4096


CUDA = torch.device("cuda")


@triton.jit
def _take(x_ptr, i_ptr, o_ptr, E, C: tl.constexpr, BE: tl.constexpr):
    e = tl.program_id(0) * BE + tl.arange(0, BE)
    m = e < E
    r = tl.load(i_ptr + e, mask=m, other=0)
    c = tl.arange(0, C)
    v = tl.load(x_ptr + r[:, None] * C + c[None, :], mask=m[:, None])
    tl.store(o_ptr + e[:, None].to(tl.int64) * C + c[None, :], v, mask=m[:, None])


def take(x, i):
    o = torch.empty(i.shape[0], x.shape[1], device=x.device)
    _take[(triton.cdiv(i.shape[0], 64),)](x, i, o, i.shape[0], C=x.shape[1], BE=64)
    return o


def main(argv=None):
    args = harness.parser("experiments.gather_micro", __doc__).parse_args(argv)
    results = harness.Results("experiments.gather_micro", args.out, vars(args), echo=False)
    d = "cuda"
    idx = torch.randint(0, N, (E,), device=d)
    i32, srt = idx.to(torch.int32), idx.sort().values
    for C in (8, 32, 64):
        x = torch.randn(N, C, device=d)
        assert torch.equal(take(x, idx), x[idx])
        ones = torch.ones(E, C, device=d)
        row = {
            "index_select": 1e3 * bench(lambda: x.index_select(0, idx), CUDA)[0],
            "3d view": 1e3 * bench(lambda: x.unsqueeze(1).index_select(0, idx), CUDA)[0],
            "x[idx]": 1e3 * bench(lambda: x[idx], CUDA)[0],
            "int32": 1e3 * bench(lambda: x.index_select(0, i32), CUDA)[0],
            "sorted": 1e3 * bench(lambda: x.index_select(0, srt), CUDA)[0],
            "triton": 1e3 * bench(lambda: take(x, idx), CUDA)[0],
            "index_add": 1e3 * bench(lambda: torch.zeros_like(x).index_add_(0, idx, ones), CUDA)[0],
        }
        results.add("gather", C=C, us=row)
        print(f"C={C}: " + ", ".join(f"{k} {v:.0f} us" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
