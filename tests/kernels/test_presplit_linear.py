"""The pre-split fp16x3 linear kernel (so2_stack's gated backward in fp16x3) against float64."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import intercept_launches

from mdband.kernels import _common as cm
from mdband.kernels import tuning
from mdband.kernels.so2_stack import launch as so2_launch
from mdband.kernels.so2_stack import presplit as ps
from mdband.kernels.so2_stack import reference as ss
from mdband.kernels.so2_stack import weights as sw
from mdband.kernels.so2_stack.presplit import so2_presplit_linear_kernel

F64, F32 = torch.float64, torch.float32
#: several programs, a ragged tail
SMALL = (tuning.LinearLaunch(edges=16, warps=4, stages=2, rows=2),)
#: the gate kernels' launch of these tests
GATE = tuning.GateLaunch(edges=16, fwd_warps=4, bwd_warps=4)


def _case(L, C, F, E, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(F, E, 3 * L + 1, C, generator=g, dtype=F64)
    gy = torch.randn(F, E, 3 * L + 1, C, generator=g, dtype=F64) * scale
    w0 = torch.randn((L + 1) * C, F * (L + 1) * C, generator=g, dtype=F64) / ((L + 1) * C) ** 0.5
    wm = torch.randn(L * C, F * 2 * L * C, generator=g, dtype=F64) / (L * C) ** 0.5
    wg = torch.randn(C, F * L * C, generator=g, dtype=F64) / C**0.5
    return gy, h, w0, wm, wg


def _on(kdev, *ts):
    return [t.to(F32).to(kdev) for t in ts]


@pytest.mark.parametrize("L,C,F,E", [(1, 16, 1, 21), (2, 16, 2, 40), (3, 16, 1, 37)])
def test_gate_backward_writes_the_same_gh_split(kdev, L, C, F, E):
    """The gate kernel's split output holds its fp32 output to 22 bits per (edge, row): every
    element within 2⁻²² of its row's largest."""
    gy, h, w0, wm, wg = _on(kdev, *_case(L, C, F, E, seed=L))
    full = torch.empty_like(gy)
    parts = ps.SplitRows.empty_like(gy)
    with cm.force_triton(), tuning.override(so2_stack={"gate": GATE}):
        so2_launch.gate_bwd(gy, h, wg, full, L)
        so2_launch.gate_bwd(gy, h, wg, parts, L)
    want = full.cpu().double()
    row_max = want.abs().amax(-1, keepdim=True)
    assert bool(((parts.value().cpu() - want).abs() <= 2**-22 * row_max).all())


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("rows", [1, 2])
@pytest.mark.parametrize("L,C,F,E", [(1, 16, 1, 21), (2, 32, 2, 40), (3, 16, 1, 37)])
@pytest.mark.parametrize("scale", [1e-7, 1.0, 1e6])
def test_presplit_linear_matches_float64(kdev, L, C, F, E, rows, transpose, scale, monkeypatch):
    """x·W + res (and x·Wᵀ + res) from the split parts within fp32 level of float64 (2e-6 of the
    largest product term) for inputs from 1e-7 to 1e6, one or two rows per program; rows far
    apart in size inside one edge keep their own accuracy (scales per edge and row)."""
    launches = (tuning.LinearLaunch(edges=16, warps=4, stages=2, rows=rows),)
    gy, _, w0, wm, _ = _case(L, C, F, E, seed=L + rows, scale=scale)
    gy[:, 4, 1:] *= 1e-6
    parts = _split_on_host(gy)
    res = torch.randn(gy.shape, dtype=F64, generator=torch.Generator().manual_seed(9)) * scale
    ref = ss.linear_t_reference if transpose else ss.linear_reference
    want = ref(parts.value(), w0, wm, L) + res
    dev = [SplitRowsOn(parts, kdev), res.float().to(kdev), *_on(kdev, w0, wm)]
    with cm.force_triton(), tuning.override(so2_stack={"presplit": launches}):
        got = so2_launch.presplit_linear(*dev, L, transpose).cpu().double()
    terms = _abs_terms(parts.value(), w0, wm, L, transpose)
    bound = 2e-6 * terms + 2**-23 * (want.abs() + res.abs())
    assert bool(((got - want).abs() <= bound.amax(-1, keepdim=True)).all())


def _abs_terms(x, w0, wm, L, transpose):
    """Σ_k |x_k|·|W_kj| per output element (F, E, Dm, C): the size of its product's terms."""
    F, E, dm, C = x.shape
    tiles = sw.weight_tiles(w0, wm, F, L, C, transpose).abs().view(F, dm, 2 * L, C, C)
    out = torch.empty_like(x)
    for j in range(dm):
        k0, nk = (0, L + 1) if j <= L else (L + 1, 2 * L)
        xs = x[:, :, k0 : k0 + nk].abs()  # (F, E, nk, C_in)
        out[:, :, j] = torch.einsum("feki,fkoi->feo", xs, tiles[:, j, :nk])
    return out


def _split_on_host(x):
    """Exact host split of a float64 tensor into :class:`ps.SplitRows` (fp16 parts)."""
    top = x.abs().amax(-1)
    exp = torch.where(top > 0, torch.floor(torch.log2(top)), torch.zeros_like(top))
    s = torch.exp2(13 - exp)
    xs = x * s[..., None]
    hi = xs.to(torch.float16)
    lo = ((xs - hi.double()) * sw.FP16_LO_SCALE).to(torch.float16)
    return ps.SplitRows(hi, lo, (1 / s).float())


def SplitRowsOn(parts, dev):  # noqa: N802 - a constructor-like helper
    return ps.SplitRows(*(t.to(dev) for t in parts))


def test_rows_per_program_divides_both_m_groups():
    assert [ps.rows_per_program(L, 2) for L in (1, 2, 3, 4, 5)] == [2, 1, 2, 1, 2]
    assert ps.rows_per_program(3, 1) == 1


def test_row_block_tiles_stack_each_blocks_rows():
    L, C, F = 3, 4, 2
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn((L + 1) * C, F * (L + 1) * C, generator=g)
    wm = torch.randn(L * C, F * 2 * L * C, generator=g)
    tiles = sw.weight_tiles(w0, wm, F, L, C, False)
    two = sw.row_block_tiles(tiles, F, L, C, 2).view(F, (3 * L + 1) // 2, 2 * L, 2, C, C)
    one = tiles.view(F, 3 * L + 1, 2 * L, C, C)
    for j in range(3 * L + 1):
        assert torch.equal(two[:, j // 2, :, j % 2], one[:, j])


def test_gated_fp16x3_backward_runs_the_presplit_kernel(kdev, monkeypatch):
    """so2_mix_layer's gated backward in fp16x3 writes gh split and runs the pre-split kernel
    (no fp32 gh, no in-register split); tf32x3 keeps the linear kernel."""
    seen = []
    intercept_launches(monkeypatch, lambda k, grid, kw: seen.append(k.__name__))
    L, C = 3, 16
    gy, h, w0, wm, wg = _case(L, C, 1, 33, seed=2)
    want = ss.so2_mix_layer_bwd_reference(gy, h, w0, wm, wg, L, True)
    for mode, kernel in (("fp16x3", "so2_presplit_linear_kernel"), ("tf32x3", "so2_linear_kernel")):
        seen.clear()
        with cm.force_triton(), tuning.override(so2_stack={"presplit": SMALL}):
            got = torch.ops.mdband.so2_mix_layer_bwd(*_on(kdev, gy, h, w0, wm, wg), L, True, mode)
        assert seen == ["so2_gate_bwd_kernel", kernel], mode
        scale = float(want.abs().max())
        torch.testing.assert_close(got.cpu().double(), want, rtol=0, atol=2e-6 * scale)


def test_smaller_launch_when_shared_memory_runs_out(kdev, monkeypatch):
    from triton.runtime.errors import OutOfResources

    tried = []

    def refuse(kernel, grid, kw):
        if kernel is so2_presplit_linear_kernel:
            tried.append((kw["BLOCK_EDGES"], kw["ROWS"]))
            if kw["ROWS"] == 2:
                raise OutOfResources(240_000, 232_448, "shared memory")

    intercept_launches(monkeypatch, refuse)
    so2_launch.forget_fitted_launches()
    small = tuning.LinearLaunch(edges=16, warps=4, stages=1, rows=1)
    gy, _, w0, wm, _ = _case(3, 16, 1, 20, seed=5)
    parts = _split_on_host(gy)
    args = (SplitRowsOn(parts, kdev), *_on(kdev, gy, w0, wm), 3, False)
    want = ss.linear_reference(parts.value(), w0, wm, 3) + gy
    for refused in ([(SMALL[0].edges, 2)], []):  # the second call starts at the one that fit
        tried.clear()
        with cm.force_triton(), tuning.override(so2_stack={"presplit": (SMALL[0], small)}):
            got = so2_launch.presplit_linear(*args)
        torch.testing.assert_close(
            got.cpu().double(), want, rtol=0, atol=2e-6 * float(want.abs().max())
        )
        assert tried == [*refused, (16, 1)], tried
    with cm.force_triton(), tuning.override(so2_stack={"presplit": SMALL}):
        with pytest.raises(RuntimeError, match="no launch configuration"):
            so2_launch.presplit_linear(*args)


def test_zero_edges(kdev):
    parts = ps.SplitRows.empty_like(torch.zeros(1, 0, 7, 16, device=kdev))
    w0, wm = torch.zeros(48, 48, device=kdev), torch.zeros(32, 64, device=kdev)
    res = torch.zeros(1, 0, 7, 16, device=kdev)
    with cm.force_triton():
        assert so2_launch.presplit_linear(parts, res, w0, wm, 2, False).shape == (1, 0, 7, 16)
