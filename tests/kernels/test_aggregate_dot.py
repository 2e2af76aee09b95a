"""aggregate's "dot" backward (the tuning table's ``aggregate.bwd`` = "dot"): vs the torch
reference, vs the walk backward, band vs dense bitwise.

Tolerances (max-norm relative error of every output and gradient against the float64 torch
reference of the same inputs): 1e-12 for float64, 1e-5 for float32 (rounding of sums over ≤ 11
edges and ≤ 20 channels; typically ~1e-7).
"""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import (
    DOT_COUNTS,
    DOT_EMPTY,
    DOT_REL,
    band_view,
    edge_vectors,
    leaf_storage,
    off_band_dense,
    rel_max,
    storages,
)
from test_aggregate import _inputs, _leaves, _run

from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.kernels.aggregate import launch
from mdband.kernels.aggregate.dot import DOT_MIN
from mdband.so3 import storage as st

F64, F32 = torch.float64, torch.float32
BAND, DENSE = st.RotationLayout.BAND, st.RotationLayout.DENSE
REL, COUNTS, EMPTY = DOT_REL, DOT_COUNTS, DOT_EMPTY


def _dst(device, seed=0):
    dst = torch.cat([torch.full((c,), k) for k, c in enumerate(COUNTS)])
    return dst[torch.randperm(dst.shape[0], generator=torch.Generator().manual_seed(seed))].to(
        device
    )  # unsorted


@pytest.fixture
def dot_kernels():
    with tuning.override(aggregate={"bwd": "dot"}):
        yield


def _case(kdev, L, Ls, dtype, H, C=6, seed=0):
    """Inputs (in ``dtype``) on the COUNTS segments and the storages of both layouts."""
    t0, _, rho, N = _inputs(L, dtype, H, kdev, E=sum(COUNTS), N=len(COUNTS), C=C, seed=seed)
    dst = _dst(kdev, seed)
    v = edge_vectors(dst.shape[0], dtype, seed=seed + 1)
    S0 = {lay: S.require(lay, "t").to(kdev) for lay, S in storages(v, Ls).items()}
    return t0, dst, rho, N, S0


def _triton(S0, layout, Ls, L, rho, dst, N, t0):
    """(out, gy, grot, genv, glogits, gz | gs) of the Triton path (the kernels as set)."""
    S = leaf_storage(st.RotationStorage(layout, Ls, S0[layout]))
    with cm.force_triton():
        return _run(S, L, rho, dst, N, _leaves(t0))


def _reference64(S0, layout, Ls, L, rho, dst, N, t0):
    """The same outputs from the torch reference on the inputs cast to float64."""
    t = {k: (v.double() if v is not None else None) for k, v in t0.items()}
    S = leaf_storage(st.RotationStorage(layout, Ls, S0[layout].double()))
    with cm.force_backend("reference"):
        return _run(S, L, rho.double(), dst, N, _leaves(t))


def _check(kdev, L, Ls, dtype, H, C=6):
    t0, dst, rho, N, S0 = _case(kdev, L, Ls, dtype, H, C=C, seed=L + 3 * H)
    res = {}
    for layout in (BAND, DENSE):
        out = _triton(S0, layout, Ls, L, rho, dst, N, t0)
        ref = _reference64(S0, layout, Ls, L, rho, dst, N, t0)
        for i, (a, b) in enumerate(zip(out, ref)):
            assert a.dtype == dtype
            assert rel_max(a, b) <= REL[dtype], f"output {i} ({layout.value}): {rel_max(a, b):.2e}"
        for k in EMPTY:
            assert torch.count_nonzero(out[0][k]) == 0  # node without edges
        if layout is DENSE:
            assert torch.count_nonzero(off_band_dense(out[2], Ls)) == 0
        res[layout] = out
    for i, (a, b) in enumerate(zip(res[BAND], res[DENSE])):
        if i == 2:
            b = band_view(b, DENSE, Ls)
        assert torch.equal(a, b), f"output {i} differs between band and dense storage"


CASES = [(0, 0), (1, 1), (2, 2), (3, 3), (2, 3)]


@pytest.mark.parametrize("H", [0, 1, 2])
@pytest.mark.parametrize("L,Ls", CASES)
def test_dot_matches_reference_float64(kdev, dot_kernels, L, Ls, H):
    _check(kdev, L, Ls, F64, H)


@pytest.mark.parametrize("H", [0, 1, 2])
@pytest.mark.parametrize("L,Ls", CASES)
def test_dot_matches_reference_float32(kdev, dot_kernels, L, Ls, H):
    _check(kdev, L, Ls, F32, H)


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("H", [0, 4])
def test_dot_padded_channels_and_heads(kdev, dot_kernels, dtype, H):
    """C = 20 (BC = 32, lanes 20..31 masked), H = 4 heads of 5 channels (HPK = 16)."""
    _check(kdev, 2, 2, dtype, H, C=20)


@pytest.mark.parametrize("H", [0, 1, 2])
def test_dot_eight_edges_per_step(kdev, dot_kernels, H):
    """The other step size the GPU benchmark sweeps (R = 32 rows), and 4 warps."""
    eight = tuning.DotLaunch(edges=8, warps=4)
    with tuning.override(aggregate={"dot_ieee": eight, "dot_tf32x3": eight}):
        _check(kdev, 3, 3, F64, H)


@pytest.mark.parametrize("precision", ["tf32x3", "ieee"])
@pytest.mark.parametrize("H", [0, 1, 2])
@pytest.mark.parametrize("L,Ls", [(2, 2), (3, 3)])
def test_dot_precisions_match_reference(kdev, dot_kernels, precision, L, Ls, H):
    """float32's tl.dot precision ("tf32x3", Triton's three-TF32 product, the default; or the
    exact "ieee" FMAs): the same tolerance, band == dense bitwise; float64 is always exact."""
    y32, y64 = torch.zeros(1, dtype=F32), torch.zeros(1, dtype=F64)
    with tuning.override(aggregate={"dot_precision": precision}):
        assert launch.dot_precision(y32) == precision and launch.dot_precision(y64) == "ieee"
        _check(kdev, L, Ls, F32, H)


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("L,Ls,H", [(3, 3, 0), (3, 3, 2), (1, 3, 1)])
def test_dot_equals_walk(kdev, L, Ls, dtype, H):
    """The two kernel families differ by the order of their sums only."""
    t0, dst, rho, N, S0 = _case(kdev, L, Ls, dtype, H, seed=7)
    res = {}
    for name in ("walk", "dot"):
        with tuning.override(aggregate={"bwd": name}):
            res[name] = _triton(S0, BAND, Ls, L, rho, dst, N, t0)
    for i, (a, b) in enumerate(zip(res["dot"], res["walk"])):
        assert rel_max(a, b) <= REL[dtype], f"output {i}: {rel_max(a, b):.2e}"


@pytest.mark.parametrize("H", [0, 2])
def test_dot_zero_edges(kdev, dot_kernels, H):
    L = 2
    t0, _, rho, N = _inputs(L, F32, H, kdev, E=0)
    dst = torch.zeros(0, dtype=torch.int64, device=kdev)
    S = storages(edge_vectors(0, F32), L)[BAND]
    S = leaf_storage(st.RotationStorage(BAND, L, S.require(BAND, "t").to(kdev)))
    with cm.force_triton():
        res = _run(S, L, rho, dst, N, _leaves(t0))
    assert torch.count_nonzero(res[0]) == 0
    for g in res[1:]:
        assert g is None or torch.count_nonzero(g) == 0


def test_choice_default_and_bad_value(kdev):
    """The backward's "auto" is the tf32x3 dot in float32 and the exact walk in float64; every
    launch's R = edges · SP rows fill a dot tile; a kernel name not allowed is refused."""
    assert tuning.DEFAULTS.aggregate.bwd == "auto"
    y32, y64 = torch.zeros(1, dtype=F32), torch.zeros(1, dtype=F64)
    assert launch.bwd_kernels(y32) == "dot"
    assert launch.bwd_kernels(y64) == "walk"
    for dot_launch in (tuning.DEFAULTS.aggregate.dot_ieee, tuning.DEFAULTS.aggregate.dot_tf32x3):
        assert dot_launch.edges * st.KERNEL_SLOTS >= DOT_MIN
    with pytest.raises(ValueError, match="AggregateTuning.bwd"):
        with tuning.override(aggregate={"bwd": "tiles"}):
            pass
    with pytest.raises(ValueError, match="16 tl.dot rows"):
        with tuning.override(aggregate={"dot_ieee": tuning.DotLaunch(edges=2)}):
            pass
