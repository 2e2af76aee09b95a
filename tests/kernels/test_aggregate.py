"""aggregate: Triton vs reference, band vs dense bitwise, softmax safety, closed-form backward."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import (
    LAYOUTS,
    band_view,
    close,
    edge_vectors,
    grads,
    leaf_storage,
    off_band_dense,
    run_both,
    storages,
)

from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.kernels.aggregate import aggregate, aggregate_bwd_reference, aggregate_reference
from mdband.so3 import storage as st

F64, F32 = torch.float64, torch.float32
CASES = [(1, 1), (2, 2), (3, 3), (4, 4), (2, 3)]
# (lmax, storage lmax, dtype, heads): heads 0 = plain envelope scatter
TRITON_CASES = [(L, Ls, F64, H) for (L, Ls) in CASES for H in (0, 2)]
TRITON_CASES += [(3, 3, F32, 0), (3, 3, F32, 2), (2, 2, F64, 1)]


@pytest.fixture(autouse=True)
def walk_kernels():
    """These are the walk kernels' tests: the backward pinned to the walk (float32's default
    backward, "auto", is the tf32x3 dot, tested in test_aggregate_dot.py)."""
    with tuning.override(aggregate={"bwd": "walk"}):
        yield


def _inputs(L, dtype, H, device, E=8, N=5, C=6, seed=0, logit_scale=2.0):
    g = torch.Generator().manual_seed(seed)
    dst = torch.randint(0, N - 1, (E,), generator=g)  # unsorted; the last node has no edge

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    y = r(E, st.reduced_dim(L), C)
    env = torch.rand(E, generator=g, dtype=torch.float64)
    if E:
        env[0] = 0.0  # an edge at the cutoff
    t = {
        "y": y,
        "env": env,
        "logits": r(E, H) * logit_scale if H else None,
        "z": torch.rand(H, generator=g, dtype=torch.float64) + 0.05 if H else None,
        "s": torch.rand(N, generator=g, dtype=torch.float64) + 0.5 if not H else None,
        "gout": r(N, st.dim_of(L), C),
    }
    t = {k: (v.to(dtype=dtype, device=device) if v is not None else None) for k, v in t.items()}
    return t, dst.to(device), st.rotate_inv_rescale(L, dtype, device), N


def _leaves(t):
    return {
        k: (v.detach().clone().requires_grad_(True) if v is not None and k != "gout" else v)
        for k, v in t.items()
    }


def _run(S, L, rho, dst, N, t):
    kw = {"logits": t["logits"], "z": t["z"]} if t["logits"] is not None else {"s": t["s"]}
    out = aggregate(t["y"], S, L, rho, dst, N, t["env"], **kw)
    ins = [t["y"], S.require(S.layout, "test"), t["env"]] + [v for v in kw.values()]
    return (out, *grads(out, ins, t["gout"]))


def _check_layouts(kdev, L, Ls, dtype, t0, dst, rho, N, empty):
    """Triton vs reference for both layouts; ``empty`` nodes give 0; band ≡ dense bitwise."""
    v = edge_vectors(t0["y"].shape[0], dtype, seed=1)
    tri = {}
    for layout, S0 in storages(v, Ls).items():
        S = leaf_storage(st.RotationStorage(layout, Ls, S0.require(layout, "t").to(kdev)))
        t = _leaves(t0)
        ref, out = run_both(lambda S=S, t=t: _run(S, L, rho, dst, N, t), kdev)
        for a, c in zip(out, ref):
            close(a, c, dtype, scale=10.0)
        for k in empty:
            assert torch.count_nonzero(out[0][k]) == 0  # node without edges
        if layout is st.RotationLayout.DENSE:
            assert torch.count_nonzero(off_band_dense(out[2], Ls)) == 0
        tri[layout] = out
    band, dense = tri[st.RotationLayout.BAND], tri[st.RotationLayout.DENSE]
    for i, (a, c) in enumerate(zip(band, dense)):
        if i == 2:
            c = band_view(c, st.RotationLayout.DENSE, Ls)
        assert torch.equal(a, c), f"output {i} differs between band and dense storage"


@pytest.mark.parametrize("L,Ls,dtype,H", TRITON_CASES)
def test_triton_matches_reference_both_layouts(kdev, L, Ls, dtype, H):
    t0, dst, rho, N = _inputs(L, dtype, H, kdev)
    _check_layouts(kdev, L, Ls, dtype, t0, dst, rho, N, empty=[N - 1])


@pytest.mark.parametrize("H", [0, 1, 3, 4])
def test_empty_nodes_between_segments(kdev, H):
    """Nodes without edges first, in the middle and last; segments of 2 to 38 edges (more than
    one step of the statistics pass); padded channel (C = 12) and head (H = 3) lanes."""
    L, N = 3, 7
    t0, _, rho, _ = _inputs(L, F32, H, kdev, E=45, N=N, C=12, seed=3)
    dst = torch.tensor([5, 1, 5, 2, 5, 4, 1, 5, 2, 5, 4, 1] + [5] * 33, device=kdev)
    dst = dst[torch.randperm(45, generator=torch.Generator().manual_seed(0))]
    assert tuning.current().aggregate.stats_edges < 38
    _check_layouts(kdev, L, L, F32, t0, dst, rho, N, empty=[0, 3, 6])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_huge_logits_and_empty_nodes(kdev, layout):
    """exp(logit) would overflow without the max shift; nodes without edges stay 0."""
    L, dtype = 2, F32
    t0, dst, rho, N = _inputs(L, dtype, 2, kdev, logit_scale=1.0)
    t0["logits"] = t0["logits"] + 1.0e4
    S = storages(edge_vectors(t0["y"].shape[0], dtype), L)[layout]
    S = st.RotationStorage(layout, L, S.require(layout, "t").to(kdev))
    with cm.force_triton():
        out = aggregate(t0["y"], S, L, rho, dst, N, t0["env"], logits=t0["logits"], z=t0["z"])
    assert torch.isfinite(out).all()
    assert torch.count_nonzero(out[N - 1]) == 0
    # shift invariance: the same result as logits without the offset, up to the null weight
    # (which becomes negligible against exp(1e4))
    shifted = aggregate(
        t0["y"].cpu().double(),
        st.RotationStorage(layout, L, S.require(layout, "t").cpu().double()),
        L,
        rho.cpu().double(),
        dst.cpu(),
        N,
        t0["env"].cpu().double(),
        logits=(t0["logits"] - 1.0e4).cpu().double(),
        z=torch.full((2,), 1e-30, dtype=torch.float64),
    )
    torch.testing.assert_close(out.cpu().double(), shifted, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("H", [0, 2])
def test_zero_edges(kdev, layout, H):
    L = 2
    t0, _, rho, N = _inputs(L, F32, H, kdev, E=0)
    dst = torch.zeros(0, dtype=torch.int64, device=kdev)
    S = storages(edge_vectors(0, F32), L)[layout]
    S = leaf_storage(st.RotationStorage(layout, L, S.require(layout, "t").to(kdev)))
    t = _leaves(t0)
    with cm.force_triton():
        res = _run(S, L, rho, dst, N, t)
    assert res[0].shape == (N, st.dim_of(L), 6)
    assert torch.count_nonzero(res[0]) == 0
    for g in res[1:]:
        assert g is None or torch.count_nonzero(g) == 0


@pytest.mark.parametrize("L,Ls", CASES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("H", [0, 2])
def test_closed_form_backward_matches_autograd(L, Ls, layout, H):
    dtype = F64
    t, dst, rho, N = _inputs(L, dtype, H, "cpu", seed=4)
    t = _leaves(t)
    S = storages(edge_vectors(t["y"].shape[0], dtype, seed=2), Ls)[layout]
    rot = S.require(layout, "t").clone().requires_grad_(True)
    code = st.LAYOUT_CODE[layout]
    args = (rho, dst, N, t["env"], t["logits"], t["z"], t["s"])
    out, stats = aggregate_reference(t["y"], rot, code, Ls, L, *args)
    ins = [t["y"], rot, t["env"]] + ([t["logits"], t["z"]] if H else [t["s"]])
    auto = grads(out, ins, t["gout"])
    gy, grot, genv, glog, gz, gs = aggregate_bwd_reference(
        t["gout"], out, stats, t["y"], rot, code, Ls, L, rho, dst, t["env"], t["logits"], t["z"],
        t["s"],
    )  # fmt: skip
    closed = [gy, grot, genv] + ([glog, gz] if H else [gs])
    for a, c in zip(closed, auto):
        torch.testing.assert_close(a, c, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("H", [0, 2])
def test_gradcheck_reference_op(H):
    L, dtype = 1, F64
    t, dst, rho, N = _inputs(L, dtype, H, "cpu", E=5, N=3, C=2, seed=7)
    S = storages(edge_vectors(5, dtype, seed=6), L)[st.RotationLayout.BAND]
    rot0 = S.require(st.RotationLayout.BAND, "t")
    layout = st.RotationLayout.BAND
    t["env"] = t["env"] + 0.1

    def f(y, rot, env, a, b=None):
        Sx = st.RotationStorage(layout, L, rot)
        if H:
            return aggregate(y, Sx, L, rho, dst, N, env, logits=a, z=b)
        return aggregate(y, Sx, L, rho, dst, N, env, s=a)

    extra = (t["logits"], t["z"]) if H else (t["s"],)
    args = tuple(x.detach().clone().requires_grad_(True) for x in (t["y"], rot0, t["env"], *extra))
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-8)


def test_bad_arguments():
    L = 2
    t, dst, rho, N = _inputs(L, F64, 0, "cpu")
    S = storages(edge_vectors(8, F64), L)[st.RotationLayout.BAND]
    with pytest.raises(ValueError):  # heads must divide channels (C = 6)
        aggregate(t["y"], S, L, rho, dst, N, t["env"], logits=torch.zeros(8, 4), z=torch.ones(4))
    with pytest.raises(ValueError):  # plain mode needs s
        aggregate(t["y"], S, L, rho, dst, N, t["env"])


@pytest.mark.parametrize("H", [0, 2])
def test_env_as_a_column_view(kdev, H):
    """env given as a column of a wider tensor (stride ≠ 1; a chunked evaluation's packed
    geometry) gives the contiguous call's output and gradients, bitwise."""
    L = 2
    t0, dst, rho, N = _inputs(L, F64, H, kdev, E=12)
    v = edge_vectors(12, F64, seed=1)
    S0 = storages(v, L)[st.RotationLayout.BAND]
    band = S0.require(S0.layout, "t").to(kdev)
    wide = torch.stack([t0["env"] * 7.0, t0["env"], -t0["env"]], dim=1)
    t = _leaves(t0)
    t["env"] = wide.detach().clone().requires_grad_(True)[:, 1]
    assert t["env"].stride() == (3,)
    with cm.force_triton():
        got = _run(leaf_storage(st.RotationStorage(S0.layout, L, band)), L, rho, dst, N, t)
        want = _run(leaf_storage(st.RotationStorage(S0.layout, L, band)), L, rho, dst, N,
                    _leaves(t0))  # fmt: skip
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@pytest.mark.parametrize("H", [0, 1, 3])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_prefetching_walks_are_bitwise_the_plain_ones(kdev, layout, H, monkeypatch):
    """The walks' prefetch (edge i + 1's loads issued before edge i's work) changes when loads
    are issued, not what is summed: the output and every cotangent equal the plain walks' bit
    for bit, with empty segments first, in the middle and last and segments of 1 to 33 edges."""
    L, N = 3, 7
    t0, _, rho, _ = _inputs(L, F32, H, kdev, E=45, N=N, C=12, seed=5)
    dst = torch.tensor([5, 1, 5, 2, 5, 4, 1, 5, 2, 5, 4, 1] + [5] * 32 + [2], device=kdev)
    dst[3] = 3  # a segment of one edge
    S0 = storages(edge_vectors(45, F32, seed=2), L)[layout]
    out = {}
    for pf in (False, True):
        S = leaf_storage(st.RotationStorage(layout, L, S0.require(layout, "t").to(kdev)))
        t = _leaves(t0)
        with cm.force_triton(), tuning.override(aggregate={"fwd_prefetch": pf, "bwd_prefetch": pf}):
            out[pf] = _run(S, L, rho, dst, N, t)
    for i, (a, b) in enumerate(zip(out[False], out[True])):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b), f"output {i} differs with the prefetching walk"
