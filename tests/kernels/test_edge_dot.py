"""edge_dot: per-edge q·k of node rows, Triton forward and closed-form backward vs torch."""

from __future__ import annotations

import pytest
import torch

from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.kernels.edge_dot import edge_dot, edge_dot_reference
from mdband.model.conv import _EdgeDot

BLOCK_EDGES = tuning.DEFAULTS.edge_dot.fwd_edges  # edges per forward program

TOL = {torch.float64: 1e-12, torch.float32: 2e-6}


def _inputs(N, M, H, d, E, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(N, H, d, generator=g, dtype=torch.float64)
    k = torch.randn(M, H, d, generator=g, dtype=torch.float64)
    dst = torch.randint(0, N - 1, (E,), generator=g)  # the last row of q and of k isolated
    src = torch.randint(0, M - 1, (E,), generator=g)
    gout = torch.randn(E, H, generator=g, dtype=torch.float64)
    cast = [t.to(dtype).to(device) for t in (q, k, gout)]
    return cast[0], cast[1], dst.to(device), src.to(device), cast[2]


def _csrs(dst, src, N, M):
    return cm.csr(dst, N), cm.csr(src, M)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    "N,M,H,d,E",
    [(5, 5, 1, 32, 0), (5, 7, 1, 32, 1), (9, 9, 1, 32, 3 * BLOCK_EDGES + 5), (6, 11, 2, 8, 70),
     (4, 4, 3, 20, 150)],
)  # fmt: skip
def test_triton_matches_reference(kdev, dtype, N, M, H, d, E):
    q, k, dst, src, gout = _inputs(N, M, H, d, E, dtype, kdev)
    dcsr, scsr = _csrs(dst, src, N, M)
    qa, ka = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    with cm.force_triton():
        out = edge_dot(qa, ka, dst, src, dcsr, scsr)
        gq, gk = torch.autograd.grad(out, (qa, ka), gout, allow_unused=True)
    qr, kr = q.double().cpu().requires_grad_(True), k.double().cpu().requires_grad_(True)
    want = edge_dot_reference(qr, kr, dst.cpu(), src.cpu())
    gq_w, gk_w = torch.autograd.grad(want, (qr, kr), gout.double().cpu(), allow_unused=True)
    tol = TOL[dtype]
    assert out.shape == (E, H) and out.dtype == dtype
    torch.testing.assert_close(out.detach().cpu().double(), want.detach(), rtol=tol, atol=tol * d)
    if E == 0:
        assert gq is None or torch.count_nonzero(gq) == 0
        return
    torch.testing.assert_close(gq.cpu().double(), gq_w, rtol=tol, atol=tol * E)
    torch.testing.assert_close(gk.cpu().double(), gk_w, rtol=tol, atol=tol * E)
    assert torch.count_nonzero(gq[N - 1]) == 0 and torch.count_nonzero(gk[M - 1]) == 0


def test_repeatable_bit_for_bit(kdev):
    """The backward sums each node's edges in CSR order: two calls agree exactly."""
    q, k, dst, src, gout = _inputs(8, 8, 1, 32, 300, torch.float32, kdev, seed=3)
    dcsr, scsr = _csrs(dst, src, 8, 8)
    grads = []
    for _ in range(2):
        qa, ka = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
        with cm.force_triton():
            out = edge_dot(qa, ka, dst, src, dcsr, scsr)
            grads.append((out, *torch.autograd.grad(out, (qa, ka), gout)))
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_reference_op_matches_the_torch_function():
    """On CPU the registered op runs its reference, equal to conv's differentiable function."""
    q, k, dst, src, gout = _inputs(6, 6, 2, 4, 40, torch.float64, "cpu", seed=1)
    dcsr, scsr = _csrs(dst, src, 6, 6)
    qa, ka = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    out = edge_dot(qa, ka, dst, src, dcsr, scsr)
    g_op = torch.autograd.grad(out, (qa, ka), gout)
    qb, kb = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    want = _EdgeDot.apply(qb, kb, dst, src, dcsr, scsr)
    g_fn = torch.autograd.grad(want, (qb, kb), gout)
    torch.testing.assert_close(out, want, rtol=1e-14, atol=1e-14)
    for a, b in zip(g_op, g_fn):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(
    "q_shape,k_shape,n_src",
    [((4, 1, 8), (4, 2, 8), 5), ((4, 8), (4, 8), 5), ((4, 1, 8), (4, 1, 8), 4)],
)
def test_bad_shapes_raise(q_shape, k_shape, n_src):
    q, k = torch.zeros(q_shape), torch.zeros(k_shape)
    dst, src = torch.zeros(5, dtype=torch.long), torch.zeros(n_src, dtype=torch.long)
    with pytest.raises(ValueError, match="edge_dot"):
        edge_dot(q, k, dst, src, cm.csr(dst, 4), cm.csr(src, 4))
