"""Warps per program of the rotate_mix and aggregate kernels on one GPU.

    python -m benchmarks.experiments.gpu_warps [--edges 647154] [--nodes 4096]
        [--aggregate 3x64 2x32] [--gate 3x64 2x32] [--no-rotate-mix]

Every launch below is set through ``mdband.kernels.tuning.override`` (the tuning table's records
named in brackets). Times rotate_mix's forward and backward (median of
``benchmarks.gpu_kernels.bench``: CUDA events, L2 flushed) for 1, 2, 4 and 8 warps per program,
then the backward for edges per program and pipeline stages of its edge kernel (``rotate_mix``:
edge_block, edge_stages), band storage, L = 3, C = 64, mixer rank 1, and checks that every
launch agrees with the default to 1e-5 relative; then aggregate's walk kernels (``aggregate``:
walk_warps, walk_stages, the prefetches) per (L, C), forward + backward with one attention head,
and its "dot" backward per tl.dot precision (ieee, tf32x3), edges per step and warps; then
so2_mix_layer's backward gate kernel per edges per program and warps (``so2_stack`` shapes' gate
launch), each timed as the gated backward op less the ungated one (the linear kernel alone) and
checked against the default launch; then rotate_mix's by-source "dot" backward of radial rows
per tl.dot precision, edges per step and warps against its edge kernels (``--rotate-mix-dot
rad:3x64``; the mixer has the edge kernels only); radial_basis against its torch path
(``--radial n``); seed_mlp and radial_mlp against theirs (``--seed-mlp 32 64``, ``--radial-mlp
2x32 3x64``). Prints one line per setting, each also a record (kind ``line``) of ``--out``;
times by :func:`benchmarks.gpu_kernels.bench` (CUDA events, L2 flushed).
"""

from __future__ import annotations

import sys

import torch

import benchmarks.gpu_kernels as gk
from benchmarks import harness
from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.kernels.aggregate import aggregate
from mdband.kernels.aggregate.walk import aggregate_walk_bwd_kernel
from mdband.kernels.rotate_mix.backward import rotate_mix_edge_bwd_kernel
from mdband.kernels.so2_stack import launch as so2_launch
from mdband.kernels.so2_stack import op as so2_op
from mdband.kernels.so2_stack.gate import so2_gate_bwd_kernel
from mdband.kernels.so2_stack.linear import so2_linear_kernel
from mdband.so3 import storage as st

#: this run's records (set by :func:`main`)
RESULTS = None


def say(*parts, flush=True) -> None:
    """Print one line of the report and record it (kind ``line``)."""
    text = " ".join(map(str, parts))
    print(text, flush=flush)
    if RESULTS is not None:
        RESULTS.add("line", text=text)


def rel(u, v) -> float:
    """Max-norm difference of u from v relative to v's largest element (0 for empty)."""
    if not u.numel():
        return 0.0
    return float((u - v).abs().max().detach()) / (float(v.abs().max().detach()) or 1.0)


def close(a, b):
    """Every output of a within 1e-5 of b's (relative to b's largest element, :func:`rel`)."""
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    return all(rel(u, v) <= 1e-5 for u, v in zip(a, b))


def compiled_sizes(kernel):
    """(registers, spills, shared bytes) of each compiled variant of a Triton kernel (empty when
    this Triton keeps its cache elsewhere)."""
    out = []
    try:
        for cache in kernel.device_caches.values():
            for ck in cache[0].values():
                out.append((ck.n_regs, ck.n_spills, ck.metadata.shared))
    except (AttributeError, IndexError, TypeError) as exc:  # another Triton's cache layout
        out.append(f"unknown ({type(exc).__name__})")
    return out


def stack_shape(L, C, linear=None, gate=None):
    """``so2_stack`` changes: the (L, C) shape's linear launches updated with ``linear`` (split
    mode → LinearLaunch) and its gate launch set to ``gate`` (None: kept)."""
    table = tuning.current().so2_stack
    old = table.shapes.get((L, C), tuning.StackShape())
    new = tuning.StackShape(linear={**old.linear, **(linear or {})}, gate=gate or old.gate)
    return {"shapes": {**table.shapes, (L, C): new}}


def aggregate_sweep(E, N, L, C, dev):
    """aggregate forward + backward (one attention head, band) per warps and edge-loop stages
    of its walk kernels (``aggregate`` walk_*), each checked against the default launch."""
    c = gk.cast(gk.make_case(E, N, C, L, L, dev, seed=2, H=1, R=1), torch.float32)
    band = st.RotationLayout.BAND

    def fn():
        return gk.run_aggregate(c, band, 1)

    rho = st.rotate_inv_rescale(L, c["y"].dtype, c["y"].device)
    S = st.RotationStorage(band, c["Ls"], c["storage"][band])

    def fwd():  # the forward alone (no graph)
        return aggregate(
            c["y"], S, L, rho, c["dst"], c["N"], c["env"], logits=c["logits"][:, :1], z=c["z"][:1]
        )

    ok = True
    ref = fn()
    launches = [(None, 3, False), (None, 3, True), (None, 1, True), (None, 2, True), (2, 3, True)]
    for warps, stages, prefetch in launches:
        walk = {"walk_warps": warps, "walk_stages": stages}
        with tuning.override(
            aggregate={**walk, "fwd_prefetch": prefetch, "bwd_prefetch": prefetch}
        ):
            ms, ms_fwd = gk.bench(fn, dev)[0], gk.bench(fwd, dev)[0]
            out = fn()
        same = close(out, ref)
        bitwise = all(torch.equal(a, b) for a, b in zip(out, ref) if a is not None)
        ok &= same
        say(
            f"aggregate L={L} C={C} warps={warps or 'auto'} stages={stages} "
            f"prefetch={prefetch}: {ms:7.2f} ms (fwd + bwd), fwd {ms_fwd:6.2f}  "
            f"matches default: {same}  bitwise: {bitwise}",
            flush=True,
        )
    say("aggregate bwd compiles:", compiled_sizes(aggregate_walk_bwd_kernel), flush=True)
    ok &= dot_sweep(fn, fwd, ref, L, C, dev)
    return ok


def dot_sweep(fn, fwd, ref, L, C, dev):
    """The "dot" backward (edges per step as tl.dot) per precision, edges per step and warps
    against the walk's results (fwd + bwd timed, the forward the walk)."""
    ok = True
    runs = [("ieee", 16, 4)] + [
        ("tf32x3", e, w) for e, w in ((8, 4), (16, 2), (16, 4), (16, 8), (32, 4), (32, 8))
    ]
    for prec, edges, warps in runs:
        launch = tuning.DotLaunch(edges=edges, warps=warps)
        change = {"bwd": "dot", "dot_precision": prec, f"dot_{prec}": launch}
        what = f"aggregate L={L} C={C} dot bwd {prec} BE={edges} warps={warps or 'auto'}"
        try:
            with tuning.override(aggregate=change):
                ms = gk.bench(fn, dev)[0]
                err = max(rel(a, b) for a, b in zip(fn(), ref) if a is not None)
        except Exception as exc:  # noqa: BLE001 - a launch that does not fit: record it
            say(f"{what}: {type(exc).__name__}", flush=True)
            continue
        ok &= err < 1e-4
        say(f"{what}: {ms:7.2f} ms (fwd + bwd)  max rel. diff from the walk {err:.1e}", flush=True)
    return ok


def layer_inputs(E, L, C, dev, seed):
    """Two (1, E, 3L+1, C) edge tensors and one focus stream's SO(2) layer weights (w0, wm,
    wg), scaled to unit-variance outputs."""
    g = torch.Generator(device=dev).manual_seed(seed)

    def r(*shape, scale=1.0):
        return torch.randn(*shape, generator=g, device=dev) * scale

    a, b = r(1, E, 3 * L + 1, C), r(1, E, 3 * L + 1, C)
    w0 = r((L + 1) * C, (L + 1) * C, scale=((L + 1) * C) ** -0.5)
    wm = r(L * C, 2 * L * C, scale=(L * C) ** -0.5)
    return a, b, w0, wm, r(C, L * C, scale=C**-0.5)


def gate_sweep(E, L, C, dev):
    """so2_mix_layer's backward gate kernel per edges per program and warps (the shape's gate
    launch of the tuning table; F = 1, tf32x3): ms of the gate alone = the gated backward op
    less the ungated one."""
    gy, h, w0, wm, wg = layer_inputs(E, L, C, dev, seed=5)

    def bwd(gated):
        return lambda: so2_op._mix_bwd_op(gy, h, w0, wm, wg, L, gated, "tf32x3")

    lin_ms = gk.bench(bwd(False), dev)[0]
    moved = 3 * gy.numel() * 4 / 1e9  # gy, h read and gh written once (GB)
    buf = torch.empty_like(gy)
    mul_ms = gk.bench(lambda: torch.mul(gy, h, out=buf), dev)[0]
    say(
        f"gate L={L} C={C}: linear x·Wᵀ alone {lin_ms:.3f} ms; torch gy*h (same bytes) "
        f"{mul_ms:.3f} ms ({moved / mul_ms:.2f} TB/s)",
        flush=True,
    )
    ok = True
    ref = bwd(True)()
    for be, warps in ((16, 2), (16, 4), (32, 4), (32, 8), (64, 4), (64, 8), (128, 8)):
        gate = tuning.GateLaunch(edges=be, fwd_warps=4, bwd_warps=warps)
        try:
            with tuning.override(so2_stack=stack_shape(L, C, gate=gate)):
                ms = gk.bench(bwd(True), dev)[0] - lin_ms
                err = rel(bwd(True)(), ref)
        except Exception as exc:  # noqa: BLE001 - a launch that does not fit: record it
            say(f"gate L={L} C={C} BE={be} warps={warps}: {type(exc).__name__}", flush=True)
            continue
        ok &= err <= 1e-5
        say(
            f"gate L={L} C={C} BE={be:3d} warps={warps}: {ms:6.3f} ms "
            f"({moved / ms:.2f} TB/s)  max rel. diff from the default {err:.1e}",
            flush=True,
        )
    say("gate bwd compiles:", compiled_sizes(so2_gate_bwd_kernel), flush=True)
    return ok


def zonal_timing(E, N, L, C, dev):
    """zonal_embed forward + backward with each backward kernel (``zonal.bwd``: the walk, and
    "auto": float32's tf32x3 dot), band storage, every output (out and the radial, storage and
    scale cotangents) checked against the torch reference to 1e-5 relative."""
    from mdband.kernels.zonal import zonal_embed

    c = gk.cast(gk.make_case(E, N, C, L, L, dev, seed=3, H=1, R=1), torch.float32)
    band = st.RotationLayout.BAND
    rot = c["storage"][band].clone().requires_grad_()
    S = st.RotationStorage(band, L, rot)
    radial, scale = c["radial"].clone().requires_grad_(), c["s"].clone().requires_grad_()

    def fn():
        out = zonal_embed(S, radial, c["dst"], scale)
        return (out, *torch.autograd.grad(out, (radial, rot, scale), c["gout"]))

    with cm.force_backend("reference"):
        ref = fn()
    ok = True
    for kernel in ("walk", "auto"):
        with tuning.override(zonal={"bwd": kernel}):
            ms = gk.bench(fn, dev)[0]
            errs = [rel(u, v) for u, v in zip(fn(), ref)]
        ok &= max(errs) <= 1e-5
        say(
            f"zonal L={L} C={C} bwd {kernel}: fwd + bwd {ms:6.3f} ms; max rel. diff from the "
            f"reference (out, gradial, grot, gs) {' '.join(f'{x:.1e}' for x in errs)}",
            flush=True,
        )
    return ok


def radial_timing(E, n, dev):
    """radial_basis (Bessel, envelopes 5 and 7, rcut 6 Å) forward + backward: the Triton op
    against the torch path it replaced; both against float64 (max error relative to the
    largest element)."""
    from mdband.kernels import radial_basis as rb

    g = torch.Generator(device=dev).manual_seed(5)
    r64 = torch.rand(E, 1, generator=g, device=dev, dtype=torch.float64) * 6.5 + 0.6
    f64 = (torch.arange(1, n + 1, device=dev, dtype=torch.float64) * (torch.pi / 6.0))[None]
    g_rbf = torch.randn(E, n, generator=g, device=dev)
    g_env = torch.randn(E, 1, generator=g, device=dev)
    r, f = r64.float().requires_grad_(), f64.float()

    def run(fused, r=r, f=f, g_env=g_env, g_rbf=g_rbf):
        env, rbf = rb.radial_basis(r, f, 6.0, 5, 7, "bessel", fused=fused)
        return env, rbf, torch.autograd.grad((env, rbf), (r,), (g_env, g_rbf))[0]

    want = run(False, r64.requires_grad_(), f64, g_env.double(), g_rbf.double())
    errs = {
        k: max(rel(u.double(), v) for u, v in zip(run(k == "op"), want)) for k in ("op", "torch")
    }
    ms = {k: gk.bench(lambda k=k: run(k == "op"), dev)[0] for k in ("op", "torch")}
    ok = errs["op"] <= 1e-5
    say(
        f"radial_basis E={E} n={n}: fwd + bwd op {ms['op']:.3f} ms, torch path "
        f"{ms['torch']:.3f} ms; error from float64 op {errs['op']:.1e}, torch "
        f"{errs['torch']:.1e}",
        flush=True,
    )
    return ok


#: widths (R, P, T, H, Q) of the environment seed's MLPs per channel count (env_seed_dims)
SEED_WIDTHS = {32: (16, 32, 8, 64, 32), 64: (16, 32, 16, 128, 64)}


def seed_mlp_timing(E, channels, dev):
    """seed_mlp forward + backward (d/d rbf) against the torch path it would replace (DPA4-Mini's
    widths at 32 channels, the default's at 64); both against float64."""
    from mdband.kernels import seed_mlp as sm

    R, P, T, H, Q = SEED_WIDTHS[channels]
    g = torch.Generator(device=dev).manual_seed(9)

    def m(*shape):
        return torch.randn(*shape, generator=g, device=dev, dtype=torch.float64) / shape[0] ** 0.5

    rbf64 = torch.rand(E, R, generator=g, device=dev, dtype=torch.float64)
    ts, td = (torch.randint(0, 3, (E,), generator=g, device=dev) for _ in range(2))
    rest64 = [
        torch.randn(4, T, generator=g, device=dev, dtype=torch.float64),
        m(R, P),
        m(P, P),
        m(P + 2 * T, H),
        m(H, Q),
    ]
    gg = torch.randn(E, Q, generator=g, device=dev)
    rbf, rest = rbf64.float().requires_grad_(), [t.float() for t in rest64]

    def run(fused, rbf=rbf, rest=rest, gg=gg):
        out = sm.seed_mlp(rbf, ts, td, *rest, fused=fused)
        return out, torch.autograd.grad(out, (rbf,), gg)[0]

    want = run(False, rbf64.requires_grad_(), rest64, gg.double())
    return _fused_mlp_rows(f"seed_mlp E={E} widths {R}/{P}/{T}/{H}/{Q}", "seed_mlp", run, want, dev)


#: launches (edges per program, warps, dot precision) of the seed_mlp and radial_mlp timings
#: (first: the op's launch in the tuning table). 8 warps are left out: (32, 8) ran 2x slower
#: and (64, 8) ended both 2026-12-04 calls with an illegal memory access (triton 3.6, H200)
MLP_RUNS = [
    (32, 4, "auto"),
    (64, 4, "auto"),
    (64, 2, "auto"),
    (128, 4, "auto"),
    (32, 2, "auto"),
    (64, 4, "ieee"),
]


def _fused_mlp_rows(title, op, run, want, dev):
    """One line per launch of the fused edge-MLP op ``op`` (``run(True)``; "seed_mlp" or
    "radial_mlp" in the tuning table) against its torch path (``run(False)``), both against the
    float64 ``want``; True when every launch is within 1e-5."""
    t_torch = gk.bench(lambda: run(False), dev)[0]
    e_torch = max(rel(u.double(), v) for u, v in zip(run(False), want))
    say(
        f"{title}: torch path fwd + bwd {t_torch:.3f} ms, error from float64 {e_torch:.1e}",
        flush=True,
    )
    ok = True
    rec = getattr(tuning.current(), op)
    first = (rec.edges, rec.warps, rec.precision)
    for be, warps, prec in [first] + [r for r in MLP_RUNS if r != first]:
        with tuning.override(**{op: {"edges": be, "warps": warps, "precision": prec}}):
            err = max(rel(u.double(), v) for u, v in zip(run(True), want))
            ms = gk.bench(lambda: run(True), dev)[0]
        ok &= err <= 1e-5
        say(
            f"  op BE={be} warps={warps} {prec}: fwd + bwd {ms:.3f} ms, error from float64 "
            f"{err:.1e}",
            flush=True,
        )
    return ok


def radial_mlp_timing(E, channels, L, dev):
    """radial_mlp (16 radial functions → C → (L+1)·C, no norm, times the envelope) forward +
    backward (d/d rbf, d/d env) against the torch path it would replace; both against float64."""
    from mdband.kernels import radial_mlp as rmlp

    g = torch.Generator(device=dev).manual_seed(13)
    R, C, D = 16, channels, (L + 1) * channels
    f64 = dict(device=dev, dtype=torch.float64)
    rbf64, env64 = torch.rand(E, R, generator=g, **f64), torch.rand(E, 1, generator=g, **f64)
    w64 = [
        torch.randn(R, C, generator=g, **f64) / R**0.5,
        torch.randn(C, D, generator=g, **f64) / C**0.5,
    ]
    go = torch.randn(E, D, generator=g, device=dev)
    rbf, env = rbf64.float().requires_grad_(), env64.float().requires_grad_()
    w = [t.float() for t in w64]

    def run(fused, rbf=rbf, env=env, w=w, go=go):
        out = rmlp.radial_mlp(rbf, w[0], None, w[1], env, fused=fused)
        return (out, *torch.autograd.grad(out, (rbf, env), go))

    want = run(False, rbf64.requires_grad_(), env64.requires_grad_(), w64, go.double())
    return _fused_mlp_rows(f"radial_mlp E={E} widths {R}/{C}/{D}", "radial_mlp", run, want, dev)


def segment_outer_timing(E, N, Q, dev):
    """segment_outer (P = 4, the environment seed) forward + backward: the Triton op against the
    torch path it replaced (products materialised, segment_sum, autograd), checked to 1e-5."""
    from mdband.kernels import segment_outer as so

    g = torch.Generator(device=dev).manual_seed(7)
    index = torch.sort(torch.randint(0, N, (E,), generator=g, device=dev))[0]
    a = torch.randn(E, 4, generator=g, device=dev).requires_grad_()
    b = torch.randn(E, Q, generator=g, device=dev).requires_grad_()
    gout = torch.randn(N, 4, Q, generator=g, device=dev)
    csr_ = cm.csr(index, N)

    def fused():
        out = so.segment_outer(a, b, index, csr_)
        return (out, *torch.autograd.grad(out, (a, b), gout))

    def torch_path():
        out = so.segment_outer(a, b, index, csr_, fused=False)
        return (out, *torch.autograd.grad(out, (a, b), gout))

    ok = close(fused(), torch_path())
    ms = {name: gk.bench(fn, dev)[0] for name, fn in (("op", fused), ("torch", torch_path))}
    say(
        f"segment_outer E={E} N={N} P=4 Q={Q}: fwd + bwd op {ms['op']:.3f} ms, torch path "
        f"{ms['torch']:.3f} ms, matches: {ok}",
        flush=True,
    )
    return ok


#: launches of the linear sweep per (L, C): edges per program, warps, stages, output rows per
#: program (the first of each list is the shape's default; 2026-12-03 sweep in BENCHMARKS.md)
LINEAR_RUNS = {
    (3, 64): [
        (128, 8, 2, 1),
        (128, 16, 2, 1),
        (256, 16, 2, 1),
        (256, 8, 2, 1),
        (64, 8, 2, 1),
        (128, 16, 2, 2),
    ],
    (2, 32): [(256, 4, 3, 1), (128, 4, 3, 1), (128, 4, 2, 2), (256, 8, 2, 1)],
}


def linear_sweep(E, L, C, dev, runs=None, precision="tf32x3"):
    """so2_mix_layer's linear kernel (F = 1) per launch (the tuning table's so2_stack shape
    entry of ``precision``): the ungated forward x·W + x, the ungated backward x·Wᵀ + x and the
    gated forward (linear with the gate epilogue), each checked against the default launch."""
    x, gy, w0, wm, wg = layer_inputs(E, L, C, dev, seed=6)
    none = x.new_empty(0, 0)
    cases = {
        "x·W": lambda: so2_op._mix_op(x, w0, wm, none, L, False, precision, False)[0],
        "x·Wᵀ": lambda: so2_op._mix_bwd_op(gy, x.new_empty(0), w0, wm, none, L, False, precision),
        "gated": lambda: so2_op._mix_op(x, w0, wm, wg, L, True, precision, True),
    }
    flop = 2 * C * C * ((L + 1) ** 2 + 4 * L * L) * E
    ok = True
    refs = {name: fn() for name, fn in cases.items()}
    for be, warps, stages, rows in runs or LINEAR_RUNS.get((L, C), LINEAR_RUNS[3, 64]):
        cfg = tuning.LinearLaunch(edges=be, warps=warps, stages=stages, rows=rows)
        line = f"linear {precision} L={L} C={C} {be}/{warps}/{stages} rows={rows}:"
        with tuning.override(so2_stack=stack_shape(L, C, linear={precision: cfg})):
            for name, fn in cases.items():
                try:
                    ms = gk.bench(fn, dev)[0]
                    err = (
                        rel(fn(), refs[name])
                        if name != "gated"
                        else max(rel(u, v) for u, v in zip(fn(), refs[name]))
                    )
                except Exception as exc:  # noqa: BLE001 - a launch that does not fit: record it
                    line += f" {name} {type(exc).__name__}"
                    continue
                ok &= err <= 1e-5
                line += f" {name} {ms:6.3f} ms ({flop / ms / 1e9:5.1f} TFLOP/s, diff {err:.0e})"
        # the launch that fit where this one was tried first (the cache's key ends with them)
        ran = {v for k, v in so2_launch._FITTED.items() if k[0] == "linear" and k[-1][0] == cfg}
        if ran and ran != {cfg}:
            line += f" (did not fit: ran {ran})"
        say(line, flush=True)
    say("linear compiles:", compiled_sizes(so2_linear_kernel), flush=True)
    return ok


#: launches of the rotate_mix dot sweep (precision, edges per step, warps; None: the default)
RM_DOT_RUNS = [("ieee", 4, None)] + [
    ("tf32x3", e, w) for e, w in ((4, None), (8, 2), (16, 2), (16, 4), (32, 4))
]


def rotate_mix_dot_sweep(E, N, L, C, mode, dev, passes=("bwd",), runs=None):
    """rotate_mix's backward op, edge kernels against the "dot" backward per precision, edges
    per step and warps (band, ``mode`` "rad": radial rows; the mixer, "mix", has the edge kernels
    only), each checked against the edge kernels' results."""
    if mode != "rad" or "bwd" not in passes:
        say(f"rotate_mix {mode} {passes}: no dot kernels (radial rows' backward only)")
        return True
    c = gk.cast(gk.make_case(E, N, C, L, L, dev, seed=3, H=1, R=1), torch.float32)
    scsr = cm.csr(c["src"], N)
    rot = c["storage"][st.RotationLayout.BAND]
    code = st.LAYOUT_CODE[st.RotationLayout.BAND]
    k, b, rad = (c["k"], c["basis"], None) if mode == "mix" else (None, None, c["rad"])
    x, src = c["x"], c["src"]
    ops = {
        "fwd": lambda: torch.ops.mdband.rotate_mix(x, src, rot, code, L, L, k, b, rad, *scsr),
        "bwd": lambda: torch.ops.mdband.rotate_mix_bwd(
            c["gy"], x, src, rot, code, L, L, k, b, rad, *scsr
        ),
    }
    ok = True
    for pas, fn in ops.items():
        if pas not in passes:
            continue
        with tuning.override(rotate_mix={"bwd": "edge"}):
            ref = fn()
            say(
                f"rotate_mix {mode} L={L} C={C} {pas} edge: {gk.bench(fn, dev)[0]:7.3f} ms",
                flush=True,
            )
        for prec, edges, warps in runs or RM_DOT_RUNS:
            warps = warps or tuning.DEFAULTS.rotate_mix.dot_warps
            dot = {"bwd": "dot", "dot_precision": prec, "dot_edges": edges, "dot_warps": warps}
            try:
                with tuning.override(rotate_mix=dot):
                    ms = gk.bench(fn, dev)[0]
                    out = fn()
                err = max(rel(u, v) for u, v in zip(out, ref) if u.numel())
            except Exception as exc:  # noqa: BLE001 - a launch that does not fit
                say(
                    f"rotate_mix {mode} L={L} C={C} {pas} dot {prec} BE={edges} "
                    f"warps={warps}: {type(exc).__name__}",
                    flush=True,
                )
                continue
            ok &= err < 1e-4
            say(
                f"rotate_mix {mode} L={L} C={C} {pas} dot {prec} BE={edges} "
                f"warps={warps or 'auto'}: {ms:7.3f} ms  max rel. diff from edge "
                f"{err:.1e}",
                flush=True,
            )
    return ok


def main(argv=None):
    global RESULTS
    ap = harness.parser("experiments.gpu_warps", __doc__)
    ap.add_argument("--edges", type=int, default=647154)
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument(
        "--aggregate",
        nargs="*",
        default=["3x64", "2x32"],
        help="(L)x(C) shapes of the aggregate sweep (none: skip it)",
    )
    ap.add_argument(
        "--gate",
        nargs="*",
        default=["3x64", "2x32"],
        help="(L)x(C) shapes of the gate backward sweep (none: skip it)",
    )
    ap.add_argument(
        "--linear",
        nargs="*",
        default=[],
        help="(L)x(C) shapes of the linear kernel's launch sweep (LINEAR_RUNS)",
    )
    ap.add_argument(
        "--linear-launches",
        nargs="*",
        default=[],
        help="BExWARPSxSTAGESxROWS launches of that sweep (default LINEAR_RUNS)",
    )
    ap.add_argument("--linear-precisions", nargs="+", default=["tf32x3"])
    ap.add_argument(
        "--zonal", nargs="*", default=[], help="(L)x(C) shapes of the zonal_embed timing"
    )
    ap.add_argument(
        "--segment-outer",
        nargs="*",
        type=int,
        default=[],
        help="widths Q of the segment_outer timing (e.g. 32 64)",
    )
    ap.add_argument(
        "--radial-mlp",
        nargs="*",
        default=[],
        help="LxC cases of the radial_mlp timing (2x32: DPA4-Mini, 3x64: default)",
    )
    ap.add_argument(
        "--seed-mlp",
        nargs="*",
        type=int,
        default=[],
        help="channel counts of the seed_mlp timing (32: DPA4-Mini, 64: default)",
    )
    ap.add_argument(
        "--radial",
        nargs="*",
        type=int,
        default=[],
        help="basis sizes n of the radial_basis timing (e.g. 16)",
    )
    ap.add_argument("--no-rotate-mix", action="store_true", help="skip the rotate_mix sweeps")
    ap.add_argument(
        "--rotate-mix-dot",
        nargs="*",
        default=[],
        help="mode:LxC cases of the rotate_mix dot sweep, mode mix or rad (e.g. rad:3x64)",
    )
    ap.add_argument("--rotate-mix-dot-passes", nargs="+", default=["bwd"])
    ap.add_argument(
        "--rotate-mix-dot-launches",
        nargs="*",
        default=[],
        help="precision:BExwarps launches of that sweep (e.g. tf32x3:16x4; default RM_DOT_RUNS)",
    )
    args = ap.parse_args(argv)
    RESULTS = harness.Results("experiments.gpu_warps", args.out, vars(args), echo=False)
    dev = torch.device("cuda")
    E, N, C, L = args.edges, args.nodes, 64, 3
    c = gk.cast(gk.make_case(E, N, C, L, L, dev, seed=1, H=1, R=1), torch.float32)
    # (the rotate_mix case is built even with --no-rotate-mix: a few seconds)
    scsr = cm.csr(c["src"], N)
    rot = c["storage"][st.RotationLayout.BAND]
    code = st.LAYOUT_CODE[st.RotationLayout.BAND]
    x, src, k, b = c["x"], c["src"], c["k"], c["basis"]

    ops = {
        "rotate_mix fwd": lambda: torch.ops.mdband.rotate_mix(
            x, src, rot, code, L, L, k, b, None, *scsr
        ),
        "rotate_mix bwd": lambda: torch.ops.mdband.rotate_mix_bwd(
            c["gy"], x, src, rot, code, L, L, k, b, None, *scsr
        ),
    }
    ok = True
    if args.no_rotate_mix:
        ops = {}
    with cm.force_backend("triton"):
        for name, fn in ops.items():
            ref = fn()
            for w in (1, 2, 4, 8):
                warps = {"fwd_warps": w, "edge_warps": w, "node_warps": w}
                with tuning.override(rotate_mix=warps):
                    ms = gk.bench(fn, dev)[0]
                    same = close(fn(), ref)
                ok &= same
                say(f"{name:15s} warps={w}: {ms:7.2f} ms  matches default: {same}", flush=True)
        # the backward edge kernel's edges per program and pipeline stages (one warp)
        fn = ops.get("rotate_mix bwd")
        ref = fn() if fn else None
        for eb in (4, 8, 16, 32) if fn else ():
            for stages in (1, 2, 3):
                with tuning.override(rotate_mix={"edge_block": eb, "edge_stages": stages}):
                    ms = gk.bench(fn, dev)[0]
                    same = close(fn(), ref)
                ok &= same
                say(
                    f"rotate_mix bwd  EB={eb:2d} stages={stages}: {ms:7.2f} ms  "
                    f"matches default: {same}",
                    flush=True,
                )
        if fn:
            say("edge kernel compiles:", compiled_sizes(rotate_mix_edge_bwd_kernel), flush=True)
        runs = [
            (p, int(be), int(w))
            for p, bw in (a.split(":") for a in args.rotate_mix_dot_launches)
            for be, w in [bw.split("x")]
        ]
        for case in args.rotate_mix_dot:
            mode, shape = case.split(":")
            ok &= rotate_mix_dot_sweep(
                E,
                N,
                *(int(v) for v in shape.split("x")),
                mode,
                dev,
                args.rotate_mix_dot_passes,
                runs,
            )
        for shape in args.zonal:
            ok &= zonal_timing(E, N, *(int(v) for v in shape.split("x")), dev)
        for q in args.segment_outer:
            ok &= segment_outer_timing(E, N, q, dev)
        for n in args.radial:
            ok &= radial_timing(E, n, dev)
        for c in args.seed_mlp:
            ok &= seed_mlp_timing(E, c, dev)
        for shape in args.radial_mlp:
            lv, cv = (int(v) for v in shape.split("x"))
            ok &= radial_mlp_timing(E, cv, lv, dev)
        lruns = [tuple(int(v) for v in a.split("x")) for a in args.linear_launches]
        for shape in args.linear:
            for prec in args.linear_precisions:
                ok &= linear_sweep(E, *(int(v) for v in shape.split("x")), dev, lruns or None, prec)
        for shape in args.gate:
            ok &= gate_sweep(E, *(int(v) for v in shape.split("x")), dev)
        for shape in args.aggregate:
            ok &= aggregate_sweep(E, N, *(int(v) for v in shape.split("x")), dev)
    RESULTS.add("summary", ok=bool(ok))
    print("ALL CHECKS PASSED" if ok else "CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
