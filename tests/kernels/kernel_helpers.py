"""Shared builders and comparisons of the kernel tests."""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.so3 import storage as st
from mdband.so3.frames import unit_vectors
from mdband.so3.wigner import band_from_unit, dense_from_unit

LAYOUTS = (st.RotationLayout.BAND, st.RotationLayout.DENSE)


def edge_vectors(E: int, dtype, device="cpu", seed: int = 0) -> torch.Tensor:
    """Random edge vectors including both chart hemispheres and the poles."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(E, 3, generator=g, dtype=torch.float64) * 1.5
    if E >= 3:
        v[0] = torch.tensor([0.0, 0.0, 1.3])
        v[1] = torch.tensor([0.0, 0.0, -0.7])
        v[2] = torch.tensor([0.4, -0.2, -1e-3])
    return v.to(dtype=dtype, device=device)


def storages(v: torch.Tensor, lmax_s: int) -> dict:
    """{layout: RotationStorage} of the same rotations in both layouts.

    The dense matrices come from the quadrature construction (so the off-band entries are real,
    non-zero Wigner entries a kernel must never read); their band entries are then set to the
    band's values, so band and dense hold bit-identical structural entries.
    """
    u, _ = unit_vectors(v.to(torch.float64))
    band = band_from_unit(u, lmax_s).to(v.dtype)
    dense = dense_from_unit(u, lmax_s).to(v.dtype)
    D = st.dim_of(lmax_s)
    flat = dense.reshape(-1, D * D).clone()
    flat[:, st.tables(lmax_s, v.device)["flat"]] = band
    dense = flat.view(-1, D, D)
    return {
        st.RotationLayout.BAND: st.RotationStorage(st.RotationLayout.BAND, lmax_s, band),
        st.RotationLayout.DENSE: st.RotationStorage(st.RotationLayout.DENSE, lmax_s, dense),
    }


def leaf_storage(s: st.RotationStorage) -> st.RotationStorage:
    """A copy whose data is a fresh autograd leaf."""
    data = s.require(s.layout, "test").detach().clone().requires_grad_(True)
    return st.RotationStorage(s.layout, s.lmax, data)


def tol(dtype) -> dict:
    if dtype == torch.float64:
        return {"rtol": 1e-10, "atol": 1e-11}
    return {"rtol": 2e-5, "atol": 2e-5}


def close(a, b, dtype, scale: float = 1.0) -> None:
    t = tol(dtype)
    torch.testing.assert_close(a, b, rtol=t["rtol"], atol=t["atol"] * scale)


def grads(out, inputs, cot):
    """Gradients of <out, cot> w.r.t. inputs (None for unused ones)."""
    return torch.autograd.grad(out, inputs, cot, allow_unused=True)


def run_both(fn, device: torch.device):
    """(reference result, Triton result) of ``fn()``: the Triton one under force_triton."""
    with cm.force_backend("reference"):
        ref = fn()
    with cm.force_triton():
        tri = fn()
    return ref, tri


def band_view(grad: torch.Tensor, layout, lmax_s: int) -> torch.Tensor:
    """A storage cotangent as a band (the dense one gathered at the band entries)."""
    if layout is st.RotationLayout.BAND:
        return grad
    return st.dense_to_band(grad, lmax_s)


def off_band_dense(grad: torch.Tensor, lmax_s: int) -> torch.Tensor:
    """The entries of a dense cotangent outside the band (must be zero)."""
    keep = st.band_to_dense(torch.ones(1, st.band_width(lmax_s), dtype=grad.dtype), lmax_s)
    return grad * (1 - keep.to(grad.device))


def rel_max(a, b) -> float:
    """max |a − b| / max |b| (absolute where b is all zero)."""
    a, b = a.detach().double(), b.detach().double()
    if not b.numel():
        return 0.0
    num, den = float((a - b).abs().max()), float(b.abs().max())
    return num / den if den > 0 else num


def with_linear(precision: str, **launch) -> dict:
    """so2_stack changes for :func:`tuning.override`: the linear kernel's launch of split mode
    ``precision`` set to ``LinearLaunch(**launch)`` (the other modes and shapes kept)."""
    linear = dict(tuning.current().so2_stack.linear)
    linear[precision] = tuning.LinearLaunch(**launch)
    return {"linear": linear}


#: the "dot" kernels' test segments: 11 edges (several steps of DOT_EDGES = 4 or 8, the last
#: partial), 1 and 8 (whole steps); nodes 0, 3 and 5 (first, middle, last) have none
DOT_COUNTS = [0, 11, 1, 0, 8, 0]
DOT_EMPTY = [0, 3, 5]
#: relative tolerance of the "dot" kernels against the torch references
DOT_REL = {torch.float64: 1e-12, torch.float32: 1e-5}


def intercept_launches(monkeypatch, hook):
    """Every Triton launch through ``mdband.kernels._common.wrap`` calls ``hook(kernel, grid,
    kwargs)`` first (it may raise)."""
    real = cm.wrap

    def wrap(kernel):
        launcher = real(kernel)

        class Grid:
            def __getitem__(self, grid):
                def run(*args, **kw):
                    hook(kernel, grid, kw)
                    return launcher[grid](*args, **kw)

                return run

        return Grid()

    monkeypatch.setattr(cm, "wrap", wrap)
