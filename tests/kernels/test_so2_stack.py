"""so2_mix_layer: Triton vs float64 reference, closed-form backward, model layer equivalence."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import intercept_launches, with_linear

from mdband.kernels import _common as cm
from mdband.kernels import so2_stack as ss
from mdband.kernels import tuning
from mdband.kernels.so2_stack import launch as so2_launch
from mdband.kernels.so2_stack import op as so2_op
from mdband.kernels.so2_stack import (
    so2_mix_layer,
    so2_mix_layer_bwd_reference,
    so2_mix_layer_reference,
)
from mdband.kernels.so2_stack.linear import so2_linear_kernel
from mdband.model.so2 import GatedActivation, SO2Linear

F64, F32 = torch.float64, torch.float32
#: error bound relative to the largest output (fp32 rounding for the split modes; fp16's 2⁻¹¹
#: per product for the single-product mode)
TOLERANCE = {"ieee": 2e-6, "tf32x3": 2e-6, "fp16x3": 2e-6, "fp16": 2e-3}


def _inputs(L, C, F, E, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(F, E, 3 * L + 1, C, generator=g, dtype=F64)
    w0 = torch.randn((L + 1) * C, F * (L + 1) * C, generator=g, dtype=F64) / ((L + 1) * C) ** 0.5
    wm = torch.randn(L * C, F * 2 * L * C, generator=g, dtype=F64) / (L * C) ** 0.5
    wg = torch.randn(C, F * L * C, generator=g, dtype=F64) / C**0.5
    gy = torch.randn(F, E, 3 * L + 1, C, generator=g, dtype=F64)
    return x, w0, wm, wg, gy


def _modules(L, C, F, w0, wm, wg):
    lin = SO2Linear(L, C, C, F).to(F64)
    act = GatedActivation(L, C, F).to(F64)
    with torch.no_grad():
        lin.weight_m0.copy_(w0)
        lin.weight_m[0].copy_(wm)
        act.gate_linear.weight.copy_(wg)
    return lin, act


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("L,F", [(1, 1), (2, 2), (3, 1), (4, 1)])
def test_reference_equals_model_layer(L, F, gated):
    """The op's reference is the model's layer x + act(SO2Linear(x)), forward and backward."""
    C = 3
    x, w0, wm, wg, gy = _inputs(L, C, F, 7)
    lin, act = _modules(L, C, F, w0, wm, wg)
    xa = x.clone().requires_grad_(True)
    want = xa + (act(lin(xa)) if gated else lin(xa))
    (gwant,) = torch.autograd.grad(want, xa, gy)
    y, h = so2_mix_layer_reference(x, w0, wm, wg, L, gated)
    torch.testing.assert_close(y, want, rtol=1e-13, atol=1e-13)
    if gated:
        torch.testing.assert_close(h, lin(x), rtol=1e-13, atol=1e-13)
    gx = so2_mix_layer_bwd_reference(gy, h, w0, wm, wg, L, gated)
    torch.testing.assert_close(gx, gwant, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("precision", ss.PRECISIONS)
@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("L,C,F,E", [(1, 16, 1, 5), (2, 16, 2, 40), (3, 32, 1, 33), (4, 16, 1, 17)])
def test_triton_matches_float64_reference(kdev, L, C, F, E, gated, precision):
    # several programs, a ragged tail
    mode = precision if precision != "ieee" else "tf32x3"
    with tuning.override(so2_stack=with_linear(mode, edges=16, warps=4, stages=2)):
        _triton_matches_float64_reference(kdev, L, C, F, E, gated, precision)


def _triton_matches_float64_reference(kdev, L, C, F, E, gated, precision):
    x, w0, wm, wg, gy = _inputs(L, C, F, E)
    xa = x.clone().requires_grad_(True)
    want, _ = so2_mix_layer_reference(xa, w0, wm, wg, L, gated)
    (gwant,) = torch.autograd.grad(want, xa, gy)
    x32 = x.to(F32, copy=True).to(kdev).requires_grad_(True)
    w = [t.to(F32).to(kdev) for t in (w0, wm, wg)]
    with cm.force_triton():
        y = so2_mix_layer(x32, w[0], w[1], w[2] if gated else None, L, precision)
        (gx,) = torch.autograd.grad(y, x32, gy.to(F32).to(kdev))
    tol = TOLERANCE[precision]
    scale = float(want.detach().abs().max())
    torch.testing.assert_close(y.cpu().double(), want.detach(), rtol=0, atol=tol * scale)
    gscale = float(gwant.abs().max())
    torch.testing.assert_close(gx.cpu().double(), gwant, rtol=0, atol=tol * gscale)


@pytest.mark.parametrize("precision", tuning.SPLIT_MODES)
@pytest.mark.parametrize("L,C,E", [(1, 16, 21), (2, 16, 40), (3, 16, 33), (4, 16, 17)])
def test_two_rows_per_program_equal_one_row(kdev, L, C, E, precision, monkeypatch):
    """rows = 2 (two output rows of one m-group per program, x split once for both; an odd
    m = 0 group's last row computed twice) gives the rows = 1 kernel's values bit for bit,
    forward (x·W) and transposed (the backward's x·Wᵀ), and both match float64."""
    x, w0, wm, _, _ = _inputs(L, C, 1, E, seed=L)
    x32, w0_32, wm_32 = (t.to(F32).to(kdev) for t in (x, w0, wm))
    res = torch.randn_like(x32)
    out = {}
    for rows in (1, 2):
        launch = with_linear(precision, edges=16, warps=4, stages=2, rows=rows)
        with cm.force_triton(), tuning.override(so2_stack=launch):
            out[rows] = [
                so2_op._linear(x32, res, w0_32, wm_32, L, t, precision) for t in (False, True)
            ]
    for a, b in zip(out[1], out[2]):
        assert torch.equal(a, b)
    for y, t in zip(out[2], (False, True)):
        want = ss.so2_linear(x, w0, wm, L, transpose=t, gauss=False) + res.cpu().double()
        scale = float(want.abs().max())
        tol = TOLERANCE[precision] * scale
        torch.testing.assert_close(y.cpu().double(), want, rtol=0, atol=tol)


def test_linear_slots_count_the_programs_per_edge_block():
    """One row per program: 3L + 1; pairs: ceil((L + 1) / 2) m = 0 pairs + L |m| = 1 pairs;
    any other row count is refused."""
    assert [so2_launch.linear_slots(L, 1) for L in (1, 2, 3)] == [4, 7, 10]
    assert [so2_launch.linear_slots(L, 2) for L in (1, 2, 3, 4)] == [2, 4, 5, 7]
    with pytest.raises(ValueError, match="1 or 2 rows"):
        so2_launch.linear_slots(3, 4)


def test_zero_edges(kdev):
    x, w0, wm, wg, _ = _inputs(2, 16, 1, 0)
    x = x.to(F32).to(kdev).requires_grad_(True)
    w = [t.to(F32).to(kdev) for t in (w0, wm, wg)]
    with cm.force_triton():
        y = so2_mix_layer(x, *w, 2, "ieee")
        (g,) = torch.autograd.grad(y.sum(), x)
    assert y.shape == x.shape and g.shape == x.shape


def test_backend_choice_and_bad_input():
    assert ss.backend("cpu", F32, lmax=3, channels=64)[0] == "reference"
    assert ss.backend("cpu", F32, lmax=0, channels=64)[0] is None
    assert not ss.kernel_supports(F64, 64) and not ss.kernel_supports(F32, 48)
    x, w0, wm, wg, _ = _inputs(2, 16, 1, 3)
    with pytest.raises(ValueError, match="precision"):
        so2_mix_layer(x, w0, wm, wg, 2, "tf32")
    with pytest.raises(ValueError, match="wm must be"):
        so2_mix_layer(x, w0, wm[:, :-1], wg, 2)
    with pytest.raises(ValueError, match=r"x must be \(F, E, 3L\+1, C\)"):
        so2_mix_layer(x[:, :, :-1], w0, wm, wg, 2)


def test_reference_op_on_cpu_is_differentiable():
    """On CPU the registered op runs its reference and the closed-form backward."""
    x, w0, wm, wg, gy = _inputs(2, 4, 2, 9)
    xa = x.clone().requires_grad_(True)
    y = so2_mix_layer(xa, w0, wm, wg, 2)
    (g,) = torch.autograd.grad(y, xa, gy)
    xb = x.clone().requires_grad_(True)
    want, _ = so2_mix_layer_reference(xb, w0, wm, wg, 2, True)
    (gwant,) = torch.autograd.grad(want, xb, gy)
    torch.testing.assert_close(y, want, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(g, gwant, rtol=1e-12, atol=1e-12)


def test_smaller_launch_when_shared_memory_runs_out(kdev, monkeypatch):
    """A GPU with less shared memory than the tuned launch needs gets the next one that fits,
    and keeps it: a second call launches only that one."""
    from triton.runtime.errors import OutOfResources

    tried = []

    def refuse(kernel, grid, kw):
        if kernel is so2_linear_kernel:
            tried.append((kw["BLOCK_EDGES"], kw["num_stages"]))
            if kw["BLOCK_EDGES"] == 32:
                raise OutOfResources(200_000, 100_000, "shared memory")

    intercept_launches(monkeypatch, refuse)
    so2_launch.forget_fitted_launches()
    small = tuning.LinearLaunch(edges=16, warps=4, stages=1)
    change = with_linear("tf32x3", edges=32, warps=4, stages=2)
    change["fallbacks"] = (tuning.LinearLaunch(edges=32, warps=4, stages=1), small)
    x, w0, wm, wg, _ = _inputs(2, 16, 1, 40)
    want, _ = so2_mix_layer_reference(x, w0, wm, wg, 2, True)
    w = [t.to(F32).to(kdev) for t in (w0, wm, wg)]
    for call in range(2):
        tried.clear()
        with cm.force_triton(), tuning.override(so2_stack=change):
            y = so2_mix_layer(x.to(F32).to(kdev), *w, 2, "tf32x3")
        scale = float(want.abs().max())
        torch.testing.assert_close(y.cpu().double(), want, rtol=0, atol=2e-6 * scale)
        refused = [(32, 2), (32, 1)] if call == 0 else []  # the tuned launch, then fallbacks
        assert tried[: len(refused)] == refused, tried
        assert tried[len(refused) :] and set(tried[len(refused) :]) == {(16, 1)}, tried


def test_shape_launches_set_the_launch(kdev, monkeypatch):
    """A per-(L, C) entry of the tuning table's so2_stack shapes is the launch of both kernels,
    and the result is the reference's whatever the launch."""
    seen = []
    intercept_launches(
        monkeypatch,
        lambda k, grid, kw: seen.append((k.__name__, kw["BLOCK_EDGES"], kw.get("num_warps"))),
    )
    linear = tuning.LinearLaunch(edges=16, warps=2, stages=1)
    gate = tuning.GateLaunch(edges=16, fwd_warps=2, bwd_warps=1)
    shapes = {(2, 16): tuning.StackShape(linear={"tf32x3": linear}, gate=gate)}
    with tuning.override(so2_stack={"shapes": shapes}):
        table = tuning.current().so2_stack
        assert table.linear_launch("tf32x3", 2, 16) == linear
        assert table.gate_launch(2, 16) == gate
        assert table.gate_launch(3, 16) == table.gate  # other shapes keep the default
        _shape_launch_run(kdev)
    assert seen.count(("so2_linear_kernel", 16, 2)) == 3 and ("so2_gate_bwd_kernel", 16, 1) in seen


def _shape_launch_run(kdev):
    x, w0, wm, wg, gy = _inputs(2, 16, 1, 37)
    xa = x.clone().requires_grad_(True)
    want, _ = so2_mix_layer_reference(xa, w0, wm, wg, 2, True)
    (gwant,) = torch.autograd.grad(want, xa, gy)
    x32 = x.to(F32).to(kdev).requires_grad_(True)
    w = [t.to(F32).to(kdev) for t in (w0, wm, wg)]
    with cm.force_triton():
        y = so2_mix_layer(x32, *w, 2, "tf32x3")
        (gx,) = torch.autograd.grad(y, x32, gy.to(F32).to(kdev))
    # the forward's gate is the linear kernel's epilogue (two launches, the caller counts
    # them); the backward's is the gate kernel
    scale = float(want.detach().abs().max())
    torch.testing.assert_close(y.detach().cpu().double(), want.detach(), rtol=0, atol=2e-6 * scale)
    torch.testing.assert_close(
        gx.cpu().double(), gwant, rtol=0, atol=2e-6 * float(gwant.abs().max())
    )


def test_backward_without_output_cotangent_gives_none():
    """Cotangents are not materialised (no zero-filled (F, E, Dm, C) tensor for h): a backward
    with neither output used returns no gradient instead of running the kernels on zeros."""
    assert so2_op._backward(None, None, None) == (None,) * 8


def test_only_grid_axis_0_grows_with_the_edges(kdev, monkeypatch):
    """CUDA grids hold at most 65,535 blocks on axes 1 and 2: every so2_mix_layer launch
    (forward, backward) puts its edge blocks on axis 0, so 5 M edges (81,000 blocks of 64)
    launch. Two edge counts, the same other axes."""
    grids: dict[int, list] = {}
    intercept_launches(
        monkeypatch,
        lambda k, grid, kw: grids.setdefault(n_edges, []).append((k.__name__, tuple(grid))),
    )
    launch = tuning.LinearLaunch(edges=16, warps=2, stages=1)
    gate = tuning.GateLaunch(edges=16, fwd_warps=2, bwd_warps=1)
    change = {
        "presplit": (launch,),  # the gated backward's kernel
        "shapes": {(2, 16): tuning.StackShape(linear={"fp16x3": launch}, gate=gate)},
    }
    for n_edges in (20, 70):
        x, w0, wm, wg, gy = _inputs(2, 16, 1, n_edges)
        x32 = x.to(F32).to(kdev).requires_grad_(True)
        w = [t.to(F32).to(kdev) for t in (w0, wm, wg)]
        with cm.force_triton(), tuning.override(so2_stack=change):
            y = so2_mix_layer(x32, *w, 2, "fp16x3")
            torch.autograd.grad(y, x32, gy.to(F32).to(kdev))
    small, large = grids[20], grids[70]
    assert [k for k, _ in small] == [k for k, _ in large] and "so2_linear_kernel" in dict(small)
    for (name, g1), (_, g2) in zip(small, large):
        assert g2[0] > g1[0], name
        assert g1[1:] == g2[1:], name


@pytest.mark.parametrize("precision", tuning.SPLIT_MODES)
@pytest.mark.parametrize("L,C,F,E", [(1, 16, 1, 21), (2, 16, 2, 40), (3, 16, 1, 33)])
def test_gated_epilogue_rows_and_save(kdev, L, C, F, E, precision, monkeypatch):
    """The gated layer's fused epilogue (gates from row 0's accumulator in launch A, the other
    rows gated in launch B): one and two rows per program give the same y and h bit for bit,
    ``save=False`` the same y with no h, and y, h match the float64 reference."""
    x, w0, wm, wg, _ = _inputs(L, C, F, E, seed=L + 10)
    x32, w0_32, wm_32, wg_32 = (t.to(F32).to(kdev) for t in (x, w0, wm, wg))
    want_y, want_h = so2_mix_layer_reference(x, w0, wm, wg, L, True)
    out = {}
    for rows in (1, 2):
        launch = with_linear(precision, edges=16, warps=4, stages=2, rows=rows)
        with cm.force_triton(), tuning.override(so2_stack=launch):
            w = (w0_32, wm_32, wg_32, L, precision)
            out[rows] = so2_launch.gated_linear(x32, *w, True)
            out[rows, "nosave"] = so2_launch.gated_linear(x32, *w, False)
    for rows in (1, 2):
        assert torch.equal(out[rows][0], out[1][0]) and torch.equal(out[rows][1], out[1][1])
        assert (
            torch.equal(out[rows, "nosave"][0], out[1][0]) and out[rows, "nosave"][1].numel() == 0
        )
    tol = TOLERANCE[precision]
    for got, want in zip(out[1], (want_y, want_h)):
        scale = float(want.abs().max())
        torch.testing.assert_close(got.cpu().double(), want, rtol=0, atol=tol * scale)


def test_pre_activation_is_kept_only_for_a_backward(kdev, monkeypatch):
    """A gated layer called without a gradient (no_grad, or an input that needs none) writes
    no pre-activation h; with one, it keeps h and the backward matches the reference."""
    saves = []
    intercept_launches(
        monkeypatch,
        lambda k, grid, kw: (
            saves.append(kw["SAVE"]) if k is so2_linear_kernel and kw["GATE"] else 0
        ),
    )
    x, w0, wm, wg, gy = _inputs(2, 16, 1, 30)
    w = [t.to(F32).to(kdev) for t in (w0, wm, wg)]
    x32 = x.to(F32).to(kdev)
    with cm.force_triton():
        with torch.no_grad():
            y_ng = so2_mix_layer(x32.clone().requires_grad_(True), *w, 2, "tf32x3")
        y_const = so2_mix_layer(x32, *w, 2, "tf32x3")
        assert saves == [False] * 4
        xa = x32.clone().requires_grad_(True)
        y = so2_mix_layer(xa, *w, 2, "tf32x3")
        (gx,) = torch.autograd.grad(y, xa, gy.to(F32).to(kdev))
    assert saves[4:] == [True, True]
    assert torch.equal(y_ng, y.detach()) and torch.equal(y_const, y.detach())
    xb = x.clone().requires_grad_(True)
    want, _ = so2_mix_layer_reference(xb, w0, wm, wg, 2, True)
    (gwant,) = torch.autograd.grad(want, xb, gy)
    torch.testing.assert_close(
        gx.cpu().double(), gwant, rtol=0, atol=2e-6 * float(gwant.abs().max())
    )
