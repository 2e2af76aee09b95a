"""The launches the tuning defaults select, pinned: every kernel, grid, warps, stages and
constexpr of every op, per dtype, device and the shapes and options its dispatch tells apart.

Each op is called through its public function (forward and backward) on small CPU tensors with
every Triton launch recorded and skipped (nothing runs, so the test is fast; the cell list's
kernel, whose second pass sizes its outputs from the first, runs in the interpreter). The
device is simulated: "sm90" (TMA and TF32 tensor cores: H100, H200), "sm80" (TF32 tensor cores,
no TMA), "sm75" (neither), or "interpreter" (the CPU interpreter as the kernel tests run it).
The records must equal ``launch_pins.json`` exactly. A change of the tuning defaults that is
meant (measured: name the BENCHMARKS.md section) rewrites the file with
``python tests/kernels/test_launch_pins.py --write``; a refactor never does.

Only the ADAPTER below knows the code's names (kernel functions, constexprs, the device
predicates it patches); the pinned file speaks the names the kernels had when it was written.
"""

from __future__ import annotations

import functools
import json
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from mdband.kernels import _common as cm

PINS = Path(__file__).with_name("launch_pins.json")
F32, F64 = torch.float32, torch.float64
GPUS = {"sm90": (9, 0), "sm80": (8, 0), "sm75": (7, 5)}
DEVICES = (*GPUS, "interpreter")


# ============================================================================ ADAPTER
# (the code's names; the only part of this file a refactor may edit)
def _modules():
    from mdband.kernels import cell_pairs, grid_product
    from mdband.kernels.so2_stack import launch as so2_launch

    return so2_launch, cell_pairs, grid_product


#: kernel function name -> its name in the pins
KERNEL_NAMES: dict[str, str] = {
    "aggregate_stats_kernel": "_agg_stats_kernel",
    "aggregate_walk_fwd_kernel": "_agg_fwd_kernel",
    "aggregate_walk_bwd_kernel": "_agg_bwd_kernel",
    "aggregate_dot_bwd_kernel": "_agg_dot_bwd_kernel",
    "rotate_mix_fwd_kernel": "_rm_fwd_kernel",
    "rotate_mix_edge_bwd_kernel": "_rm_bwd_edge_kernel",
    "rotate_mix_node_bwd_kernel": "_rm_bwd_node_kernel",
    "rotate_mix_dot_bwd_kernel": "_rm_dot_bwd_kernel",
    "so2_linear_kernel": "linear_kernel",
    "so2_presplit_linear_kernel": "presplit_kernel",
    "so2_gate_fwd_kernel": "_gate_fwd_kernel",
    "so2_gate_bwd_kernel": "_gate_bwd_kernel",
    "zonal_fwd_kernel": "_zonal_fwd_kernel",
    "zonal_walk_bwd_kernel": "_zonal_bwd_kernel",
    "zonal_dot_bwd_kernel": "_zonal_bwd_dot_kernel",
    "seed_mlp_fwd_kernel": "_seed_fwd_kernel",
    "seed_mlp_bwd_kernel": "_seed_bwd_kernel",
    "radial_mlp_fwd_kernel": "_radial_mlp_fwd_kernel",
    "radial_mlp_bwd_kernel": "_radial_mlp_bwd_kernel",
    "cell_pairs_kernel": "_pairs_kernel",
    "grid_product_fwd_kernel": "_grid_fwd_kernel",
    "grid_product_bwd_kernel": "_grid_bwd_kernel",
    "segment_outer_fwd_kernel": "_seg_outer_fwd_kernel",
    "segment_outer_bwd_kernel": "_seg_outer_bwd_kernel",
    "edge_dot_kernel": "_edge_dot_kernel",
    "edge_dot_segment_kernel": "_segment_dot_kernel",
    "radial_basis_fwd_kernel": "_radial_fwd_kernel",
    "radial_basis_bwd_kernel": "_radial_bwd_kernel",
    "take_rows_kernel": "_take_rows_kernel",
    "force_assembly_kernel": "_force_kernel",
    "band_producer_kernel": "_bp_kernel",
}
#: constexpr or launch option -> its name in the pins, for every kernel ...
META_NAMES: dict[str, str] = {
    "COL_LANES": "JP",
    "SLOT_LANES": "SP",
    "BLOCK_CHANNELS": "BC",
    "BLOCK_EDGES": "BE",
    "BLOCK_HEADS": "HP",
    "ATTENTION": "ATTN",
    "PREFETCH": "PF",
    "DOT_COLS": "JPK",
    "DOT_HEADS": "HPK",
    "PER_LANE": "LANES",
    "PRECISION": "PREC",
    "N_BLOCKS": "NB",
    "OUT_LANES": "LP",
    "RANK": "R",
    "BLOCK_RANK": "RP",
    "MIXER": "MIX",
    "LMAX": "L",
    "CHANNELS": "C",
    "RESIDUAL": "RES",
    "N_SLOTS": "NS",
    "FIRST_SLOT": "S0",
}
_SEED = {
    "BLOCK_RADIAL": "RP",
    "BLOCK_PROJ": "PP",
    "BLOCK_TYPE": "TP",
    "BLOCK_HIDDEN": "HP",
    "BLOCK_OUT": "QP",
}
_GRID = {"FRAMES": "K", "BLOCK_GRID": "GP", "BLOCK_ROWS": "JP", "BLOCK_OUT_ROWS": "JOP"}
_SEGMENT_OUTER = {"BLOCK_COLS_A": "PP", "BLOCK_COLS_B": "QP"}
_EDGE_DOT = {"N_HEADS": "H", "HEAD_DIM": "D", "BLOCK_DIM": "BD"}
_RADIAL_BASIS = {
    "ENV_ORDER": "P_ENV",
    "RBF_ORDER": "P_RBF",
    "ACCURATE_TRIG": "TRIG",
    "BLOCK_BASIS": "NP",
}
_RADIAL_MLP = {"ENVELOPE": "ENV", "BLOCK_RADIAL": "RP", "BLOCK_HIDDEN": "CP", "BLOCK_OUT": "DP"}
#: ... but where a pinned kernel's own map (pinned kernel -> {name: pinned name}) says otherwise
KERNEL_META_NAMES: dict[str, dict[str, str]] = {
    "_rm_bwd_edge_kernel": {"BLOCK_EDGES": "EB"},
    "presplit_kernel": {"ROWS": "NR"},
    "_zonal_bwd_dot_kernel": {"DOT_COLS": "JD"},
    **dict.fromkeys(("_seed_fwd_kernel", "_seed_bwd_kernel"), _SEED),
    **dict.fromkeys(("_radial_mlp_fwd_kernel", "_radial_mlp_bwd_kernel"), _RADIAL_MLP),
    **dict.fromkeys(("_grid_fwd_kernel", "_grid_bwd_kernel"), _GRID),
    **dict.fromkeys(("_seg_outer_fwd_kernel", "_seg_outer_bwd_kernel"), _SEGMENT_OUTER),
    **dict.fromkeys(("_edge_dot_kernel", "_segment_dot_kernel"), _EDGE_DOT),
    **dict.fromkeys(("_radial_fwd_kernel", "_radial_bwd_kernel"), _RADIAL_BASIS),
    "_take_rows_kernel": {"BLOCK_WIDTH": "BW"},
    "_bp_kernel": {"BACKWARD": "BWD"},
    "_pairs_kernel": {
        "BLOCK_SLOTS": "KP",
        "BLOCK_CANDIDATES": "BW",
        "PERIODIC_X": "PX",
        "PERIODIC_Y": "PY",
        "PERIODIC_Z": "PZ",
    },
}
#: (pinned kernel name, pinned constexpr) -> the value it always had, for constexprs the code
#: no longer passes (the launch is the same: the kernel compiled that value in)
DROPPED: dict[tuple[str, str], object] = {
    # the dot backward of rotate_mix serves radial rows only (its mixer branch, never chosen
    # by a default, is gone): no mixer, rank 1, and the mixer's output lanes it never read
    ("_rm_dot_bwd_kernel", "MIX"): False,
    ("_rm_dot_bwd_kernel", "R"): 1,
    ("_rm_dot_bwd_kernel", "RP"): 1,
    ("_rm_dot_bwd_kernel", "LP"): 4,
    # the SO(2) linear kernel's tf32x3 split of x is the rounded one (the truncating
    # variants, never chosen by a default, are gone)
    ("linear_kernel", "XS"): 0,
}


def _simulate(monkeypatch, device: str) -> None:
    """Patch the device predicates so the dispatch sees ``device`` (tensors stay on the CPU)."""
    so2_launch, _, gp = _modules()
    so2_launch.forget_fitted_launches()  # every simulated device is the CPU to its cache
    if device == "interpreter":
        return
    cap = GPUS[device]
    monkeypatch.setattr(cm, "interpret_mode", lambda: False)
    monkeypatch.setattr(cm, "triton_available", lambda device: True)
    monkeypatch.setattr(cm, "has_tf32_cores", lambda device: cap >= (8, 0))
    monkeypatch.setattr(cm, "has_tma", lambda device: cap >= (9, 0))
    monkeypatch.setattr(
        gp, "_precision", lambda x, exact: int(not exact and x.dtype == F32 and cap >= (8, 0))
    )


def _patch_direct_launches(monkeypatch, record) -> None:
    """Kernels launched without ``cm.wrap`` (run after recording)."""
    _, cell_pairs, _ = _modules()
    kernel = cell_pairs.cell_pairs_kernel

    class Launcher:
        __name__ = kernel.__name__

        def __getitem__(self, grid):
            def run(*args, **kw):
                _check_float_arguments(kernel, args)
                record(kernel.__name__, grid, kw)
                return kernel[grid](*args, **kw)

            return run

    monkeypatch.setattr(cell_pairs, "cell_pairs_kernel", Launcher())


def _out_of_resources():
    from triton.runtime.errors import OutOfResources

    return OutOfResources(1 << 20, 1 << 16, "shared memory")


# ============================================================================ recording
def _normal(value):
    if isinstance(value, (tuple, list)):
        return [_normal(v) for v in value]
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return int(value)


@functools.cache
def _compiled_params(fn):
    """The kernel function's parameters as the compiler reads them (annotations included)."""
    from triton.runtime.jit import JITFunction

    return JITFunction(fn).params


def _check_float_arguments(kernel, args) -> None:
    """A Python float reaches a compiled kernel as fp32 unless its parameter is annotated with a
    float type (``x: tl.float64``, read with ``_common.scalar_as``): float64 models would lose
    half their digits on the GPU (the interpreter, which the kernel tests run, keeps them all)."""
    params = _compiled_params(getattr(kernel, "fn", kernel))
    for param, value in zip(params, args):
        if isinstance(value, float):
            assert param.annotation_type == "fp64", (
                f"{kernel.__name__}: float argument {param.name} is not annotated tl.float64"
            )


class Recorder:
    """Records each launch as [kernel, grid, {constexprs and launch options}] (pinned names)."""

    def __init__(self, monkeypatch, fail=None):
        self.launches: list = []
        self.fail = dict(fail or {})  # pinned kernel name -> launches to refuse (no memory)
        record = self.record

        def wrap(kernel):
            class Grid:
                def __getitem__(self, grid):
                    def run(*args, **kw):
                        _check_float_arguments(kernel, args)
                        record(kernel.__name__, grid, kw)

                    return run

            return Grid()

        monkeypatch.setattr(cm, "wrap", wrap)
        _patch_direct_launches(monkeypatch, self.record)

    def record(self, name, grid, kw):
        pinned = KERNEL_NAMES.get(name, name)
        names = {**META_NAMES, **KERNEL_META_NAMES.get(pinned, {})}
        meta = {names.get(k, k): _normal(v) for k, v in kw.items()}
        for (kernel, key), value in DROPPED.items():
            if kernel == pinned:
                assert key not in meta, f"{pinned} passes {key}: it is not dropped"
                meta[key] = value
        self.launches.append([pinned, _normal(tuple(grid)), dict(sorted(meta.items()))])
        if self.fail.get(pinned, 0) > 0:
            self.fail[pinned] -= 1
            raise _out_of_resources()


# ============================================================================ the cases
def _rng(seed=0):
    return torch.Generator().manual_seed(seed)


def _rand(*shape, dtype=F64, seed=0):
    return torch.randn(*shape, generator=_rng(seed), dtype=F64).to(dtype)


def _grads(out, inputs):
    inputs = [t for t in inputs if t is not None and t.requires_grad]
    torch.autograd.grad(out, inputs, torch.ones_like(out), allow_unused=True)


def _storage(E, lmax_s, dtype, layout):
    from kernel_helpers import edge_vectors, leaf_storage, storages

    from mdband.so3 import storage as st

    s = storages(edge_vectors(E, dtype), lmax_s)[st.RotationLayout[layout.upper()]]
    return leaf_storage(s)


def _aggregate(dtype, L, C, H, layout, lmax_s):
    from mdband.kernels.aggregate import aggregate
    from mdband.so3 import storage as st

    E, N = 7, 4
    S = _storage(E, lmax_s, dtype, layout)
    y = _rand(E, st.reduced_dim(L), C, dtype=dtype).requires_grad_()
    dst = torch.tensor([0, 2, 2, 1, 2, 0, 3])
    env = _rand(E, dtype=dtype, seed=1).abs().requires_grad_()
    rho = st.rotate_inv_rescale(L)
    if H:
        logits = _rand(E, H, dtype=dtype, seed=2).requires_grad_()
        z = _rand(H, dtype=dtype, seed=3).abs().requires_grad_()
        out = aggregate(y, S, L, rho, dst, N, env, logits=logits, z=z)
        _grads(out, [y, S.data, env, logits, z])
    else:
        s = _rand(N, dtype=dtype, seed=4).abs().requires_grad_()
        out = aggregate(y, S, L, rho, dst, N, env, s=s)
        _grads(out, [y, S.data, env, s])


def _rotate_mix(dtype, L, C, rank, layout):
    from mdband.kernels.rotate_mix import mixer_size, rotate_mix
    from mdband.so3 import storage as st

    E, N = 7, 4
    S = _storage(E, L, dtype, layout)
    x = _rand(N, st.dim_of(L), C, dtype=dtype).requires_grad_()
    src = torch.tensor([1, 0, 3, 3, 2, 0, 1])
    if rank:
        k = _rand(E, mixer_size(L), rank, dtype=dtype, seed=1).requires_grad_()
        basis = _rand(rank, C, dtype=dtype, seed=2).requires_grad_()
        out = rotate_mix(x, src, S, L, k=k, basis=basis)
        _grads(out, [x, S.data, k, basis])
    else:
        rad = _rand(E, st.reduced_dim(L), C, dtype=dtype, seed=3).requires_grad_()
        out = rotate_mix(x, src, S, L, rad=rad)
        _grads(out, [x, S.data, rad])


def _zonal(dtype, L, C, layout):
    from mdband.kernels.zonal import zonal_embed

    E, N = 7, 4
    S = _storage(E, L, dtype, layout)
    radial = _rand(E, L + 1, C, dtype=dtype).requires_grad_()
    dst = torch.tensor([0, 2, 2, 1, 2, 0, 3])
    s = _rand(N, dtype=dtype, seed=1).abs().requires_grad_()
    out = zonal_embed(S, radial, dst, s)
    _grads(out, [S.data, radial, s])


def _so2(dtype, L, C, F, precision, gated):
    from mdband.kernels.so2_stack import so2_mix_layer

    E = 5
    x = _rand(F, E, 3 * L + 1, C, dtype=dtype).requires_grad_()
    w0 = _rand((L + 1) * C, F * (L + 1) * C, dtype=dtype, seed=1) / C
    wm = _rand(L * C, F * 2 * L * C, dtype=dtype, seed=2) / C
    wg = _rand(C, F * L * C, dtype=dtype, seed=3) / C if gated else None
    out = so2_mix_layer(x, w0, wm, wg, L, precision)
    _grads(out, [x])


def _grid(dtype, C, kmax, exact):
    from mdband.kernels.grid_product import grid_product
    from mdband.model.grids import so3_projector

    proj = so3_projector(2, kmax)
    t, b = proj.mats(dtype, torch.device("cpu"))
    K, D = proj.n_frames, 9
    left = _rand(3, D, K * C, dtype=dtype).requires_grad_()
    right = _rand(3, D, K * C, dtype=dtype, seed=1).requires_grad_()
    out = grid_product(t, b, left, right, K, exact)
    _grads(out, [left, right])


def _radial_mlp(dtype, D, norm, env):
    from mdband.kernels.radial_mlp import radial_mlp

    E, R, C = 9, 8, 16
    rbf = _rand(E, R, dtype=dtype).requires_grad_()
    scale = _rand(C, dtype=dtype, seed=1) if norm else None
    ev = _rand(E, 1, dtype=dtype, seed=2).requires_grad_() if env else None
    out = radial_mlp(rbf, _rand(R, C, dtype=dtype, seed=3), scale, _rand(C, D, dtype=dtype), ev)
    _grads(out, [rbf, ev])


def _seed_mlp(dtype, R, P, T, H, Q):
    from mdband.kernels.seed_mlp import seed_mlp

    E = 9
    rbf = _rand(E, R, dtype=dtype).requires_grad_()
    types = torch.tensor([0, 1, 2, 1, 0, 2, 2, 1, 0])
    table = _rand(3, T, dtype=dtype, seed=1)
    ws = [
        _rand(a, b, dtype=dtype, seed=i)
        for i, (a, b) in enumerate([(R, P), (P, P), (P + 2 * T, H), (H, Q)])
    ]
    out = seed_mlp(rbf, types, types.flip(0), table, *ws)
    _grads(out, [rbf])


def _segment_outer(dtype, P, Q):
    from mdband.kernels.segment_outer import segment_outer

    index = torch.tensor([0, 2, 2, 1, 2, 0, 3])
    a = _rand(7, P, dtype=dtype).requires_grad_()
    b = _rand(7, Q, dtype=dtype, seed=1).requires_grad_()
    out = segment_outer(a, b, index, cm.csr(index, 4))
    _grads(out, [a, b])


def _edge_dot(dtype, H, d):
    from mdband.kernels.edge_dot import edge_dot

    dst, src = torch.tensor([0, 2, 2, 1, 2, 0, 3]), torch.tensor([1, 0, 3, 3, 2, 0, 1])
    q = _rand(4, H, d, dtype=dtype).requires_grad_()
    k = _rand(4, H, d, dtype=dtype, seed=1).requires_grad_()
    out = edge_dot(q, k, dst, src, cm.csr(dst, 4), cm.csr(src, 4))
    _grads(out, [q, k])


def _radial_basis(dtype, basis):
    from mdband.kernels.radial_basis import radial_basis

    r = (_rand(9, 1, dtype=dtype).abs() + 0.5).requires_grad_()
    freqs = _rand(1, 8, dtype=dtype, seed=1).abs()
    env, rbf = radial_basis(r, freqs, 5.0, 5, 6, basis, -0.5)
    _grads(env.sum() + rbf.sum(), [r])


def _take_rows(dtype, width):
    from mdband.kernels.take_rows import take_rows

    x = (torch.arange(5 * width) % 7).reshape(5, width).to(dtype)
    take_rows(x, torch.tensor([4, 0, 0, 3, 1, 2, 2]))


def _band_producer(dtype, L, E):
    from mdband.kernels.band_producer import band_producer

    v = _rand(E, 3, dtype=dtype).requires_grad_()
    _grads(band_producer(v, L), [v])


def _force_assembly(dtype):
    from mdband.kernels.force_assembly import force_assembly

    src, dst = torch.tensor([1, 0, 3, 3, 2, 0, 1]), torch.tensor([0, 2, 2, 1, 2, 0, 3])
    force_assembly(_rand(7, 3, dtype=dtype), _rand(7, 3, dtype=dtype, seed=1), src, dst, 4)


def _cell_pairs(dtype, pbc):
    from mdband.cell_list import cell_list_edges

    rng = np.random.default_rng(0)
    pos = torch.tensor(rng.random((20, 3)) * 6.0, dtype=dtype)
    cell = torch.tensor(np.eye(3) * 6.0 if any(pbc) else np.zeros((3, 3)), dtype=dtype)
    cell_list_edges(pos, cell, pbc, 2.5)


#: the shapes and options per op (arguments after the dtype of its builder above)
AGGREGATE = [
    (2, 32, 1, "band", 2),
    (3, 64, 0, "band", 3),
    (3, 64, 2, "band", 3),
    (3, 64, 1, "dense", 3),
    (2, 16, 1, "band", 3),
    (4, 128, 4, "band", 4),
]
ROTATE_MIX = [
    (2, 32, 1, "band"),
    (3, 64, 1, "band"),
    (3, 64, 2, "dense"),
    (3, 64, 0, "band"),
    (2, 32, 0, "dense"),
]
ZONAL = [(2, 16, "band"), (3, 64, "band"), (3, 64, "dense")]
GRID = [(96, 0, False), (32, 1, False), (192, 0, False), (16, 1, False), (32, 0, True)]
RADIAL_MLP = [(48, False, False), (96, True, True), (128, False, True)]
SEED_MLP = [(16, 32, 8, 64, 32), (16, 32, 16, 128, 64), (5, 20, 3, 40, 12)]
SO2 = [
    (L, C, F, precision, gated)
    for precision in ("ieee", "tf32x3", "fp16x3", "fp16")
    for L, C, F in ((3, 64, 1), (2, 32, 2), (1, 16, 1))
    for gated in (True, False)
]
SMALL_OPS = [
    (_segment_outer, [(4, 32), (4, 64), (3, 5)]),
    (_edge_dot, [(1, 32), (2, 8), (4, 48)]),
    (_radial_basis, [("bessel",), ("gaussian",)]),
    (_band_producer, [(2, 9), (3, 100), (8, 5), (9, 5)]),
    (_force_assembly, [()]),
    (_cell_pairs, [((True, True, True),), ((True, False, True),), ((False, False, False),)]),
]


def _label(args) -> str:
    return "-".join(str(int(a) if isinstance(a, bool) else a).replace(" ", "") for a in args)


def _cases():
    """case id -> (simulated device, call)."""
    cases = {}

    def add(name, devices, fn, dtype, args):
        dn = str(dtype).removeprefix("torch.")
        for device in devices:
            cases[f"{name}/{dn}/{_label(args)}/{device}"] = (device, partial(fn, dtype, *args))

    for dtype in (F32, F64):
        for name, fn, shapes in (
            ("aggregate", _aggregate, AGGREGATE),
            ("rotate_mix", _rotate_mix, ROTATE_MIX),
            ("zonal", _zonal, ZONAL),
            ("grid_product", _grid, GRID),
            ("radial_mlp", _radial_mlp, RADIAL_MLP),
            ("seed_mlp", _seed_mlp, SEED_MLP),
        ):
            for args in shapes:
                add(name, DEVICES, fn, dtype, args)
        for fn, shapes in SMALL_OPS:
            for args in shapes:
                add(fn.__name__.strip("_"), ("sm90", "interpreter"), fn, dtype, args)
    for dtype in (F32, F64, torch.int64):
        for width in (8, 64, 300):
            add("take_rows", ("sm90", "interpreter"), _take_rows, dtype, (width,))
    for args in SO2:
        add("so2_stack", DEVICES, _so2, F32, args)
    add("so2_stack", DEVICES, _so2, F64, (3, 64, 1, "tf32x3", True))
    return cases


#: cases run with launches refused for want of shared memory: (case, {pinned kernel: refusals})
FALLBACKS = {
    "so2_stack/float32/3-64-1-tf32x3-1/sm90": {"linear_kernel": 1},
    "so2_stack/float32/3-64-1-tf32x3-0/sm90": {"linear_kernel": 2},
    "so2_stack/float32/3-64-1-fp16x3-1/sm90": {"presplit_kernel": 3, "linear_kernel": 1},
    "so2_stack/float32/2-32-2-fp16-0/sm90": {"linear_kernel": 1},
}
CASES = _cases()


def _record(monkeypatch, case: str) -> list:
    device, call = CASES[case.removesuffix("#fallback")]
    _simulate(monkeypatch, device)
    rec = Recorder(
        monkeypatch,
        FALLBACKS.get(case.removesuffix("#fallback")) if case.endswith("#fallback") else None,
    )
    with cm.force_triton():
        try:
            call()
        except RuntimeError as err:  # where CUDA's default dispatch takes the torch reference
            if not str(err).startswith("no Triton kernel for this call"):
                raise
            rec.launches.append(["torch reference"])
    return rec.launches


def _choices() -> dict:
    """The on/off switches a model asks the ops (not launches)."""
    from mdband.kernels import cell_pairs, radial_mlp, seed_mlp

    return {
        "seed_mlp.applies(float32)": seed_mlp.applies(F32),
        "seed_mlp.applies(float64)": seed_mlp.applies(F64),
        "radial_mlp.applies(128, float32)": radial_mlp.applies(128, F32),
        "radial_mlp.applies(129, float32)": radial_mlp.applies(129, F32),
        "radial_mlp.applies(96, float64)": radial_mlp.applies(96, F64),
        "cell_pairs.applies(1024)": cell_pairs.applies("cpu", 1024),
        "cell_pairs.applies(1025)": cell_pairs.applies("cpu", 1025),
    }


def _all_ids() -> list[str]:
    return [*CASES, *(f"{c}#fallback" for c in FALLBACKS)]


@pytest.fixture(scope="module")
def pins() -> dict:
    return json.loads(PINS.read_text(encoding="utf-8"))


def test_every_case_is_pinned(pins):
    assert sorted(pins["launches"]) == sorted(_all_ids())


@pytest.mark.parametrize("case", _all_ids())
def test_launches_are_the_pinned_ones(monkeypatch, pins, case):
    if not cm.TRITON_AVAILABLE:
        pytest.skip("triton is not installed")
    if not cm.interpret_mode():
        pytest.skip("the simulation runs on the CPU interpreter (TRITON_INTERPRET=1)")
    got = _record(monkeypatch, case)
    assert got == pins["launches"][case]


def test_choices_are_the_pinned_ones(monkeypatch, pins):
    if not cm.TRITON_AVAILABLE or not cm.interpret_mode():
        pytest.skip("needs triton and TRITON_INTERPRET=1")
    with cm.force_triton():
        assert _choices() == pins["choices"]


def _write() -> None:  # pragma: no cover - run by hand
    mp = pytest.MonkeyPatch()
    out = {"launches": {}, "choices": {}}
    for case in _all_ids():
        with mp.context() as m:
            out["launches"][case] = _record(m, case)
    with cm.force_triton():
        out["choices"] = _choices()
    lines = [
        "{",
        '  "choices": ' + json.dumps(out["choices"], sort_keys=True) + ",",
        '  "launches": {',
    ]
    items = sorted(out["launches"].items())
    for i, (case, launches) in enumerate(items):
        body = ",\n".join("      " + json.dumps(x, sort_keys=True) for x in launches)
        sep = "," if i + 1 < len(items) else ""
        lines.append(f"    {json.dumps(case)}: [" + (f"\n{body}\n    ]" if body else "]") + sep)
    lines += ["  }", "}"]
    PINS.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: TRITON_INTERPRET=1 python tests/kernels/test_launch_pins.py --write")
    sys.path.insert(0, str(Path(__file__).parent))
    _write()
