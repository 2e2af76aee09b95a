"""zonal_embed: Triton vs reference, band vs dense bitwise, storage.zonal, closed-form backward."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import (
    LAYOUTS,
    band_view,
    close,
    edge_vectors,
    grads,
    intercept_launches,
    leaf_storage,
    run_both,
    storages,
)

from mdband.kernels import _common as cm
from mdband.kernels import tuning, zonal
from mdband.kernels.zonal import zonal_embed, zonal_embed_bwd_reference, zonal_embed_reference
from mdband.so3 import storage as st

F64, F32 = torch.float64, torch.float32
CASES = [(1, 1), (2, 2), (3, 3), (4, 4), (2, 3)]
TRITON_CASES = [(L, Ls, F64) for (L, Ls) in CASES] + [(3, 3, F32)]


def _inputs(L, dtype, device, E=8, N=5, C=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    dst = torch.randint(0, N - 1, (E,), generator=g)
    radial = torch.randn(E, L + 1, C, generator=g, dtype=torch.float64)
    s = torch.rand(N, generator=g, dtype=torch.float64) + 0.5
    gout = torch.randn(N, st.dim_of(L), C, generator=g, dtype=torch.float64)
    return [t.to(dtype=dtype, device=device) for t in (radial, s, gout)] + [dst.to(device)]


@pytest.mark.parametrize("L,Ls,dtype", TRITON_CASES)
@pytest.mark.parametrize("E,bwd", [(8, "auto"), (100, "auto"), (8, "walk")])
def test_triton_matches_reference_both_layouts(kdev, L, Ls, dtype, E, bwd, monkeypatch):
    """Forward and backward against the reference, band == dense bit for bit: float32's dot
    backward (one step per node, or several of the tuning table's dot edges with a ragged end:
    100 edges over 4 nodes) and the walk (float64's, and float32's when asked); a fifth node
    without edges."""
    with tuning.override(zonal={"bwd": bwd}):
        _triton_matches_reference(kdev, L, Ls, dtype, E, bwd, monkeypatch)


def _triton_matches_reference(kdev, L, Ls, dtype, E, bwd, monkeypatch):
    seen = []
    intercept_launches(monkeypatch, lambda k, grid, kw: seen.append(k.__name__))
    radial0, s0, gout, dst = _inputs(L, dtype, kdev, E=E)
    v = edge_vectors(radial0.shape[0], dtype, seed=2)
    tri = {}
    for layout, S0 in storages(v, Ls).items():
        S = leaf_storage(st.RotationStorage(layout, Ls, S0.require(layout, "t").to(kdev)))
        radial = radial0.clone().requires_grad_(True)
        s = s0.clone().requires_grad_(True)

        def fn(S=S, radial=radial, s=s):
            out = zonal_embed(S, radial, dst, s)
            return (out, *grads(out, (S.require(S.layout, "t"), radial, s), gout))

        ref, out = run_both(fn, kdev)
        for a, c in zip(out, ref):
            close(a, c, dtype, scale=10.0)
        assert torch.count_nonzero(out[0][:, 0]) == 0  # degree 0 is not embedded
        assert torch.count_nonzero(out[0][-1]) == 0  # node without edges
        assert torch.count_nonzero(out[2][:, 0]) == 0  # no gradient to radial l = 0
        tri[layout] = out
    dot = bwd == "auto" and dtype == F32
    assert ("zonal_dot_bwd_kernel" in seen) is dot and ("zonal_walk_bwd_kernel" in seen) is not dot
    band, dense = tri[st.RotationLayout.BAND], tri[st.RotationLayout.DENSE]
    for i, (a, c) in enumerate(zip(band, dense)):
        if i == 1:
            c = band_view(c, st.RotationLayout.DENSE, Ls)
        assert torch.equal(a, c), f"output {i} differs between band and dense storage"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_matches_storage_zonal(layout):
    """The op reads exactly storage.zonal (the m = 0 rows)."""
    L, Ls = 2, 3
    radial, s, _, dst = _inputs(L, F64, "cpu")
    S = storages(edge_vectors(radial.shape[0], F64, seed=9), Ls)[layout]
    Y = st.zonal(S, L)
    deg = torch.tensor([l for l in range(L + 1) for _ in range(2 * l + 1)])
    want = torch.zeros(s.shape[0], st.dim_of(L), radial.shape[2], dtype=F64)
    want = want.index_add(0, dst, Y[:, :, None] * radial[:, deg, :] * (deg > 0)[None, :, None])
    torch.testing.assert_close(zonal_embed(S, radial, dst, s), want * s[:, None, None])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_zero_edges(kdev, layout):
    L = 2
    radial, s, gout, _ = _inputs(L, F32, kdev, E=0)
    dst = torch.zeros(0, dtype=torch.int64, device=kdev)
    S = storages(edge_vectors(0, F32), L)[layout]
    S = leaf_storage(st.RotationStorage(layout, L, S.require(layout, "t").to(kdev)))
    s = s.clone().requires_grad_(True)
    with cm.force_triton():
        out = zonal_embed(S, radial, dst, s)
        (gs,) = grads(out, (s,), gout)
    assert torch.count_nonzero(out) == 0 and torch.count_nonzero(gs) == 0


@pytest.mark.parametrize("L,Ls", CASES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_closed_form_backward_matches_autograd(L, Ls, layout):
    radial, s, gout, dst = _inputs(L, F64, "cpu", seed=3)
    radial.requires_grad_(True)
    s.requires_grad_(True)
    S = storages(edge_vectors(radial.shape[0], F64, seed=4), Ls)[layout]
    rot = S.require(layout, "t").clone().requires_grad_(True)
    code = st.LAYOUT_CODE[layout]
    out = zonal_embed_reference(rot, code, Ls, L, radial, dst, s, s.shape[0])
    auto = grads(out, (rot, radial, s), gout)
    closed = zonal_embed_bwd_reference(gout, rot, code, Ls, L, radial, dst, s)
    for a, c in zip(closed, auto):
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)


def test_unknown_backward_kernel_raises():
    """The tuning table's ``zonal.bwd`` is "auto" or "walk" (the float32 dot has no float64
    form); the default picks the dot for float32 only."""
    with pytest.raises(ValueError, match="ZonalTuning.bwd"):
        with tuning.override(zonal={"bwd": "dot"}):
            pass
    assert zonal.bwd_kernel(torch.zeros(1, 2, 3, dtype=F32)) == "dot"  # the interpreter
    assert zonal.bwd_kernel(torch.zeros(1, 2, 3, dtype=F64)) == "walk"
