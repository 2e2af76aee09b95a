"""rotate_mix's "dot" backward of radial rows (the tuning table's ``rotate_mix.bwd`` = "dot"):
vs the torch reference, vs the edge kernels, band vs dense bitwise; the mixer keeps the edge
kernels.

Tolerances (max-norm relative error of the output and every gradient against the float64 torch
reference of the same inputs): 1e-12 for float64, 1e-5 for float32 (rounding of sums over ≤ 11
edges, ≤ 7 columns and ≤ 20 channels; typically ~1e-7).
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
    grads,
    leaf_storage,
    off_band_dense,
    rel_max,
    storages,
)
from test_rotate_mix import _inputs

from mdband.kernels import _common as cm
from mdband.kernels import rotate_mix as rm
from mdband.kernels import tuning
from mdband.kernels.rotate_mix import launch
from mdband.kernels.rotate_mix.dot import DOT_MIN
from mdband.so3 import storage as st

F64, F32 = torch.float64, torch.float32
BAND, DENSE = st.RotationLayout.BAND, st.RotationLayout.DENSE
REL, COUNTS, EMPTY = DOT_REL, DOT_COUNTS, DOT_EMPTY  # segments per source node


def _src(device, seed=0):
    src = torch.cat([torch.full((c,), k) for k, c in enumerate(COUNTS)])
    g = torch.Generator().manual_seed(seed)
    return src[torch.randperm(src.shape[0], generator=g)].to(device)  # unsorted


@pytest.fixture
def dot_kernels():
    with tuning.override(rotate_mix={"bwd": "dot"}):
        yield


def _case(kdev, L, Ls, dtype, mode="none", R=1, C=5, seed=0):
    """Inputs (in ``dtype``) on the COUNTS segments and the storages of both layouts."""
    src = _src(kdev, seed)
    E, N = src.shape[0], len(COUNTS)
    x, _, k, b, rad, gy = _inputs(L, dtype, mode, kdev, E=E, N=N, C=C, R=R, seed=seed)
    v = edge_vectors(E, dtype, seed=seed + 1)
    S0 = {lay: S.require(lay, "t").to(kdev) for lay, S in storages(v, Ls).items()}
    return {"x": x, "src": src, "k": k, "b": b, "rad": rad, "gy": gy, "S0": S0, "L": L, "Ls": Ls}


def _run(c, layout, dtype=None):
    """(y, gx, grot, gk, gbasis) (mixer) or (y, gx, grot, grad) of rotate_mix on the case's
    inputs (cast to ``dtype`` if given), through autograd and the registered backward."""

    def leaf(t):
        if t is None:
            return None
        return (t if dtype is None else t.to(dtype)).detach().clone().requires_grad_(True)

    data = c["S0"][layout]
    S = leaf_storage(st.RotationStorage(layout, c["Ls"], data if dtype is None else data.to(dtype)))
    x, k, b, rad = leaf(c["x"]), leaf(c["k"]), leaf(c["b"]), leaf(c["rad"])
    ins = [t for t in (x, S.require(layout, "t"), k, b, rad) if t is not None]
    y = rm.rotate_mix(x, c["src"], S, c["L"], k, b, rad)
    gy = c["gy"] if dtype is None else c["gy"].to(dtype)
    return (y, *grads(y, ins, gy))


def _triton(c, layout):
    with cm.force_triton():
        return _run(c, layout)


def _reference64(c, layout):
    with cm.force_backend("reference"):
        return _run(c, layout, F64)


def _check(kdev, L, Ls, dtype, C=5):
    c = _case(kdev, L, Ls, dtype, C=C, seed=L + 3)
    res = {}
    for layout in (BAND, DENSE):
        out = _triton(c, layout)
        ref = _reference64(c, layout)
        for i, (a, b) in enumerate(zip(out, ref)):
            assert a.dtype == dtype
            assert rel_max(a, b) <= REL[dtype], f"output {i} ({layout.value}): {rel_max(a, b):.2e}"
        for n in EMPTY:
            assert torch.count_nonzero(out[1][n]) == 0  # gx of a node without edges
        if layout is DENSE:
            assert torch.count_nonzero(off_band_dense(out[2], Ls)) == 0
        res[layout] = out
    # same code on the same entries: bitwise identical (the rotation cotangent as a band)
    for i, (a, b) in enumerate(zip(res[BAND], res[DENSE])):
        if i == 2:
            b = band_view(b, DENSE, Ls)
        assert torch.equal(a, b), f"output {i} differs between band and dense storage"


CASES = [(1, 1), (2, 2), (3, 3), (2, 3)]  # (consumer lmax, storage lmax)


@pytest.mark.parametrize("L,Ls", CASES)
def test_dot_matches_reference_float64(kdev, dot_kernels, L, Ls):
    _check(kdev, L, Ls, F64)


@pytest.mark.parametrize("L,Ls", CASES)
def test_dot_matches_reference_float32(kdev, dot_kernels, L, Ls):
    _check(kdev, L, Ls, F32)


@pytest.mark.parametrize("dtype", [F64, F32])
def test_dot_padded_channels(kdev, dot_kernels, dtype):
    """C = 20 (BC = 32, lanes 20..31 masked)."""
    _check(kdev, 2, 2, dtype, C=20)


def test_dot_eight_edges_per_step(kdev, dot_kernels):
    """The other step size the GPU benchmark sweeps (R = 32 rows), and 4 warps."""
    with tuning.override(rotate_mix={"dot_edges": 8, "dot_warps": 4}):
        _check(kdev, 3, 3, F64)


@pytest.mark.parametrize("precision", ["tf32x3", "ieee"])
@pytest.mark.parametrize("edges,warps", [(4, 1), (16, 4)])
@pytest.mark.parametrize("L,Ls", [(2, 2), (3, 3)])
def test_dot_precisions_match_reference(kdev, dot_kernels, L, Ls, edges, warps, precision):
    """float32's tl.dot precision ("tf32x3", Triton's three-TF32 product, the default; or the
    exact "ieee" FMAs), at the default step and at 16 edges per step: the tolerance of the
    exact FMAs, band == dense bitwise; float64 is always exact."""
    x32, x64 = torch.zeros(1, dtype=F32), torch.zeros(1, dtype=F64)
    change = {"dot_edges": edges, "dot_warps": warps, "dot_precision": precision}
    with tuning.override(rotate_mix=change):
        assert launch.dot_precision(x32) == precision and launch.dot_precision(x64) == "ieee"
        _check(kdev, L, Ls, F32)


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("L,Ls", [(3, 3), (1, 3)])
def test_dot_equals_edge(kdev, L, Ls, dtype):
    """The two kernel families differ by the order of their sums only."""
    c = _case(kdev, L, Ls, dtype, seed=7)
    res = {}
    for name in ("edge", "dot"):
        with tuning.override(rotate_mix={"bwd": name}):
            res[name] = _triton(c, BAND)
    for i, (a, b) in enumerate(zip(res["dot"], res["edge"])):
        assert rel_max(a, b) <= REL[dtype], f"output {i}: {rel_max(a, b):.2e}"


def test_dot_zero_edges(kdev, dot_kernels):
    L = 2
    x0, src, k0, b0, rad0, gy = _inputs(L, F32, "none", kdev, E=0)
    S = storages(edge_vectors(0, F32), L)[BAND]
    S = leaf_storage(st.RotationStorage(BAND, L, S.require(BAND, "t").to(kdev)))
    x = x0.clone().requires_grad_(True)
    rad = rad0.clone().requires_grad_(True)
    with cm.force_triton():
        y = rm.rotate_mix(x, src, S, L, rad=rad)
        g = grads(y, [x, S.require(BAND, "t"), rad], gy)
    assert y.shape == (0, st.reduced_dim(L), x.shape[2])
    assert torch.count_nonzero(g[0]) == 0


def test_choice_default_and_bad_value(kdev):
    """The backward's "auto" is the tf32x3 dot for float32 radial rows only (the edge kernels for
    the mixer, also when "dot" is asked, and for float64); a kernel name not allowed is
    refused."""
    assert tuning.DEFAULTS.rotate_mix.bwd == "auto"
    x32, x64 = torch.zeros(1, dtype=F32), torch.zeros(1, dtype=F64)
    assert launch.bwd_kernels(x32, mix=False) == "dot"
    assert launch.bwd_kernels(x32, mix=True) == "edge"
    assert launch.bwd_kernels(x64, mix=False) == "edge"
    with tuning.override(rotate_mix={"bwd": "dot"}):
        assert launch.bwd_kernels(x64, mix=False) == "dot"
        assert launch.bwd_kernels(x32, mix=True) == "edge"
    # R = edges · SP rows fill a dot tile
    assert tuning.DEFAULTS.rotate_mix.dot_edges * st.KERNEL_SLOTS >= DOT_MIN
    with pytest.raises(ValueError, match="RotateMixTuning.bwd"):
        with tuning.override(rotate_mix={"bwd": "tiles"}):
            pass
    with pytest.raises(ValueError, match="16 tl.dot rows"):
        with tuning.override(rotate_mix={"dot_edges": 2}):
            pass
