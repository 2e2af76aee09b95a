"""Experiment: candidate tf32x3 SO(2) linear kernels (times and errors on one GPU).

Not part of the product: the exploration behind the TMA kernel of ``so2_stack`` (BENCHMARKS.md),
and the next candidate, ``lin_pair`` (the |m| = 1 rows in degree pairs with Gauss's three complex
products: 25 % fewer tensor-core products for those rows, 17 % in all; checked in the interpreter by
``tests/benchmarks/test_linear_variants.py``).
``python -m benchmarks.experiments.linear_variants [--lmax L --channels C --product-only]``
records one JSON line per variant (kind ``variant``: time, useful TFLOP/s, error against
float64); the product's kernel is timed in both orientations, one or two output rows per
program (``rows``), tf32x3 and fp16x3.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from benchmarks import harness
from benchmarks.gpu_kernels import bench
from mdband.kernels import tuning
from mdband.kernels.so2_stack import launch as so2_launch
from mdband.kernels.so2_stack import op as so2_op
from mdband.kernels.so2_stack import reference as ss
from mdband.kernels.so2_stack import weights as sw
from mdband.kernels.so2_stack.split_dots import rna_tf32


@triton.jit
def _trunc(x):
    return (x.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)


_rna = rna_tf32  # round to the nearest TF32 value (the product kernel's split)


@triton.jit
def lin_uni(
    x_ptr,
    res_ptr,
    w_ptr,
    y_ptr,
    E,
    L: tl.constexpr,
    C: tl.constexpr,
    BE: tl.constexpr,
    RES: tl.constexpr,
):
    """Builtin tf32x3, one loop for every output row; w (F, Dm, 2L, C_out, C_in)."""
    DM: tl.constexpr = 3 * L + 1
    NK: tl.constexpr = 2 * L
    j = tl.program_id(0)
    f = tl.program_id(2).to(tl.int64)
    e0 = tl.program_id(1).to(tl.int64) * BE
    el = tl.arange(0, BE)
    em = (el < E - e0)[:, None]
    c = tl.arange(0, C)
    tile = (f * E + e0) * (DM * C)
    xo = el[:, None] * (DM * C) + c[None, :]
    xt = x_ptr + tile
    acc = tl.zeros((BE, C), tl.float32)
    m0 = j <= L
    nk = tl.where(m0, L + 1, 2 * L)
    xr0 = tl.where(m0, 0, L + 1)
    wbase = (f * DM + j) * (NK * C * C)
    wo = c[None, :] * C + c[:, None]
    for k in range(nk):
        xa = tl.load(xt + (xo + (xr0 + k) * C), mask=em, other=0.0)
        w = tl.load(w_ptr + (wbase + k * (C * C) + wo))
        acc = tl.dot(xa, w, acc, input_precision="tf32x3")
    if RES:
        acc += tl.load(res_ptr + tile + (xo + j * C), mask=em, other=0.0)
    tl.store(y_ptr + tile + (xo + j * C), acc, mask=em)


@triton.jit
def lin_tma(
    xh_d,
    xl_d,
    res_d,
    wh_d,
    wl_d,
    y_d,
    L: tl.constexpr,
    C: tl.constexpr,
    BE: tl.constexpr,
    RES: tl.constexpr,
    BUILTIN: tl.constexpr,
    XSPLIT: tl.constexpr = 0,
):
    """TMA descriptors: x (F, E, Dm·C) tiles [1, BE, C] (zero-filled / clipped past E);
    w (F·Dm·2L·C, C) tiles [C, C] stored [c_out][c_in]. BUILTIN: one tf32x3 dot of xh (the raw
    x) and wh (the raw w); XSPLIT 1: x split by truncation in registers, 2: the raw x as the
    hi operand (the tensor core reads its TF32 bits) and only lo = x − trunc(x) formed; else three
    tf32 dots of the pre-split operands."""
    DM: tl.constexpr = 3 * L + 1
    NK: tl.constexpr = 2 * L
    j = tl.program_id(0)
    f = tl.program_id(2)
    e0 = tl.program_id(1) * BE
    acc = tl.zeros((BE, C), tl.float32)
    m0 = j <= L
    nk = tl.where(m0, L + 1, 2 * L)
    xr0 = tl.where(m0, 0, L + 1)
    wrow = (f * DM + j) * (NK * C)
    for k in range(nk):
        xc = (xr0 + k) * C
        wr = wrow + k * C
        if BUILTIN:
            xa = xh_d.load([f, e0, xc]).reshape(BE, C)
            w = wh_d.load([wr, 0])
            acc = tl.dot(xa, w.T, acc, input_precision="tf32x3")
        elif XSPLIT == 2:  # the raw x as the hi operand: the tensor core truncates it
            xa = xh_d.load([f, e0, xc]).reshape(BE, C)
            xl = _rna(xa - _trunc(xa))
            wh = wh_d.load([wr, 0])
            acc = tl.dot(xl, wh.T, acc, input_precision="tf32")
            wl = wl_d.load([wr, 0])
            acc = tl.dot(xa, wl.T, acc, input_precision="tf32")
            acc = tl.dot(xa, wh.T, acc, input_precision="tf32")
        elif XSPLIT:
            xa = xh_d.load([f, e0, xc]).reshape(BE, C)
            xh = _trunc(xa)
            xl = xa - xh
            wh = wh_d.load([wr, 0])
            acc = tl.dot(xl, wh.T, acc, input_precision="tf32")
            wl = wl_d.load([wr, 0])
            acc = tl.dot(xh, wl.T, acc, input_precision="tf32")
            acc = tl.dot(xh, wh.T, acc, input_precision="tf32")
        else:
            xl = xl_d.load([f, e0, xc]).reshape(BE, C)
            wh = wh_d.load([wr, 0])
            acc = tl.dot(xl, wh.T, acc, input_precision="tf32")
            xh = xh_d.load([f, e0, xc]).reshape(BE, C)
            wl = wl_d.load([wr, 0])
            acc = tl.dot(xh, wl.T, acc, input_precision="tf32")
            acc = tl.dot(xh, wh.T, acc, input_precision="tf32")
    if RES:
        acc += res_d.load([f, e0, j * C]).reshape(BE, C)
    y_d.store([f, e0, j * C], acc.reshape(1, BE, C))


@triton.jit
def _dot3(a, wh, wl, acc):
    """acc + a·(wh + wl)ᵀ with three TF32 products, a split in registers (as the product)."""
    ah = _rna(a)
    al = _rna(a - ah)
    acc = tl.dot(al, wh.T, acc, input_precision="tf32")
    acc = tl.dot(ah, wl.T, acc, input_precision="tf32")
    return tl.dot(ah, wh.T, acc, input_precision="tf32")


@triton.jit
def lin_pair(
    x_d,
    res_d,
    wh_d,
    wl_d,
    ph_d,
    pl_d,
    y_d,
    L: tl.constexpr,
    C: tl.constexpr,
    BE: tl.constexpr,
    RES: tl.constexpr,
):
    """Candidate: the m = 0 rows as the product kernel (one output row per program), the
    |m| = 1 rows in degree pairs (l, −1), (l, +1) per program with Gauss's three complex
    products: t1 = (x₋ + x₊)·Wu, t2 = x₊·(Wu + Wv), t3 = x₋·(Wv − Wu), h₋ = t1 − t2,
    h₊ = t1 + t3: 27 instead of 36 TF32 dot groups per edge block at L = 3, each x tile
    loaded by 3 programs instead of 6. Grid ((2L+1)·cdiv(E, BE), F); wh, wl the product's
    tiles (m = 0 rows used), ph, pl the pair tiles of :func:`pair_tiles`."""
    DM: tl.constexpr = 3 * L + 1
    NK: tl.constexpr = 2 * L
    G: tl.constexpr = 2 * L + 1
    pid = tl.program_id(0)
    g = pid % G
    f = tl.program_id(1)
    e0 = (pid // G) * BE
    if g <= L:
        wrow = (f * DM + g) * (NK * C)
        acc = tl.zeros((BE, C), tl.float32)
        for k in range(L + 1):
            xa = x_d.load([f, e0, k * C]).reshape(BE, C)
            wr = wrow + k * C
            acc = _dot3(xa, wh_d.load([wr, 0]), wl_d.load([wr, 0]), acc)
        if RES:
            acc += res_d.load([f, e0, g * C]).reshape(BE, C)
        y_d.store([f, e0, g * C], acc.reshape(1, BE, C))
    else:
        lo = g - (L + 1)
        base = (f * L + lo) * 3 * L
        t1 = tl.zeros((BE, C), tl.float32)
        t2 = tl.zeros((BE, C), tl.float32)
        t3 = tl.zeros((BE, C), tl.float32)
        for k in range(L):
            xm = x_d.load([f, e0, (L + 1 + k) * C]).reshape(BE, C)
            xp = x_d.load([f, e0, (2 * L + 1 + k) * C]).reshape(BE, C)
            ra = (base + k) * C
            rb = (base + L + k) * C
            rd = (base + 2 * L + k) * C
            t1 = _dot3(xm + xp, ph_d.load([ra, 0]), pl_d.load([ra, 0]), t1)
            t2 = _dot3(xp, ph_d.load([rb, 0]), pl_d.load([rb, 0]), t2)
            t3 = _dot3(xm, ph_d.load([rd, 0]), pl_d.load([rd, 0]), t3)
        yn = t1 - t2
        yp = t1 + t3
        jn = L + 1 + lo
        jp = 2 * L + 1 + lo
        if RES:
            yn += res_d.load([f, e0, jn * C]).reshape(BE, C)
            yp += res_d.load([f, e0, jp * C]).reshape(BE, C)
        y_d.store([f, e0, jn * C], yn.reshape(1, BE, C))
        y_d.store([f, e0, jp * C], yp.reshape(1, BE, C))


def pair_tiles(w0, wm, F, L, C, transpose=False):
    """(F·L·3·L·C, C) tiles [f, l_out, q, l_in, c_out, c_in] of Wu, Wu + Wv, Wv − Wu (of the
    transposed map, the backward's, with ``transpose``)."""
    _, Wu, Wv = sw.oriented(w0, wm, F, L, transpose)

    def t(m):  # (F, L·C in, L·C out) -> (F, L out, L in, C out, C in)
        return m.reshape(F, L, C, L, C).permute(0, 3, 1, 4, 2)

    return torch.stack([t(Wu), t(Wu + Wv), t(Wv - Wu)], 2).reshape(-1, C).contiguous()


def pair_linear(x, res, w0, wm, L, be=64, warps=4, stages=2, transpose=False):
    """x·W + res (x·Wᵀ + res with ``transpose``) by :func:`lin_pair` (tf32x3 products)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    F, E, _, C = x.shape
    y = torch.empty_like(x)
    wh, wl = sw.split_tf32(sw.weight_tiles(w0, wm, F, L, C, transpose))
    ph, pl = sw.split_tf32(pair_tiles(w0, wm, F, L, C, transpose))
    rows = [TensorDescriptor.from_tensor(t.view(F, E, -1), [1, be, C]) for t in (x, res, y)]
    wd = [TensorDescriptor.from_tensor(t, [C, C]) for t in (wh, wl, ph, pl)]
    lin_pair[((2 * L + 1) * triton.cdiv(E, be), F)](
        rows[0],
        rows[1],
        *wd,
        rows[2],
        L=L,
        C=C,
        BE=be,
        RES=True,
        num_warps=warps,
        num_stages=stages,
    )
    return y


def split_host(t):
    hi = (t.view(torch.int32) & -8192).view(torch.float32)
    return hi, t - hi


def main(argv=None):
    ap = harness.parser("experiments.linear_variants", __doc__, device="cuda")
    ap.add_argument("--edges", type=int, default=647154)
    ap.add_argument("--lmax", type=int, default=3)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--product-only", action="store_true", help="only the product's kernel")
    ap.add_argument(
        "--tma-only",
        action="store_true",
        help="only the TMA split variants and the product's tf32x3 launch",
    )
    args = ap.parse_args(argv)
    results = harness.Results("experiments.linear_variants", args.out, vars(args))
    dev = args.device  # cpu: a smoke run under TRITON_INTERPRET=1
    L, C, F, E = args.lmax, args.channels, 1, args.edges
    g = torch.Generator(device="cpu").manual_seed(0)
    DM = 3 * L + 1
    x = torch.randn(F, E, DM, C, generator=g).to(dev)
    w0 = (torch.randn((L + 1) * C, F * (L + 1) * C, generator=g) / 16).to(dev)
    wm = (torch.randn(L * C, F * 2 * L * C, generator=g) / 14).to(dev)
    ne = min(E, 20000)
    x64 = x[:, :ne].double()
    refs = [ss.so2_linear(x64, w0.double(), wm.double(), L, t, gauss=False) + x64 for t in (0, 1)]
    wp = sw.weight_tiles(w0, wm, F, L, C, False)
    wh, wl = split_host(wp)
    xh, xl = split_host(x)
    flop = 2 * C * C * ((L + 1) ** 2 + 4 * L * L) * E * F

    def report(name, fn, out, transpose=False):
        """One variant's record: kernel ms (:func:`benchmarks.gpu_kernels.bench`; on a CPU,
        the interpreter, a figure of no meaning), useful TFLOP/s, error against float64."""
        ref = refs[int(transpose)]
        try:
            ms = bench(fn, torch.device(dev))[0]
        except Exception as exc:  # noqa: BLE001 - an experiment: record and go on
            results.add("variant", variant=name, error=str(exc)[:200])
            return
        err = ((out[:, :ne].double() - ref).abs().max() / ref.abs().max()).item()
        tf = flop / ms / 1e9
        ran = [dataclasses.asdict(v) for k, v in so2_launch._FITTED.items() if k[0] == "linear"]
        results.add(
            "variant",
            variant=name,
            ms=round(ms, 3),
            useful_tflops=round(tf, 1),
            rel_err=err,
            launch=ran[-1] if ran else None,
        )

    y = torch.empty_like(x)
    if not args.product_only:
        experiments(x, y, wp, wh, wl, xh, xl, w0, wm, L, C, F, E, report, results, args.tma_only)
    # so2_op._linear is called here outside its triton_op: torch's wrap_triton would then trace each
    # launch and keep its TensorDescriptors (and so x, y) in its kernel side table for good
    from torch._library.triton import set_wrap_triton_enabled

    with set_wrap_triton_enabled(False):
        product(x, w0, wm, L, C, report, results, args.tma_only)


XSPLIT_CODE = {"xsplit": 1, "xraw": 2}


def experiments(x, y, wp, wh, wl, xh, xl, w0, wm, L, C, F, E, report, results, tma_only=False):
    """The earlier candidates (pointer kernel, pre-split TMA variants, the Gauss pair kernel)."""
    DM = 3 * L + 1
    for be, wa, stg in [] if tma_only else [(128, 8, 2), (128, 8, 3), (64, 4, 3)]:
        tag = f"{be}/{wa}/{stg}"
        grid = (DM, triton.cdiv(E, be), F)
        report(
            "uni " + tag,
            lambda be=be, wa=wa, stg=stg, grid=grid: lin_uni[grid](
                x, x, wp, y, E, L=L, C=C, BE=be, RES=True, num_warps=wa, num_stages=stg
            ),
            y,
        )
    from triton.tools.tensor_descriptor import TensorDescriptor

    def descs(be):
        x2 = lambda t: TensorDescriptor.from_tensor(t.view(F, E, DM * C), [1, be, C])  # noqa: E731
        w2 = lambda t: TensorDescriptor.from_tensor(t.view(-1, C), [C, C])  # noqa: E731
        return x2(xh), x2(xl), x2(x), w2(wh), w2(wl), x2(y), x2(x), w2(wp)

    runs = [
        ("pre", 128, 8, 2),
        ("pre", 64, 4, 3),
        ("pre", 64, 4, 2),
        ("pre-raw", 128, 8, 2),
        ("builtin", 128, 8, 3),
        ("builtin", 128, 8, 4),
        ("builtin", 64, 4, 4),
        ("xsplit", 128, 8, 3),
        ("xsplit", 128, 8, 2),
        ("xsplit", 64, 4, 3),
        ("xraw", 128, 8, 2),
        ("xraw", 128, 8, 3),
        ("xraw", 64, 4, 2),
        ("xraw", 128, 4, 2),
    ]
    if tma_only:
        runs = [r for r in runs if r[0] in ("xsplit", "xraw", "builtin")]
    for mode, be, wa, stg in runs:
        dxh, dxl, dx, dwh, dwl, dy, draw, dwp = descs(be)
        first = {"pre": dxh, "pre-raw": draw, "builtin": draw, "xsplit": draw, "xraw": draw}[mode]
        d = (first, dxl, dx, dwp if mode == "builtin" else dwh, dwl, dy)
        report(
            f"tma-{mode} {be}/{wa}/{stg}",
            lambda be=be, wa=wa, stg=stg, d=d, mode=mode: lin_tma[(DM, triton.cdiv(E, be), F)](
                *d,
                L=L,
                C=C,
                BE=be,
                RES=True,
                BUILTIN=mode == "builtin",
                XSPLIT=XSPLIT_CODE.get(mode, 0),
                num_warps=wa,
                num_stages=stg,
            ),
            y,
        )
    for be, wa, stg in [] if tma_only else [(64, 4, 2), (64, 4, 3), (128, 8, 2), (32, 4, 2)]:
        try:
            out = pair_linear(x, x, w0, wm, L, be, wa, stg)
        except Exception as exc:  # noqa: BLE001 - an experiment: record and go on
            results.add("variant", variant=f"pair-gauss {be}/{wa}/{stg}", error=str(exc)[:300])
            continue
        report(
            f"pair-gauss {be}/{wa}/{stg}",
            lambda be=be, wa=wa, stg=stg: pair_linear(x, x, w0, wm, L, be, wa, stg),
            out,
        )


def product(x, w0, wm, L, C, report, results, tma_only=False):
    """The product's kernel in both orientations: one output row per program (rows = 1) or two
    rows of one m-group sharing each x tile's load and split (rows = 2), per mode and launch."""
    launches = [
        (128, 8, 2, 1),
        (64, 4, 2, 1),
        (128, 8, 2, 2),
        (64, 4, 2, 2),
        (64, 8, 2, 2),
        (128, 8, 1, 2),
        (64, 4, 3, 2),
        (32, 4, 2, 2),
        (256, 8, 2, 2),
    ]
    if tma_only:
        launches = launches[:1]
    table = tuning.current().so2_stack
    shapes = {key: shape for key, shape in table.shapes.items() if key != (L, C)}
    for mode in ("tf32x3",) if tma_only else ("tf32x3", "fp16x3"):
        for be, warps, stages, rows in launches:
            linear = dict(table.linear)
            linear[mode] = tuning.LinearLaunch(edges=be, warps=warps, stages=stages, rows=rows)
            so2_launch.forget_fitted_launches()
            with tuning.override(so2_stack={"linear": linear, "shapes": shapes}):
                for t in (False, True):
                    tag = f"mdband {mode} {'xWt' if t else 'xW'} {be}/{warps}/{stages} rows={rows}"
                    try:
                        out = so2_op._linear(x, x, w0, wm, L, t, mode)
                    except Exception as exc:  # noqa: BLE001 - an experiment: record and go on
                        results.add("variant", variant=tag, error=str(exc)[:1500])
                        continue
                    fn = lambda t=t, mode=mode: so2_op._linear(x, x, w0, wm, L, t, mode)  # noqa: E731
                    report(tag, fn, out, t)


if __name__ == "__main__":
    main()
