"""rotate_mix's "dot" kernels (``rotate_mix.KERNELS`` = "dot"): vs the torch reference, vs the
"edge" kernels, band vs dense bitwise.

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
    switched,
)
from test_rotate_mix import _inputs

from mdband.kernels import _common as cm
from mdband.kernels import _rotate_mix_dot as dot
from mdband.kernels import rotate_mix as rm
from mdband.so3 import storage as st

F64, F32 = torch.float64, torch.float32
BAND, DENSE = st.RotationLayout.BAND, st.RotationLayout.DENSE
REL, COUNTS, EMPTY = (
    DOT_REL,
    DOT_COUNTS,
    DOT_EMPTY,
)  # per source (rotate_mix) / destination (aggregate)
# (mode, rank): the mixer of rank 1 and 2, and the elementwise radial weights
MODES = [("mix", 1), ("mix", 2), ("none", 1)]


def _src(device, seed=0):
    src = torch.cat([torch.full((c,), k) for k, c in enumerate(COUNTS)])
    g = torch.Generator().manual_seed(seed)
    return src[torch.randperm(src.shape[0], generator=g)].to(device)  # unsorted


@pytest.fixture
def dot_kernels(monkeypatch):
    monkeypatch.setitem(rm.KERNELS, "fwd", "dot")
    monkeypatch.setitem(rm.KERNELS, "bwd", "dot")


def _case(kdev, L, Ls, dtype, mode, R, C=5, seed=0):
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


def _check(kdev, L, Ls, dtype, mode, R, C=5):
    c = _case(kdev, L, Ls, dtype, mode, R, C=C, seed=L + 3 * R)
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


@pytest.mark.parametrize("mode,R", MODES)
@pytest.mark.parametrize("L,Ls", CASES)
def test_dot_matches_reference_float64(kdev, dot_kernels, L, Ls, mode, R):
    _check(kdev, L, Ls, F64, mode, R)


@pytest.mark.parametrize("mode,R", MODES)
@pytest.mark.parametrize("L,Ls", CASES)
def test_dot_matches_reference_float32(kdev, dot_kernels, L, Ls, mode, R):
    _check(kdev, L, Ls, F32, mode, R)


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("mode,R", [("mix", 1), ("none", 1)])
def test_dot_padded_channels(kdev, dot_kernels, dtype, mode, R):
    """C = 20 (BC = 32, lanes 20..31 masked)."""
    _check(kdev, 2, 2, dtype, mode, R, C=20)


@pytest.mark.parametrize("mode,R", MODES)
def test_dot_eight_edges_per_step(kdev, dot_kernels, monkeypatch, mode, R):
    """The other step size the GPU benchmark sweeps (R = 32 rows), and 4 warps."""
    monkeypatch.setattr(dot, "DOT_EDGES", 8)
    monkeypatch.setattr(dot, "DOT_WARPS", 4)
    _check(kdev, 3, 3, F64, mode, R)


@pytest.mark.parametrize("edges,warps", [(4, None), (16, 4)])
@pytest.mark.parametrize("mode,R", MODES)
@pytest.mark.parametrize("L,Ls", [(2, 2), (3, 3)])
def test_dot_tf32x3_matches_reference(kdev, dot_kernels, monkeypatch, L, Ls, mode, R, edges,
                                      warps):  # fmt: skip
    """``DOT_PRECISION`` "tf32x3" (Triton's three-TF32 product) in both passes, at the default
    step and at 16 edges per step: float32 to the tolerance of the exact FMAs, band == dense
    bitwise; float64 ignores it (exact)."""
    monkeypatch.setitem(dot.DOT_PRECISION, "fwd", "tf32x3")
    monkeypatch.setitem(dot.DOT_PRECISION, "bwd", "tf32x3")
    monkeypatch.setattr(dot, "DOT_EDGES", edges)
    monkeypatch.setattr(dot, "DOT_WARPS", warps)
    x32, x64 = torch.zeros(1, dtype=F32), torch.zeros(1, dtype=F64)
    assert dot.precision(x32, "fwd") == "tf32x3" and dot.precision(x64, "bwd") == "ieee"
    _check(kdev, L, Ls, F32, mode, R)


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("L,Ls,mode,R", [(3, 3, "mix", 1), (3, 3, "none", 1), (1, 3, "mix", 2)])
def test_dot_equals_edge(kdev, L, Ls, dtype, mode, R):
    """The two kernel families differ by the order of their sums only."""
    c = _case(kdev, L, Ls, dtype, mode, R, seed=7)
    res = {}
    for name in ("edge", "dot"):
        with switched(rm, name):
            res[name] = _triton(c, BAND)
    for i, (a, b) in enumerate(zip(res["dot"], res["edge"])):
        assert rel_max(a, b) <= REL[dtype], f"output {i}: {rel_max(a, b):.2e}"


@pytest.mark.parametrize("fwd,bwd", [("dot", "edge"), ("edge", "dot")])
def test_mixed_passes(kdev, fwd, bwd):
    """Forward and backward kernels chosen independently."""
    c = _case(kdev, 2, 2, F64, "mix", 1, seed=2)
    ref = _reference64(c, BAND)
    with switched(rm, fwd, bwd):
        out = _triton(c, BAND)
    for i, (a, b) in enumerate(zip(out, ref)):
        assert rel_max(a, b) <= REL[F64], f"output {i}: {rel_max(a, b):.2e}"


@pytest.mark.parametrize("mode,R", [("mix", 1), ("none", 1)])
def test_dot_zero_edges(kdev, dot_kernels, mode, R):
    L = 2
    x0, src, k0, b0, rad0, gy = _inputs(L, F32, mode, kdev, E=0, R=R)
    S = storages(edge_vectors(0, F32), L)[BAND]
    S = leaf_storage(st.RotationStorage(BAND, L, S.require(BAND, "t").to(kdev)))
    x = x0.clone().requires_grad_(True)
    extra = [t.clone().requires_grad_(True) if t is not None else None for t in (k0, b0, rad0)]
    ins = [t for t in (x, S.require(BAND, "t"), *extra) if t is not None]
    with cm.force_triton():
        y = rm.rotate_mix(x, src, S, L, *extra)
        g = grads(y, ins, gy)
    assert y.shape == (0, st.reduced_dim(L), x.shape[2])
    assert torch.count_nonzero(g[0]) == 0
    if mode == "mix":
        assert torch.count_nonzero(g[-1]) == 0  # basis


def test_switch_default_and_bad_value(kdev, monkeypatch):
    """The backward's "auto" is the tf32x3 dot for float32 radial rows only (the edge kernels for
    the mixer and for float64); a kernel name not allowed is refused."""
    assert rm.KERNELS == {"fwd": "edge", "bwd": "auto"}
    x32, x64 = torch.zeros(1, dtype=F32), torch.zeros(1, dtype=F64)
    assert dot.chosen(rm.KERNELS, "bwd", x32, mix=False) == "dot"
    assert dot.chosen(rm.KERNELS, "bwd", x32, mix=True) == "edge"
    assert dot.chosen(rm.KERNELS, "bwd", x64, mix=False) == "edge"
    assert dot.chosen(rm.KERNELS, "fwd", x32, mix=False) == "edge"
    assert dot.DOT_EDGES * st.KERNEL_SLOTS >= dot.DOT_MIN  # R = BE · SP rows fill a dot tile
    monkeypatch.setitem(rm.KERNELS, "fwd", "tiles")
    c = _case(kdev, 1, 1, F64, "mix", 1)
    with pytest.raises(ValueError, match="KERNELS"):
        _triton(c, BAND)
