"""Check and time mdband's Triton kernels on a GPU, band vs dense rotation storage.

Usage (from the repository root)::

    python -m benchmarks.gpu_kernels            # check (moderate sizes) + timing (E ≈ 650k)
    python -m benchmarks.gpu_kernels --full     # more degrees in the check
    python -m benchmarks.gpu_kernels --no-time  # check only

Records (JSON lines, to ``--out`` only: the human summary goes to standard output): one
``check`` per comparison, one ``timing`` per row, a ``summary``; exit code 1 if a check fails.
Needs no SeZM model: only ``mdband.so3`` and ``mdband.kernels`` are imported.

Check stage, for every op, forward and backward (autograd through the registered op):

* band vs dense storage, Triton: bitwise equal (same arithmetic in the same order; the dense
  storage cotangent is compared at the band entries and must be zero elsewhere);
* Triton vs the torch reference, fp64 inputs: max-norm relative error ≤ 1e-6 (typically 1e-14);
* Triton fp32 vs the fp64 reference: ≤ 2e-5 (fp32 rounding of sums over ~100 edges per node).

aggregate is checked with both backward kernel families of the tuning table's ``aggregate.bwd``
("walk", and "dot" as ``aggregate[H=..] dot``), plus "dot" vs "walk" (``aggregate[H=..]
dot~walk``, same thresholds); rotate_mix's radial rows likewise with ``rotate_mix.bwd`` ("edge",
and "dot" as ``rotate_mix[none] dot``, plus ``rotate_mix[none] dot~edge``; the mixer has the
edge kernels only).

Timing stage (fp32; default E = 650 000 edges, N = 4096, C = 64, L = 3, H = 1, R = 1): median
milliseconds between CUDA events (the harness timer, L2 flushed before each call, ``--repeat``
calls after ``--warmup``) of each op's forward and backward op for band and dense storage,
of the torch reference on the same GPU, and the peak extra memory of forward+backward.
aggregate's backward is timed with both kernel families (rows ``aggregate[H]`` = "walk",
``aggregate[H] dot`` = "dot" at its default step size and warps), and, band storage only, the
dot kernel at other (edges per step, warps) launches (``aggregate[H] dot BE=8 w=4``;
``--no-dot-sweep`` skips them); a walk/dot summary follows the table. rotate_mix's radial rows
(``rotate_mix[none]``) the same way: "edge" kernels, ``dot`` rows and the dot sweep; an edge/dot
summary follows. Every setting goes through ``mdband.kernels.tuning.override``.
"""

from __future__ import annotations

import platform
import sys
import types
from pathlib import Path

import torch

try:  # python -m benchmarks.gpu_kernels, or imported
    from benchmarks import harness
except ModuleNotFoundError as exc:  # python benchmarks/gpu_kernels.py: the harness beside it
    if exc.name != "benchmarks":
        raise
    import harness

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__" and "mdband" not in sys.modules:
    # load mdband.so3 / mdband.kernels without running mdband/__init__ (which pulls in the model,
    # ASE and the neighbour list): this script depends on the kernels only
    _pkg = types.ModuleType("mdband")
    _pkg.__path__ = [str(ROOT / "mdband")]
    sys.modules["mdband"] = _pkg

from mdband.kernels import _common as cm  # noqa: E402
from mdband.kernels import tuning  # noqa: E402
from mdband.kernels.aggregate import aggregate  # noqa: E402
from mdband.kernels.band_producer import band_producer  # noqa: E402
from mdband.kernels.edge_dot import edge_dot  # noqa: E402
from mdband.kernels.force_assembly import force_assembly  # noqa: E402
from mdband.kernels.rotate_mix import mixer_size, rotate_mix  # noqa: E402
from mdband.kernels.zonal import zonal_embed  # noqa: E402
from mdband.so3 import storage as st  # noqa: E402
from mdband.so3.frames import unit_vectors  # noqa: E402
from mdband.so3.wigner import dense_from_unit  # noqa: E402

BAND, DENSE = st.RotationLayout.BAND, st.RotationLayout.DENSE
F32, F64 = torch.float32, torch.float64
REL_F64 = 1e-6
REL_F32 = 2e-5


# ---------------------------------------------------------------------------- inputs
def make_case(E, N, C, L, Ls, device, seed=0, H=1, R=1):
    """All inputs of all ops, float64, on ``device`` (cast with :func:`cast`)."""
    g = torch.Generator(device=device).manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=F64, device=device)

    v = r(E, 3) * 1.5
    if E >= 2:
        v[0] = torch.tensor([0.0, 0.0, -1.1], dtype=F64)  # south pole
        v[1] = torch.tensor([0.2, -0.3, -1e-3], dtype=F64)  # just below the chart switch
    nodes = max(N - 1, 1)  # the last node has no edge at all
    case = {
        "E": E,
        "N": N,
        "C": C,
        "L": L,
        "Ls": Ls,
        "H": H,
        "R": R,
        "v": v,
        "src": torch.randint(0, nodes, (E,), generator=g, device=device),
        "dst": torch.randint(0, nodes, (E,), generator=g, device=device),  # unsorted
        "x": r(N, st.dim_of(L), C),
        "k": r(E, mixer_size(L), R),
        "basis": r(R, C),
        "rad": r(E, st.reduced_dim(L), C),
        "y": r(E, st.reduced_dim(L), C),
        "env": torch.rand(E, generator=g, dtype=F64, device=device),
        "logits": r(E, max(H, 1)) * 2.0,
        "z": torch.rand(max(H, 1), generator=g, dtype=F64, device=device) + 0.05,
        "s": torch.rand(N, generator=g, dtype=F64, device=device) + 0.5,
        "radial": r(E, L + 1, C),
        "g": r(E, 3),
        "gy": r(E, st.reduced_dim(L), C),
        "gout": r(N, st.dim_of(L), C),
        "gband": r(E, st.band_width(L)),
    }
    case["storage"] = storages(case["v"], Ls)
    return case


def storages(v, Ls):
    """{BAND, DENSE} storages with bit-identical band entries (dense off-band entries are real)."""
    u, _ = unit_vectors(v)
    with cm.force_backend("reference"):
        band = band_producer(v, Ls)
    dense = dense_from_unit(u, Ls)
    D = st.dim_of(Ls)
    flat = dense.reshape(-1, D * D).clone()
    flat[:, st.tables(Ls, v.device)["flat"]] = band
    return {BAND: band, DENSE: flat.view(-1, D, D)}


def cast(case, dtype):
    out = {}
    for k, t in case.items():
        if k == "storage":
            out[k] = {lay: d.to(dtype) for lay, d in t.items()}
        elif torch.is_tensor(t) and t.is_floating_point():
            out[k] = t.to(dtype)
        else:
            out[k] = t
    return out


# ---------------------------------------------------------------------------- op runners
def kernels(op, name):
    """``op``'s Triton path ("aggregate" or "rotate_mix") with its backward on the kernels
    ``name`` ("walk" / "edge" or "dot") in the block (the forward has one family)."""
    return tuning.override(**{op: {"bwd": name}})


def aggregate_kernels(name):
    return kernels("aggregate", name)


def rotate_mix_kernels(name):
    return kernels("rotate_mix", name)


def dot_config(edges, warps, op="aggregate"):
    """The dot backward of ``op`` at ``edges`` per step and ``warps`` per program in the
    block."""
    if op == "aggregate":
        launch = tuning.DotLaunch(edges=edges, warps=warps)
        return tuning.override(aggregate={"dot_ieee": launch, "dot_tf32x3": launch})
    return tuning.override(rotate_mix={"dot_edges": edges, "dot_warps": warps})


#: (edges per step, warps) of the dot kernels timed besides their default (band storage)
DOT_SWEEP = ((4, 4), (8, 4), (8, 8))
#: the same for rotate_mix's dot backward (its default: 4 edges, 1 warp)
RM_DOT_SWEEP = ((4, 1), (4, 2), (4, 4), (8, 2))


def _leaf(t):
    return t.detach().clone().requires_grad_(True)


def _grads(out, ins, cot):
    return list(torch.autograd.grad(out, ins, cot, allow_unused=True))


def run_rotate_mix(c, layout, mode):
    rot = _leaf(c["storage"][layout])
    S = st.RotationStorage(layout, c["Ls"], rot)
    x = _leaf(c["x"])
    if mode == "mix":
        k, b = _leaf(c["k"]), _leaf(c["basis"])
        y = rotate_mix(x, c["src"], S, c["L"], k, b)
        ins = [x, rot, k, b]
    else:
        rad = _leaf(c["rad"])
        y = rotate_mix(x, c["src"], S, c["L"], rad=rad)
        ins = [x, rot, rad]
    return [y] + _grads(y, ins, c["gy"])


def run_aggregate(c, layout, H):
    rot = _leaf(c["storage"][layout])
    S = st.RotationStorage(layout, c["Ls"], rot)
    y, env = _leaf(c["y"]), _leaf(c["env"])
    rho = st.rotate_inv_rescale(c["L"], y.dtype, y.device)
    if H:
        lg, z = _leaf(c["logits"][:, :H]), _leaf(c["z"][:H])
        out = aggregate(y, S, c["L"], rho, c["dst"], c["N"], env, logits=lg, z=z)
        ins = [y, rot, env, lg, z]
    else:
        s = _leaf(c["s"])
        out = aggregate(y, S, c["L"], rho, c["dst"], c["N"], env, s=s)
        ins = [y, rot, env, s]
    return [out] + _grads(out, ins, c["gout"])


def run_zonal(c, layout):
    rot = _leaf(c["storage"][layout])
    S = st.RotationStorage(layout, c["Ls"], rot)
    radial, s = _leaf(c["radial"]), _leaf(c["s"])
    out = zonal_embed(S, radial, c["dst"], s)
    return [out] + _grads(out, [rot, radial, s], c["gout"])


def run_producer(c):
    v = _leaf(c["v"])
    band = band_producer(v, c["L"])
    if not band.requires_grad:  # L = 0: constant band
        return [band, torch.zeros_like(v)]
    return [band] + _grads(band, [v], c["gband"].to(band.dtype))


def run_force(c):
    return list(force_assembly(c["g"], c["v"], c["src"], c["dst"], c["N"]))


def run_edge_dot(c):
    """edge_dot of (N, H, C/H) node rows (attention q·k) and its (gq, gk)."""
    N, H = c["N"], max(c["H"], 1)
    q = _leaf(c["x"][:, 0].reshape(N, H, -1))
    k = _leaf(c["x"][:, 1].reshape(N, H, -1))
    out = edge_dot(q, k, c["dst"], c["src"], cm.csr(c["dst"], N), cm.csr(c["src"], N))
    return [out, *_grads(out, [q, k], c["logits"][:, :H].contiguous())]


# ---------------------------------------------------------------------------- checks
class Checks:
    def __init__(self):
        self.rows = []

    def add(self, op, case, dtype, what, kind, value, threshold):
        ok = bool(value) if kind == "bitwise" else bool(value <= threshold)
        self.rows.append(
            {
                "op": op,
                "case": case,
                "dtype": str(dtype).replace("torch.", ""),
                "output": what,
                "compare": kind,
                "value": value if kind != "bitwise" else bool(value),
                "threshold": threshold,
                "ok": ok,
            }
        )
        if not ok:
            print(f"  FAIL {op} {case} {dtype} {what}: {kind} {value} (threshold {threshold})")

    @property
    def ok(self):
        return all(r["ok"] for r in self.rows)


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    den = float(b.abs().max()) if b.numel() else 0.0
    num = float((a - b).abs().max()) if b.numel() else 0.0
    return num / den if den > 0 else num


def compare_to_reference(checks, op, case, run, c64, c32, names):
    """Triton fp64 vs reference fp64, Triton fp32 vs reference fp64."""
    with cm.force_backend("reference"):
        ref = run(c64)
    for dtype, c, thr in ((F64, c64, REL_F64), (F32, c32, REL_F32)):
        with cm.force_backend("triton"):
            tri = run(c)
        for name, a, b in zip(names, tri, ref):
            if a is None and b is None:
                continue
            checks.add(op, case, dtype, name, "rel", rel(a, b), thr)


def compare_layouts(checks, op, case, run, c, names, rot_index, Ls):
    """Triton band vs Triton dense: bitwise, storage cotangent at the band entries."""
    with cm.force_backend("triton"):
        band = run(c, BAND)
        dense = run(c, DENSE)
    for i, (name, a, b) in enumerate(zip(names, band, dense)):
        if i == rot_index:
            keep = st.band_to_dense(torch.ones(1, st.band_width(Ls), dtype=b.dtype), Ls)
            off = b * (1 - keep.to(b.device))
            checks.add(
                op,
                case,
                c["x"].dtype,
                name + " off-band zero",
                "bitwise",
                int(torch.count_nonzero(off)) == 0,
                None,
            )
            b = st.dense_to_band(b, Ls)
        checks.add(
            op, case, c["x"].dtype, name + " band==dense", "bitwise", torch.equal(a, b), None
        )


def compare_dot(checks, op, case, run, mod, base, c64, c32, names):
    """The "dot" backward of ``mod`` ("aggregate" or "rotate_mix") against its ``base``
    kernels ("walk" for aggregate, "edge" for rotate_mix), band storage: rounding only.
    ``run(c)`` gives the op's outputs."""
    for dtype, c, thr in ((F64, c64, REL_F64), (F32, c32, REL_F32)):
        res = {}
        for kern in (base, "dot"):
            with kernels(mod, kern), cm.force_backend("triton"):
                res[kern] = run(c)
        for name, a, b in zip(names, res["dot"], res[base]):
            if a is None and b is None:
                continue
            checks.add(op, case, dtype, name, "rel", rel(a, b), thr)


def run_checks(device, full, E, N):
    checks = Checks()
    # (lmax, storage lmax, channels): a storage of higher degree and a non-power-of-two C
    cases = [(3, 3, 64), (2, 3, 48)]
    if full:
        cases += [(1, 1, 64), (2, 2, 64), (4, 4, 64), (6, 6, 32)]
    for L, Ls, C in cases:
        tag = f"L={L} Ls={Ls} C={C} E={E} N={N}"
        print(f"check {tag}")
        c64 = make_case(E, N, C, L, Ls, device, seed=L, H=2, R=1)
        c32 = cast(c64, F32)
        # rotate_mix and aggregate on each of their kernels: (op, module, base kernels, run,
        # output names); the "dot" kernels are also compared with the base ones
        variants = [
            (
                f"rotate_mix[{m}]",
                "rotate_mix",
                "edge",
                lambda c, lay, m=m: run_rotate_mix(c, lay, m),
                ["y", "gx", "grot"] + (["gk", "gbasis"] if m == "mix" else ["grad"]),
            )
            for m in ("mix", "none")
        ]
        variants += [
            (
                f"aggregate[H={H}]",
                "aggregate",
                "walk",
                lambda c, lay, H=H: run_aggregate(c, lay, H),
                ["out", "gy", "grot", "genv"] + (["glogits", "gz"] if H else ["gs"]),
            )
            for H in (0, 1, 2)
        ]
        for name, mod, base, run, names in variants:
            has_dot = name != "rotate_mix[mix]"  # the mixer has the edge kernels only
            for kern in (base, "dot") if has_dot else (base,):
                op = name + (" dot" if kern == "dot" else "")
                with kernels(mod, kern):
                    for lay in (BAND, DENSE):
                        compare_to_reference(
                            checks,
                            op,
                            f"{tag} {lay.value}",
                            lambda c, lay=lay, run=run: run(c, lay),
                            c64,
                            c32,
                            names,
                        )
                    for cc in (c64, c32):
                        compare_layouts(checks, op, tag, run, cc, names, 2, Ls)
            if has_dot:
                compare_dot(
                    checks,
                    f"{name} dot~{base}",
                    tag,
                    lambda c, run=run: run(c, BAND),
                    mod,
                    base,
                    c64,
                    c32,
                    names,
                )
        names = ["out", "grot", "gradial", "gs"]
        for lay in (BAND, DENSE):
            compare_to_reference(
                checks,
                "zonal_embed",
                f"{tag} {lay.value}",
                lambda c, lay=lay: run_zonal(c, lay),
                c64,
                c32,
                names,
            )
        for cc in (c64, c32):
            compare_layouts(checks, "zonal_embed", tag, run_zonal, cc, names, 1, Ls)
    # the L = 6 producer backward takes ~1 min to compile: --full only
    for L in [0, 1, 3] + ([2, 4, 5, 6] if full else []):
        c64 = make_case(E, 8, 4, L, L, device, seed=10 + L)
        c32 = cast(c64, F32)
        with cm.force_backend("reference"):
            ref = run_producer(c64)
        for dtype, c, thr in ((F64, c64, REL_F64), (F32, c32, REL_F32)):
            with cm.force_backend("triton"):
                tri = run_producer(c)
            for name, a, b in zip(["band", "gv"], tri, ref):
                checks.add("band_producer", f"L={L} E={E}", dtype, name, "rel", rel(a, b), thr)
    for H in (1, 2):
        c64 = make_case(E, N, 64, 1, 1, device, seed=50 + H, H=H)
        names = ["out", "gq", "gk"]
        compare_to_reference(
            checks,
            f"edge_dot[H={H}]",
            f"E={E} N={N} C=64",
            run_edge_dot,
            c64,
            cast(c64, F32),
            names,
        )
    c64 = make_case(E, N, 4, 1, 1, device, seed=99)
    with cm.force_backend("reference"):
        ref = run_force(c64)
    for dtype in (F64, F32):
        with cm.force_backend("triton"):
            tri = run_force(cast(c64, dtype))
        thr = REL_F64 if dtype == F64 else REL_F32
        for name, a, b in zip(["forces", "virial"], tri, ref):
            checks.add("force_assembly", f"E={E} N={N}", dtype, name, "rel", rel(a, b), thr)
    check_node_ops(checks, device, E, N)
    return checks


def check_node_ops(checks, device, E, N):
    """take_rows (a copy: bitwise) and the fused grid product (forward and both input
    cotangents against the torch product, DPA4-Mini's SO(3) grid and an S2 grid)."""
    from mdband.kernels.take_rows import take_rows
    from mdband.model.grids import grid_product, s2_projector, so3_projector

    g = torch.Generator(device="cpu").manual_seed(7)
    idx = torch.randint(0, N, (E,), generator=g).to(device)
    for width in (1, 8, 96, 300):
        x = torch.randn(N, width, generator=g).to(device)
        with cm.force_backend("triton"):
            got = take_rows(x, idx)
        checks.add(
            "take_rows",
            f"E={E} N={N} W={width}",
            F32,
            "out",
            "bitwise",
            torch.equal(got, x.index_select(0, idx)),
            None,
        )
    for label, proj, C in (
        ("so3 L=2 k=1", so3_projector(2, 1), 96),
        ("s2 L=3", s2_projector(3), 64),
    ):
        K, D = proj.n_frames, (proj.lmax + 1) ** 2
        left = torch.randn(N, D, K * C, generator=g, dtype=F64).to(device)
        right = torch.randn(N, D, K * C, generator=g, dtype=F64).to(device)
        gout = torch.randn(N, D, K * C, generator=g, dtype=F64).to(device)

        def run(lft, rgt, fused, proj=proj, gout=gout):
            lft, rgt = lft.detach().requires_grad_(), rgt.detach().requires_grad_()
            out = grid_product(proj, lft, rgt, fused=fused)
            return (out, *torch.autograd.grad((out * gout.to(out.dtype)).sum(), (lft, rgt)))

        ref = run(left, right, False)
        for dtype, thr in ((F64, REL_F64), (F32, REL_F32)):
            with cm.force_backend("triton"):
                tri = run(left.to(dtype), right.to(dtype), True)
            for name, a, b in zip(["out", "gleft", "gright"], tri, ref):
                checks.add(
                    "grid_product", f"{label} N={N} C={C}", dtype, name, "rel", rel(a, b), thr
                )


# ---------------------------------------------------------------------------- timing
#: timed calls and untimed ones before them of every kernel timing (``--repeat``, ``--warmup``)
TIMING = {"repeat": 50, "warmup": 5}


def bench(fn, device):
    """Median, 20th and 80th percentile ms of ``fn``'s kernels (:attr:`Timing.kernel_ms`: CUDA
    events, L2 flushed before each call); on a CPU (the interpreter) one call after one more,
    a wall-clock figure of no meaning."""
    if device.type == "cuda":
        t = harness.timer.timer(device, flush_cache=True).measure(fn, **TIMING)
        return [t.kernel_ms, t.quantile(0.2, "device"), t.quantile(0.8, "device")]
    t = harness.measure(fn, "cpu", repeat=1, warmup=1)
    return [t.ms, t.ms, t.ms]


def peak_mb(fn, device):
    """MB allocated by ``fn`` above what was allocated before (None on a CPU)."""
    with harness.PeakMemory(device) as mem:
        fn()
    return mem.added_mb


def run_timing(device, E, N, C, L, H, R, with_reference, dot_sweep=True):
    print(f"timing E={E} N={N} C={C} L={L} H={H} R={R} (fp32)")
    c = cast(make_case(E, N, C, L, L, device, seed=1, H=H, R=R), F32)
    rows = []
    perm, ptr = cm.csr(c["dst"], N)
    scsr = cm.csr(c["src"], N)
    rows.append(_row("csr(dst) build", "-", "-", bench(lambda: cm.csr(c["dst"], N), device)))
    code = st.LAYOUT_CODE
    rho = st.rotate_inv_rescale(L, F32, device)
    lg, z = c["logits"][:, :H].contiguous(), c["z"][:H].contiguous()
    for lay in (BAND, DENSE):
        rot = c["storage"][lay]
        a = (rot, code[lay], L, L)
        ops = {
            ("rotate_mix[mix]", "fwd"): lambda a=a: torch.ops.mdband.rotate_mix(
                c["x"], c["src"], a[0], a[1], a[2], L, c["k"], c["basis"], None, *scsr
            ),
            ("rotate_mix[mix]", "bwd"): lambda a=a: torch.ops.mdband.rotate_mix_bwd(
                c["gy"], c["x"], c["src"], a[0], a[1], a[2], L, c["k"], c["basis"], None, *scsr
            ),
            ("rotate_mix[none]", "fwd"): lambda a=a: torch.ops.mdband.rotate_mix(
                c["x"], c["src"], a[0], a[1], a[2], L, None, None, c["rad"], *scsr
            ),
            ("rotate_mix[none]", "bwd"): lambda a=a: torch.ops.mdband.rotate_mix_bwd(
                c["gy"], c["x"], c["src"], a[0], a[1], a[2], L, None, None, c["rad"], *scsr
            ),
            ("aggregate[H]", "fwd"): lambda a=a: torch.ops.mdband.aggregate(
                c["y"], a[0], a[1], a[2], L, rho, c["dst"], perm, ptr, c["env"], lg, z, None
            ),
            ("aggregate[plain]", "fwd"): lambda a=a: torch.ops.mdband.aggregate(
                c["y"], a[0], a[1], a[2], L, rho, c["dst"], perm, ptr, c["env"], None, None, c["s"]
            ),
            ("zonal_embed", "fwd"): lambda a=a: torch.ops.mdband.zonal_embed(
                a[0], a[1], a[2], L, c["radial"], c["dst"], perm, ptr, c["s"]
            ),
            ("zonal_embed", "bwd"): lambda a=a: torch.ops.mdband.zonal_embed_bwd(
                c["gout"], a[0], a[1], a[2], L, c["radial"], c["dst"], perm, ptr, c["s"]
            ),
        }
        with cm.force_backend("triton"):
            out_h, stats_h = ops[("aggregate[H]", "fwd")]()
            out_p, stats_p = ops[("aggregate[plain]", "fwd")]()
        ops[("aggregate[H]", "bwd")] = lambda a=a, o=out_h, s_=stats_h: (
            torch.ops.mdband.aggregate_bwd(
                c["gout"],
                o,
                s_,
                c["y"],
                a[0],
                a[1],
                a[2],
                L,
                rho,
                c["dst"],
                perm,
                ptr,
                c["env"],
                lg,
                z,
                None,
            )
        )
        ops[("aggregate[plain]", "bwd")] = lambda a=a, o=out_p, s_=stats_p: (
            torch.ops.mdband.aggregate_bwd(
                c["gout"],
                o,
                s_,
                c["y"],
                a[0],
                a[1],
                a[2],
                L,
                rho,
                c["dst"],
                perm,
                ptr,
                c["env"],
                None,
                None,
                c["s"],
            )
        )
        runners = {
            "rotate_mix[mix]": lambda lay=lay: run_rotate_mix(c, lay, "mix"),
            "rotate_mix[none]": lambda lay=lay: run_rotate_mix(c, lay, "none"),
            "aggregate[H]": lambda lay=lay: run_aggregate(c, lay, H),
            "aggregate[plain]": lambda lay=lay: run_aggregate(c, lay, 0),
            "zonal_embed": lambda lay=lay: run_zonal(c, lay),
        }
        for (name, pas), fn in sorted(ops.items()):
            with cm.force_backend("triton"):
                t_tri = bench(fn, device)
                mem = peak_mb(runners[name], device) if pas == "fwd" else None
            t_ref = None
            if with_reference:
                try:
                    with cm.force_backend("reference"):
                        t_ref = bench(fn, device)
                except torch.cuda.OutOfMemoryError:  # pragma: no cover - device dependent
                    t_ref = None
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            rows.append(_row(name, pas, lay.value, t_tri, t_ref, mem))
        # the backward of aggregate and of rotate_mix's radial rows on their "dot" kernels
        # (same op calls; aggregate's bwd reuses the walk's out/stats), with the launch sweeps
        # on the band layout
        dots = [
            (n, aggregate_kernels, DOT_SWEEP, "aggregate")
            for n in ("aggregate[H]", "aggregate[plain]")
        ]
        dots += [("rotate_mix[none]", rotate_mix_kernels, RM_DOT_SWEEP, "rotate_mix")]
        for name, kernels, sweep, module in dots:
            for pas in ("bwd",):
                with kernels("dot"), cm.force_backend("triton"):
                    t_dot = bench(ops[(name, pas)], device)
                    mem = peak_mb(runners[name], device) if pas == "fwd" else None
                rows.append(_row(f"{name} dot", pas, lay.value, t_dot, None, mem))
                for be, w in sweep if dot_sweep and lay is BAND else ():
                    with kernels("dot"), dot_config(be, w, module), cm.force_backend("triton"):
                        t_dot = bench(ops[(name, pas)], device)
                    rows.append(_row(f"{name} dot BE={be} w={w}", pas, lay.value, t_dot))
    v = c["v"]
    gb = c["gband"].to(F32)
    rows += _time_passes(
        "band_producer",
        "band",
        device,
        with_reference,
        (
            ("fwd", lambda: torch.ops.mdband.band_producer(v, L)),
            ("bwd", lambda: torch.ops.mdband.band_producer_bwd(gb, v, L)),
        ),
    )
    dperm, dptr = perm, ptr
    sperm, sptr = cm.csr(c["src"], N)
    fa = (c["g"], v, c["src"], c["dst"], dperm, dptr, sperm, sptr)
    rows += _time_passes(
        "force_assembly",
        "-",
        device,
        with_reference,
        (("fwd", lambda: torch.ops.mdband.force_assembly(*fa)),),
    )
    q = c["x"][:, 0].reshape(N, 1, -1).contiguous()
    kk = c["x"][:, 1].reshape(N, 1, -1).contiguous()
    ed = (q, kk, c["dst"], c["src"], dperm, dptr, sperm, sptr)
    g1 = c["logits"][:, :1].contiguous()
    rows += _time_passes(
        "edge_dot",
        "-",
        device,
        with_reference,
        (
            ("fwd", lambda: torch.ops.mdband.edge_dot(*ed)),
            ("bwd", lambda: torch.ops.mdband.edge_dot_bwd(g1, *ed)),
        ),
    )
    return rows


def _time_passes(op, layout, device, with_reference, passes):
    """Rows of (pass, fn) timed on the Triton kernel and, if asked, on the torch reference."""
    rows = []
    for pas, fn in passes:
        with cm.force_backend("triton"):
            t_tri = bench(fn, device)
        t_ref = None
        if with_reference:
            with cm.force_backend("reference"):
                t_ref = bench(fn, device)
        rows.append(_row(op, pas, layout, t_tri, t_ref))
    return rows


def _row(op, pas, layout, t_tri, t_ref=None, mem=None):
    return {
        "op": op,
        "pass": pas,
        "layout": layout,
        "triton_ms": t_tri[0],
        "triton_ms_p20_p80": t_tri[1:],
        "reference_ms": None if t_ref is None else t_ref[0],
        "peak_fwd_bwd_MB": mem,
    }


def print_table(rows):
    """One line per (op, pass, layout); ``ref/tri`` = reference / Triton time, ``dense/band`` =
    dense / band Triton time of the same op and pass."""
    band = {(r["op"], r["pass"]): r["triton_ms"] for r in rows if r["layout"] == "band"}
    print(
        f"{'op':<30} {'pass':<4} {'layout':<6} {'triton ms':>10} {'ref ms':>10} "
        f"{'ref/tri':>8} {'dense/band':>10} {'peak MB':>9}"
    )
    for r in sorted(rows, key=lambda r: (r["op"], r["pass"], r["layout"])):
        ref = r["reference_ms"]
        sp = f"{ref / r['triton_ms']:.1f}" if ref and r["triton_ms"] else "-"
        b = band.get((r["op"], r["pass"]))
        db = f"{r['triton_ms'] / b:.2f}" if r["layout"] == "dense" and b else "-"
        mem = f"{r['peak_fwd_bwd_MB']:.0f}" if r["peak_fwd_bwd_MB"] is not None else "-"
        print(
            f"{r['op']:<30} {r['pass']:<4} {r['layout']:<6} {r['triton_ms']:>10.3f} "
            f"{(f'{ref:.3f}' if ref else '-'):>10} {sp:>8} {db:>10} {mem:>9}"
        )
    ms = {(r["op"], r["pass"], r["layout"]): r["triton_ms"] for r in rows}
    for (op, pas, lay), t_dot in sorted(ms.items()):
        base, _, label = op.partition(" dot")
        fam = "walk" if op.startswith("aggregate") else "edge"
        paired = base != op and op.startswith(("aggregate", "rotate_mix"))
        old = ms.get((base, pas, lay)) if paired else None
        if old and t_dot:
            print(
                f"{fam}/dot {base:<16} {pas:<4} {lay:<6} {'dot' + label:<14} "
                f"{fam} {old:.3f} ms  dot {t_dot:.3f} ms  {fam}/dot {old / t_dot:.2f}"
            )


def main(argv=None):
    p = harness.parser(
        "gpu_kernels", __doc__, device="auto", repeat=TIMING["repeat"], warmup=TIMING["warmup"]
    )
    p.add_argument("--full", action="store_true", help="check more degrees (L up to 6)")
    p.add_argument("--no-check", action="store_true")
    p.add_argument(
        "--node-ops-only", action="store_true", help="check take_rows and grid_product only"
    )
    p.add_argument("--no-time", action="store_true")
    p.add_argument("--no-reference", action="store_true", help="skip reference timings")
    p.add_argument(
        "--no-dot-sweep",
        action="store_true",
        help="time the dot kernels (aggregate, "
        "rotate_mix) at their default step size and warps only",
    )
    p.add_argument("--check-edges", type=int, default=20000)
    p.add_argument("--check-nodes", type=int, default=512)
    p.add_argument("--edges", type=int, default=650000)
    p.add_argument("--nodes", type=int, default=4096)
    p.add_argument("--channels", type=int, default=64)
    p.add_argument("--lmax", type=int, default=3)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--rank", type=int, default=1)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type != "cuda" and not cm.interpret_mode():
        print("no CUDA device: run on a GPU, or on the CPU with TRITON_INTERPRET=1 and tiny sizes")
        return 2
    TIMING.update(repeat=args.repeat, warmup=args.warmup)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    import triton

    env = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
    }
    print(env)
    results = harness.Results("gpu_kernels", args.out, vars(args), echo=False)
    ok, n_checks = True, 0
    if not args.no_check:

        def check():
            if args.node_ops_only:  # the node ops' checks alone: seconds instead of minutes
                checks = Checks()
                check_node_ops(checks, device, args.check_edges, args.check_nodes)
                return checks
            return run_checks(device, args.full, args.check_edges, args.check_nodes)

        checks, t = harness.once(check)
        ok, n_checks = checks.ok, len(checks.rows)
        for r in checks.rows:
            results.add("check", **r)
        n_fail = sum(not r["ok"] for r in checks.rows)
        worst = {}
        for r in checks.rows:
            if r["compare"] == "rel":
                key = (r["op"], r["dtype"])
                worst[key] = max(worst.get(key, 0.0), r["value"])
        print(f"checks: {len(checks.rows)} ({n_fail} failed) in {t.ms / 1e3:.0f} s")
        for (op, dt), w in sorted(worst.items()):
            print(f"  worst rel err {op:<22} {dt:<8} {w:.2e}")
    if not args.no_time:
        rows = run_timing(
            device,
            args.edges,
            args.nodes,
            args.channels,
            args.lmax,
            args.heads,
            args.rank,
            not args.no_reference,
            not args.no_dot_sweep,
        )
        for r in rows:
            results.add("timing", **r)
        print_table(rows)
    results.add("summary", ok=ok, checks=n_checks, **env)
    print("ALL CHECKS PASSED" if ok else "CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
