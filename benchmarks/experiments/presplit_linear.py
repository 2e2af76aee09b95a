"""Experiment: the SO(2) linear kernel on x pre-split into fp16 hi/lo parts (times, errors).

Not part of the product: the exploration behind :mod:`mdband.kernels.so2_stack.presplit`. The
in-register kernel (:mod:`mdband.kernels.so2_stack.linear`) loads each fp32 x tile once per output
row that reads it (4 times at m = 0, 6 at |m| = 1 for L = 3) and splits it in registers each
time; its one-fp16-product mode still took 1.64 ms at the default shape (647,154 edges, L = 3,
C = 64), against a tensor-core floor of ≈ 0.3 ms. The candidates take x already split, as its
producer would write it: xh, xl fp16 (xl carries 2¹¹, as the packed weights' lo parts) and
power-of-two scales that put the largest |x| into [2¹³, 2¹⁴), either one per edge over all its
rows (:func:`lin_f16pre`: hi·hi and the cross products in two accumulators, the scales applied
once at the end) or one per edge and row (the product's kernel, which scales each k-tile's
products); NR output rows per program share each x tile (W tiles of NR·C output channels).
``--gate-split`` times the producer the product uses, the gate backward kernel, writing fp32
or split.

``python -m benchmarks.experiments.presplit_linear [--edges E --lmax L --channels C]`` records
one JSON line per variant (kind ``variant``; kernel times by
:func:`benchmarks.gpu_kernels.bench`, CUDA events, L2 flushed): the product's tf32x3 and
fp16x3 kernels, the split pass alone (a Triton kernel: what fusing it into the producer would
save), and the candidate per launch (ms, useful TFLOP/s, error against float64 relative to
the largest output). Checked in the interpreter by
``tests/benchmarks/test_presplit_variants.py``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from benchmarks import harness
from benchmarks.gpu_kernels import bench
from mdband.kernels import tuning
from mdband.kernels.so2_stack import launch as so2_launch
from mdband.kernels.so2_stack import op as so2_op
from mdband.kernels.so2_stack import presplit as ps
from mdband.kernels.so2_stack import reference as ss
from mdband.kernels.so2_stack import split_dots as sd
from mdband.kernels.so2_stack import weights as sw

LO = sw.FP16_LO_SCALE


@triton.jit
def split_rows(
    x_ptr, xh_ptr, xl_ptr, inv_ptr, N, R: tl.constexpr, RP: tl.constexpr, BE: tl.constexpr
):
    """Rows of x (N, R) fp32 -> xh, xl (N, R) fp16 and inv (N,): x = (xh + xl/2¹¹)·inv."""
    rows = tl.program_id(0).to(tl.int64) * BE + tl.arange(0, BE)
    cols = tl.arange(0, RP)
    m = (rows < N)[:, None] & (cols < R)[None, :]
    off = rows[:, None] * R + cols[None, :]
    x = tl.load(x_ptr + off, mask=m, other=0.0)
    s, inv = sd.row_scales(x)
    xs = x * s[:, None]
    xh = xs.to(tl.float16)
    xl = ((xs - xh.to(tl.float32)) * 2048.0).to(tl.float16)
    tl.store(xh_ptr + off, xh, mask=m)
    tl.store(xl_ptr + off, xl, mask=m)
    tl.store(inv_ptr + rows, inv, mask=rows < N)


@triton.jit
def lin_f16pre(
    xh_d,
    xl_d,
    inv_ptr,
    res_d,
    wh_d,
    wl_d,
    y_d,
    w_inv,
    E,
    L: tl.constexpr,
    C: tl.constexpr,
    BE: tl.constexpr,
    NR: tl.constexpr,
):
    """The product's pre-split kernel (:mod:`mdband.kernels.so2_stack.presplit`,
    same grid and tiles) with one scale per edge (inv (F·E,)) instead of one per edge and row:
    the k-tiles' products accumulate in two fp32 accumulators inside the tensor-core chain
    (hi·hi; the cross products) and the scales apply once at the end."""
    # the index code of the product's kernel, kept here so the product's stays as timed
    DM: tl.constexpr = 3 * L + 1
    NK: tl.constexpr = 2 * L
    P: tl.constexpr = DM // NR
    pid = tl.program_id(0)
    blk = pid % P
    f = tl.program_id(1)
    e0 = (pid // P) * BE
    j0 = blk * NR
    m0 = j0 <= L
    nk = tl.where(m0, L + 1, NK)
    xr0 = tl.where(m0, 0, L + 1)
    wrow = (f * P + blk) * (NK * NR * C)
    acc_h = tl.zeros((BE, NR * C), tl.float32)
    acc_l = tl.zeros((BE, NR * C), tl.float32)
    for k in range(nk):
        xc = (xr0 + k) * C
        xh = xh_d.load([f, e0, xc]).reshape(BE, C)
        xl = xl_d.load([f, e0, xc]).reshape(BE, C)
        wr = wrow + k * (NR * C)
        wh = wh_d.load([wr, 0])
        acc_h = tl.dot(xh, wh.T, acc_h)
        acc_l = tl.dot(xl, wh.T, acc_l)
        acc_l = tl.dot(xh, wl_d.load([wr, 0]).T, acc_l)
    e = e0 + tl.arange(0, BE)
    inv = tl.load(inv_ptr + (f * E + e).to(tl.int64), mask=e < E, other=0.0)
    y = (acc_h + acc_l * (1.0 / 2048.0)) * (inv * w_inv)[:, None]
    y += res_d.load([f, e0, j0 * C]).reshape(BE, NR * C)
    y_d.store([f, e0, j0 * C], y.reshape(1, BE, NR * C))


def split_x(x, be=16, warps=4, per_row=False):
    """(xh, xl, inv) of x (F, E, Dm, C) by :func:`split_rows` (one scale per edge, or per edge
    and row)."""
    F, E, dm, C = x.shape
    n, r = (F * E * dm, C) if per_row else (F * E, dm * C)
    xh = torch.empty(x.shape, dtype=torch.float16, device=x.device)
    xl = torch.empty_like(xh)
    inv = torch.empty(n, dtype=torch.float32, device=x.device)
    split_rows[(triton.cdiv(n, be),)](
        x, xh, xl, inv, n, R=r, RP=triton.next_power_of_2(r), BE=be, num_warps=warps
    )
    return xh, xl, inv


def presplit_linear(
    parts, res, w0, wm, L, nr=1, be=128, warps=8, stages=2, per_row=False, transpose=False
):
    """x·W + res (x·Wᵀ + res) from ``parts`` = :func:`split_x` (x): one scale per edge by
    :func:`lin_f16pre`, per edge and row (``per_row``) by the product's
    :func:`mdband.kernels.so2_stack.launch.presplit_linear` at this launch (weights packed once
    per weight pair, as in the product)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    xh, xl, inv = parts
    F, E, dm, C = xh.shape
    if per_row:
        so2_launch.forget_fitted_launches()
        launch = tuning.LinearLaunch(edges=be, warps=warps, stages=stages, rows=nr)
        with tuning.override(so2_stack={"presplit": (launch,)}):
            split = ps.SplitRows(xh, xl, inv.view(F, E, dm))
            return so2_launch.presplit_linear(split, res, w0, wm, L, transpose)
    y = torch.empty(xh.shape, dtype=torch.float32, device=xh.device)

    def d(t, width):
        return TensorDescriptor.from_tensor(t.view(F, E, dm * C), [1, be, width])

    wh, wl, scale = sw.packed_weights(w0, wm, F, L, C, transpose, "fp16x3", rows=nr)
    wd = [TensorDescriptor.from_tensor(t, [nr * C, C]) for t in (wh, wl)]
    lin_f16pre[((dm // nr) * triton.cdiv(E, be), F)](
        d(xh, C),
        d(xl, C),
        inv,
        d(res, nr * C),
        *wd,
        d(y, nr * C),
        1.0 / scale,
        E,
        L=L,
        C=C,
        BE=be,
        NR=nr,
        num_warps=warps,
        num_stages=stages,
    )
    return y


def row_blocks(L):
    """NR values that divide both m-groups (L + 1 and 2L rows)."""
    return [nr for nr in (1, 2, 4) if (L + 1) % nr == 0 and (2 * L) % nr == 0]


def kernel_ms(fn) -> float:
    """Median ms of ``fn``'s kernels on the GPU."""
    return bench(fn, torch.device("cuda"))[0]


def main(argv=None):
    ap = harness.parser("experiments.presplit_linear", __doc__)
    ap.add_argument("--edges", type=int, default=647154)
    ap.add_argument("--lmax", type=int, default=3)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--scale", type=float, default=1.0, help="x's magnitude (range check)")
    ap.add_argument(
        "--gate-split",
        action="store_true",
        help="only the gate backward kernel per launch, writing gh in fp32 and split",
    )
    args = ap.parse_args(argv)
    results = harness.Results("experiments.presplit_linear", args.out, vars(args))
    if args.gate_split:
        return gate_split_sweep(args.edges, args.lmax, args.channels, results)
    L, C, F, E = args.lmax, args.channels, 1, args.edges
    dm = 3 * L + 1
    g = torch.Generator(device="cpu").manual_seed(0)
    x = (torch.randn(F, E, dm, C, generator=g) * args.scale).cuda()
    w0 = (torch.randn((L + 1) * C, F * (L + 1) * C, generator=g) / 16).cuda()
    wm = (torch.randn(L * C, F * 2 * L * C, generator=g) / 14).cuda()
    ne = min(E, 20000)
    x64 = x[:, :ne].double()
    ref = ss.so2_linear(x64, w0.double(), wm.double(), L, False, gauss=False) + x64
    flop = 2 * C * C * ((L + 1) ** 2 + 4 * L * L) * E * F

    def report(name, fn, **extra):
        try:
            out = fn()
            ms = kernel_ms(fn)
        except Exception as exc:  # noqa: BLE001 - an experiment: record and go on
            results.add("variant", variant=name, error=str(exc)[:400])
            return None
        row = {"variant": name, "ms": round(ms, 3), **extra}
        if out is not None:
            err = ((out[:, :ne].double() - ref).abs().max() / ref.abs().max()).item()
            row.update(useful_tflops=round(flop / ms / 1e9, 1), rel_err=err)
        results.add("variant", **row)
        return ms

    from torch._library.triton import set_wrap_triton_enabled

    with set_wrap_triton_enabled(False):  # launches outside a triton_op (linear_variants.py)
        for mode in ("tf32x3", "fp16x3"):
            so2_launch.forget_fitted_launches()
            report(
                f"product {mode}", lambda mode=mode: so2_op._linear(x, x, w0, wm, L, False, mode)
            )
        for be, warps in [(16, 4), (32, 8), (8, 4)]:
            report(
                f"split {be}/{warps}", lambda be=be, warps=warps: (split_x(x, be, warps), None)[1]
            )
        launches = [(128, 8, 2), (128, 8, 3), (64, 4, 3), (64, 4, 4), (128, 4, 4)]
        for per_row in (False, True):
            parts = split_x(x, per_row=per_row)
            for nr in row_blocks(L):
                for be, warps, stages in launches:
                    launch = (nr, be, warps, stages, per_row)

                    def fn(parts=parts, launch=launch):
                        return presplit_linear(parts, x, w0, wm, L, *launch)

                    report(
                        f"presplit {'row' if per_row else 'edge'} nr={nr} {be}/{warps}/{stages}", fn
                    )


def gate_split_sweep(E, L, C, results):
    """The gate backward kernel (``so2_stack.launch.gate_bwd``) per launch, gh in fp32 and split
    (:class:`mdband.kernels.so2_stack.presplit.SplitRows`): ms, and the split's worst element
    against the fp32 output relative to its row's largest."""
    from torch._library.triton import set_wrap_triton_enabled

    g = torch.Generator(device="cpu").manual_seed(1)
    dm = 3 * L + 1
    gy = torch.randn(1, E, dm, C, generator=g).cuda()
    h = torch.randn(1, E, dm, C, generator=g).cuda()
    wg = (torch.randn(C, L * C, generator=g) / C**0.5).cuda()
    full, parts = torch.empty_like(gy), ps.SplitRows.empty_like(gy)
    with set_wrap_triton_enabled(False):
        for be, warps in [(32, 8), (16, 4), (32, 4), (64, 4), (64, 8), (16, 2), (128, 8)]:
            row = {"variant": f"gate bwd {be}/{warps}"}
            for name, out in (("fp32", full), ("split", parts)):
                try:

                    def fn(out=out, be=be, warps=warps):
                        gate = tuning.GateLaunch(edges=be, fwd_warps=warps, bwd_warps=warps)
                        with tuning.override(so2_stack={"gate": gate, "shapes": {}}):
                            so2_launch.gate_bwd(gy, h, wg, out, L)

                    row[f"{name}_ms"] = round(kernel_ms(fn), 3)
                except Exception as exc:  # noqa: BLE001 - an experiment: record and go on
                    row[f"{name}_error"] = str(exc)[:200]
            if "split_ms" in row and "fp32_ms" in row:
                ref = full.double()
                err = (parts.value() - ref).abs() / ref.abs().amax(-1, keepdim=True).clamp_min(
                    1e-30
                )
                row["split_rel_err"] = float(err.max())
            results.add("variant", **row)


if __name__ == "__main__":
    main()
