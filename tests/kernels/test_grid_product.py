"""grid_product: the one-kernel grid product against its torch reference (forward, backward)."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import intercept_launches

from mdband.kernels import _common as cm
from mdband.kernels import grid_product as gp
from mdband.kernels import tuning
from mdband.model.grids import grid_product, s2_projector, so3_projector

TOL = {torch.float64: 1e-12, torch.float32: 2e-5}
# (projector, channels per frame, output rows): SO(3) grids of DPA4-Mini's shape (L = 2, kmax =
# 1) and smaller, an S2 grid (the default config's FFN), a readout keeping one (l, m) row
CASES = [
    (lambda: so3_projector(2, 1), 5, None),
    (lambda: so3_projector(2, 1), 40, 1),
    (lambda: so3_projector(1, 1), 3, None),
    (lambda: so3_projector(2, 0), 16, None),
    (lambda: s2_projector(3), 7, None),
]


def _inputs(proj, C, dtype, device, seed=0, strided=False):
    g = torch.Generator().manual_seed(seed)
    K, D = proj.n_frames, (proj.lmax + 1) ** 2
    width = 2 * K * C if strided else K * C  # strided: the left half of a wider tensor
    left = torch.randn(4, D, width, generator=g, dtype=torch.float64)[:, :, : K * C]
    right = torch.randn(4, D, K * C, generator=g, dtype=torch.float64)
    return left.to(dtype).to(device), right.to(dtype).to(device)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_forward_and_backward_match_the_reference(kdev, dtype, case):
    make, C, n_rows = CASES[case]
    proj = make()
    left, right = _inputs(proj, C, dtype, kdev, seed=case, strided=case % 2 == 0)
    left.requires_grad_()
    right.requires_grad_()
    want = grid_product(proj, left, right, n_rows)
    with cm.force_triton():
        got = grid_product(proj, left, right, n_rows, fused=True)
    tol = TOL[dtype] * want.abs().max().item()
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=tol)
    gout = torch.randn_like(want)
    w1 = torch.autograd.grad((want * gout).sum(), (left, right))
    with cm.force_triton():
        g1 = torch.autograd.grad((grid_product(proj, left, right, n_rows, True) * gout).sum(),
                                 (left, right))  # fmt: skip
    for a, b in zip(g1, w1):
        torch.testing.assert_close(a, b, rtol=0, atol=TOL[dtype] * b.abs().max().item())


def test_closed_form_backward_reference_is_autograd():
    proj = so3_projector(2, 1)
    t, b = (m for m in proj.mats(torch.float64, torch.device("cpu")))
    left, right = (x.requires_grad_() for x in _inputs(proj, 3, torch.float64, "cpu"))
    out = gp.grid_product_reference(t, b, left, right, 3)
    gout = torch.randn_like(out)
    want = torch.autograd.grad((out * gout).sum(), (left, right))
    got = gp.grid_product_bwd_reference(gout, t, b, left, right, 3)
    for a, w in zip(got, want):
        torch.testing.assert_close(a, w, rtol=1e-13, atol=1e-13)


def test_leading_axes_and_no_nodes(kdev):
    proj = so3_projector(1, 1)
    left, right = _inputs(proj, 4, torch.float64, kdev)
    l4, r4 = left.reshape(2, 2, *left.shape[1:]), right.reshape(2, 2, *right.shape[1:])
    with cm.force_triton():
        got = grid_product(proj, l4, r4, fused=True)
        empty = grid_product(proj, left[:0], right[:0], fused=True)
    torch.testing.assert_close(got.reshape(left.shape), grid_product(proj, left, right))
    assert empty.shape == (0, *left.shape[1:])


def test_mismatched_shapes_are_value_errors():
    proj = so3_projector(1, 1)
    t, b = proj.mats(torch.float64, torch.device("cpu"))
    left, right = _inputs(proj, 4, torch.float64, "cpu")
    with pytest.raises(ValueError, match="do not match"):
        gp.grid_product(t, b, left, right[:, :, :-3], 3)
    with pytest.raises(ValueError, match="do not match"):
        gp.grid_product(t, b, left, right, 2)


@pytest.mark.parametrize(
    "options,on_cpu",
    [
        (dict(kernels="ops"), (True, False)),
        (dict(kernels="ops", stack_precision="ieee"), (True, True)),
        (dict(kernels="auto"), (False, False)),  # auto: the fused ops on CUDA tensors only
    ],
)
def test_fused_choice_follows_the_settings(options, on_cpu):
    from mdband.model.grids import fused_grid_choice
    from mdband.settings import EngineSettings

    like = torch.zeros(1)
    assert fused_grid_choice(EngineSettings(**options), like) == on_cpu
    assert fused_grid_choice(None, like) == (False, False)
    assert gp._precision(like, exact=False) == 0  # no tf32 dots off the GPU


@pytest.mark.parametrize("channels", sorted(tuning.DEFAULTS.grid_product.shapes))
def test_shape_launches_run_and_match_the_reference(kdev, channels, monkeypatch):
    """A per-channel-count launch (the tuning table's grid_product shapes) is the one each pass
    runs at that C (its own channel block and warps), and its results are the reference's."""
    seen = []
    intercept_launches(
        monkeypatch,
        lambda k, grid, kw: seen.append((k.__name__, kw["BLOCK_CHANNELS"], kw["num_warps"])),
    )
    proj = so3_projector(2, 1)
    left, right = _inputs(proj, channels, torch.float32, kdev, seed=channels)
    left.requires_grad_()
    right.requires_grad_()
    want = grid_product(proj, left, right, None)
    gout = torch.randn_like(want)
    wl, wr = torch.autograd.grad((want * gout).sum(), (left, right))
    with cm.force_triton():
        got = grid_product(proj, left, right, None, fused=True)
        gl, gr = torch.autograd.grad((got * gout).sum(), (left, right))
    fwd, bwd = tuning.DEFAULTS.grid_product.shapes[channels]
    assert seen == [
        ("grid_product_fwd_kernel", fwd.channels, fwd.warps),
        ("grid_product_bwd_kernel", bwd.channels, bwd.warps),
    ]
    for a, b in ((got, want), (gl, wl), (gr, wr)):
        torch.testing.assert_close(a, b, rtol=0, atol=2e-5 * b.abs().max().item())


def test_traced_launch_gets_contiguous_operands(kdev, monkeypatch):
    """Under torch.compile the op's launch is traced with its operands' strides as constants,
    while inductor may store the base of a [left | right] view in another layout: when
    compiling, grid_product hands the op contiguous copies (eagerly, the strided view as is);
    the values are the reference's either way."""
    proj = so3_projector(2, 1)
    left, right = _inputs(proj, 5, torch.float64, kdev, strided=True)
    assert not left.is_contiguous()
    seen = []
    real = gp._grid_op

    def spy(t, b, lft, rgt, k, exact):
        seen.append((lft.is_contiguous(), rgt.is_contiguous()))
        return real(t, b, lft, rgt, k, exact)

    monkeypatch.setattr(gp, "_grid_op", spy)
    want = grid_product(proj, left, right)
    with cm.force_triton():
        eager = grid_product(proj, left, right, fused=True)
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
        traced = grid_product(proj, left, right, fused=True)
    assert seen == [(False, True), (True, True)]
    for got in (eager, traced):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12 * want.abs().max().item())


@pytest.mark.parametrize("fits", [16, 0])
def test_launch_too_big_for_shared_memory_halves_its_channels(kdev, monkeypatch, fits):
    """A launch the GPU refuses for shared memory (Triton's OutOfResources, as lmax 4 grids of
    64-channel models raise at 32 channels per program) runs at half the channels per program
    down to 16, then as torch GEMMs; the numbers stay the reference's and the launch that fit
    is kept for the next call."""
    from triton.runtime.errors import OutOfResources

    proj = so3_projector(2, 1)
    left, right = _inputs(proj, 40, torch.float64, kdev, seed=3)
    left.requires_grad_()
    right.requires_grad_()
    tried = []

    def refuse(kernel, grid, meta):
        tried.append(meta["BLOCK_CHANNELS"])
        if meta["BLOCK_CHANNELS"] > fits:
            raise OutOfResources(262144, 232448, "shared memory")

    intercept_launches(monkeypatch, refuse)
    monkeypatch.setattr(gp, "_FITTED", {})
    want = grid_product(proj, left, right)
    gout = torch.randn_like(want)
    w1 = torch.autograd.grad((want * gout).sum(), (left, right))
    assert tuning.current().grid_product.launch("fwd", 40).channels == 32  # the table's
    with cm.force_triton():
        got = grid_product(proj, left, right, None, fused=True)
        g1 = torch.autograd.grad((got * gout).sum(), (left, right))
        first = list(tried)
        tried.clear()
        grid_product(proj, left, right, None, fused=True)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12 * want.abs().max().item())
    for a, b in zip(g1, w1):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12 * b.abs().max().item())
    assert first == [32, 16, 32, 16]  # forward, then backward
    assert tried == ([16] if fits else [])
