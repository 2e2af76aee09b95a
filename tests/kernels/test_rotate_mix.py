"""rotate_mix: Triton vs torch reference, band vs dense bitwise, closed-form backward."""

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
from mdband.kernels.rotate_mix import (
    mixer_size,
    rotate_mix,
    rotate_mix_bwd_reference,
    rotate_mix_reference,
)
from mdband.so3 import storage as st

CASES = [(1, 1), (2, 2), (3, 3), (4, 4), (2, 3)]  # (consumer lmax, storage lmax)
F64, F32 = torch.float64, torch.float32


@pytest.fixture(autouse=True)
def edge_kernels():
    """These are the edge kernels' tests: the backward pinned to them (float32's default
    backward for radial rows, "auto", is the tf32x3 dot, tested in test_rotate_mix_dot.py)."""
    with tuning.override(rotate_mix={"bwd": "edge"}):
        yield


# (lmax, storage lmax, dtype, mode, rank): every degree and both modes in fp64, fp32 spot checks
TRITON_CASES = [(L, Ls, F64, mode, 1) for (L, Ls) in CASES for mode in ("mix", "none")]
TRITON_CASES += [(3, 3, F32, "mix", 1), (3, 3, F32, "none", 1), (2, 2, F64, "mix", 3)]


def _inputs(L, dtype, mode, device, E=7, N=4, C=5, R=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, N - 1, (E,), generator=g)  # the last node has no out-edge

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype).to(device)

    x = r(N, st.dim_of(L), C)
    if mode == "mix":
        k, b, rad = r(E, mixer_size(L), R), r(R, C), None
    else:
        k, b, rad = None, None, r(E, st.reduced_dim(L), C)
    gy = r(E, st.reduced_dim(L), C)
    return x, src.to(device), k, b, rad, gy


def _leaf(t):
    return None if t is None else t.detach().clone().requires_grad_(True)


@pytest.mark.parametrize("L,Ls,dtype,mode,R", TRITON_CASES)
def test_triton_matches_reference_both_layouts(kdev, L, Ls, dtype, mode, R):
    E = 7
    x0, src, k0, b0, rad0, gy = _inputs(L, dtype, mode, kdev, E=E, R=R)
    v = edge_vectors(E, dtype)
    tri = {}
    for layout, S0 in storages(v, Ls).items():
        S = leaf_storage(st.RotationStorage(layout, Ls, S0.require(layout, "t").to(kdev)))
        rot = S.require(layout, "test")
        x, k, b, rad = _leaf(x0), _leaf(k0), _leaf(b0), _leaf(rad0)
        ins = [t for t in (x, rot, k, b, rad) if t is not None]

        def fn(x=x, S=S, k=k, b=b, rad=rad, ins=ins):
            y = rotate_mix(x, src, S, L, k, b, rad)
            return (y, *grads(y, ins, gy))

        ref, out = run_both(fn, kdev)
        for a, c in zip(out, ref):
            close(a, c, dtype, scale=10.0)
        if layout is st.RotationLayout.DENSE:
            assert torch.count_nonzero(off_band_dense(out[2], Ls)) == 0
        tri[layout] = out
    band, dense = tri[st.RotationLayout.BAND], tri[st.RotationLayout.DENSE]
    # same arithmetic in the same order: bitwise identical (the rotation cotangent as a band)
    for i, (a, c) in enumerate(zip(band, dense)):
        if i == 2:
            c = band_view(c, st.RotationLayout.DENSE, Ls)
        assert torch.equal(a, c), f"output {i} differs between band and dense storage"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["mix", "none"])
def test_zero_edges(kdev, layout, mode):
    L = 2
    x0, src, k0, b0, rad0, gy = _inputs(L, torch.float32, mode, kdev, E=0)
    S = leaf_storage(storages(edge_vectors(0, torch.float32), L)[layout])
    S = leaf_storage(st.RotationStorage(layout, L, S.require(layout, "t").detach().to(kdev)))
    x, k, b, rad = _leaf(x0), _leaf(k0), _leaf(b0), _leaf(rad0)
    ins = [t for t in (x, S.require(layout, "t"), k, b, rad) if t is not None]
    with cm.force_triton():
        y = rotate_mix(x, src, S, L, k, b, rad)
        g = grads(y, ins, gy)
    assert y.shape == (0, st.reduced_dim(L), x.shape[2])
    assert torch.count_nonzero(g[0]) == 0
    if mode == "mix":
        assert torch.count_nonzero(g[-1]) == 0  # basis


@pytest.mark.parametrize("L,Ls", CASES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["mix", "none"])
def test_closed_form_backward_matches_autograd(L, Ls, layout, mode):
    dtype = torch.float64
    x0, src, k0, b0, rad0, gy = _inputs(L, dtype, mode, "cpu", E=7)
    S = storages(edge_vectors(7, dtype, seed=3), Ls)[layout]
    rot = S.require(layout, "t").clone().requires_grad_(True)
    x, k, b, rad = _leaf(x0), _leaf(k0), _leaf(b0), _leaf(rad0)
    code = st.LAYOUT_CODE[layout]
    y = rotate_mix_reference(x, src, rot, code, Ls, L, k, b, rad)
    ins = [t for t in (x, rot, k, b, rad) if t is not None]
    auto = grads(y, ins, gy)
    gx, grot, gk, gb, grad = rotate_mix_bwd_reference(gy, x, src, rot, code, Ls, L, k, b, rad)
    closed = [gx, grot] + ([gk, gb] if mode == "mix" else [grad])
    for a, c in zip(closed, auto):
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradcheck_reference_op(layout):
    """The registered op (CPU: reference forward + closed-form backward) vs finite differences."""
    L, Ls, dtype = 1, 2, torch.float64
    x0, src, k0, b0, _, _ = _inputs(L, dtype, "mix", "cpu", E=4, N=3, C=2, R=1)
    S = storages(edge_vectors(4, dtype, seed=5), Ls)[layout]
    rot0 = S.require(layout, "t")

    def f(x, rot, k, b):
        return rotate_mix(x, src, st.RotationStorage(layout, Ls, rot), L, k, b)

    args = tuple(_leaf(t) for t in (x0, rot0, k0, b0))
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-8)


def test_bad_arguments():
    L = 2
    x, src, k, b, rad, _ = _inputs(L, torch.float64, "mix", "cpu", E=5)
    S = storages(edge_vectors(5, torch.float64), L)[st.RotationLayout.BAND]
    with pytest.raises(ValueError):
        rotate_mix(x, src, S, L, k, None)
    with pytest.raises(ValueError):
        rotate_mix(x, src, S, L, k, b, torch.zeros(5, 7, 6, dtype=torch.float64))
    with pytest.raises(ValueError):
        rotate_mix(x[:, :4], src, S, L, k, b)
