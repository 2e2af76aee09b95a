"""take_rows: the Triton row gather against index_select (values, gradient, dtypes, shapes)."""

from __future__ import annotations

import pytest
import torch

from mdband.kernels import _common as cm
from mdband.kernels import take_rows as tr
from mdband.kernels.segments import segment_sum


def _idx(n_rows, n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_rows, (n,), generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int64])
@pytest.mark.parametrize("shape", [(7,), (7, 1), (7, 3), (7, 5, 4), (5, 200), (1, 16)])
@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
def test_copies_the_rows_index_select_picks(kdev, dtype, shape, idx_dtype):
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 100).to(dtype).to(kdev)
    idx = _idx(shape[0], 37, idx_dtype, seed=len(shape)).to(kdev)
    with cm.force_triton():
        got = tr.take_rows(x, idx)
    assert got.shape == (37, *shape[1:]) and got.dtype == dtype
    assert torch.equal(got, x.index_select(0, idx))  # a copy: bit for bit


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_op_gradient_is_the_scatter_of_index_select(kdev, dtype):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 3, 2, generator=g, dtype=dtype).to(kdev).requires_grad_()
    idx = _idx(5, 40, torch.int64, seed=2).to(kdev)  # row 5 never picked: zero gradient
    w = torch.randn(40, 3, 2, generator=g, dtype=dtype).to(kdev)
    with cm.force_triton():
        (gx,) = torch.autograd.grad((tr._take_rows_op(x, idx) * w).sum(), x)
    (want,) = torch.autograd.grad((x.index_select(0, idx) * w).sum(), x)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(gx, want, rtol=tol, atol=tol)
    assert torch.all(gx[5] == 0)


def test_the_op_passes_gradcheck(kdev):
    x = torch.randn(4, 3, dtype=torch.float64, device=kdev, requires_grad=True)
    idx = _idx(4, 9, torch.int64, seed=1).to(kdev)
    with cm.force_triton():
        assert torch.autograd.gradcheck(lambda v: tr._take_rows_op(v, idx), (x,))


def test_inputs_needing_a_gradient_go_to_index_select(kdev, monkeypatch):
    """Training differentiates the gathers twice: those calls keep torch's index_select."""
    calls = []
    monkeypatch.setattr(tr, "_take_rows_op", lambda *a: calls.append(1) or a[0][a[1]])
    x = torch.randn(4, 3, dtype=torch.float64, device=kdev, requires_grad=True)
    idx = _idx(4, 9, torch.int64, seed=1).to(kdev)
    with cm.force_triton():
        out = tr.take_rows(x, idx)
        (g,) = torch.autograd.grad(out.pow(2).sum(), x, create_graph=True)
        assert torch.autograd.gradgradcheck(lambda v: tr.take_rows(v, idx).pow(2), (x,))
        with torch.no_grad():
            tr.take_rows(x, idx)
    assert g.requires_grad and len(calls) == 1  # only the no_grad call took the kernel


def test_empty_and_wide_blocks(kdev):
    x = torch.randn(3, 300, device=kdev)  # W = 300: three row blocks of MAX_BW
    with cm.force_triton():
        assert tr.take_rows(x, torch.zeros(0, dtype=torch.int64, device=kdev)).shape == (0, 300)
        idx = torch.tensor([2, 0, 2], device=kdev)
        assert torch.equal(tr.take_rows(x, idx), x[idx])


def test_segment_sum_through_take_rows_matches_index_add(kdev):
    g = torch.Generator().manual_seed(9)
    index = torch.randint(0, 6, (50,), generator=g).to(kdev)
    values = torch.randn(50, 4, generator=g, dtype=torch.float64).to(kdev)
    with cm.force_triton():
        got = segment_sum(values, index, cm.csr(index, 7))
    want = values.new_zeros(7, 4).index_add(0, index, values)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)


def test_bad_index_is_a_value_error():
    x = torch.randn(3, 2)
    with pytest.raises(ValueError, match="int32/int64"):
        tr.take_rows(x, torch.zeros(2))
    with pytest.raises(ValueError, match="1-d"):
        tr.take_rows(x, torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="row axis"):
        tr.take_rows(torch.tensor(1.0), torch.zeros(2, dtype=torch.int64))


def test_cpu_without_forcing_runs_the_reference():
    x = torch.randn(4, 3)
    idx = torch.tensor([3, 1])
    assert tr.backend(x.device, x.dtype)[0] == "reference"
    assert torch.equal(tr.take_rows(x, idx), x[idx])
