"""SO3Linear and the grid projections as single GEMMs: equal to their per-degree / per-node
definitions (float64), for strided inputs, truncated rows and extra leading axes."""

from __future__ import annotations

import pytest
import torch

from mdband.model.grids import s2_projector, so3_projector
from mdband.model.layers import SO3Linear


def _so3_linear_by_degree(x, w):
    d = x.shape[-2]
    outs = [x[..., l * l : (l + 1) ** 2, :] @ w[l] for l in range(w.shape[0]) if l * l < d]
    return torch.cat(outs, dim=-2)


@pytest.mark.parametrize("lmax,rows", [(2, 9), (2, 4), (3, 16), (3, 1), (1, 4)])
@pytest.mark.parametrize("lead", [(5,), (2, 3), ()])
def test_so3_linear_equals_its_per_degree_products(lmax, rows, lead):
    g = torch.Generator().manual_seed(lmax * 10 + rows)
    lin = SO3Linear(lmax, 6, 4).double()
    lin.weight.data = torch.randn(lin.weight.shape, generator=g, dtype=torch.float64)
    wide = torch.randn(*lead, (lmax + 1) ** 2, 6, generator=g, dtype=torch.float64)
    x = wide[..., :rows, :]  # a row slice: strided in the node axis
    got = lin(x)
    assert got.shape == (*lead, rows, 4) and got.is_contiguous()
    torch.testing.assert_close(got, _so3_linear_by_degree(x, lin.weight), rtol=1e-14, atol=1e-14)


def test_so3_linear_gradient():
    lin = SO3Linear(2, 3, 2).double()
    lin.weight.data.normal_()
    x = torch.randn(4, 9, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lin, (x,))


@pytest.mark.parametrize("proj", [so3_projector(2, 1), s2_projector(2)], ids=["so3", "s2"])
@pytest.mark.parametrize("n_rows", [None, 1])
def test_projections_equal_their_per_node_products(proj, n_rows):
    g = torch.Generator().manual_seed(3)
    k, d = proj.n_frames, (proj.lmax + 1) ** 2
    t, b = proj.mats(torch.float64, torch.device("cpu"))
    coeff = torch.randn(2, 3, d, 2 * k * 5, generator=g, dtype=torch.float64)[..., : k * 5]
    grid = proj.project(coeff)
    want = torch.stack([torch.stack([t @ coeff[i, j].reshape(d * k, 5) for j in range(3)])
                        for i in range(2)])  # fmt: skip
    torch.testing.assert_close(grid, want, rtol=1e-14, atol=1e-14)
    bb = b if n_rows is None else b[: n_rows * k]
    back = proj.analyse(grid, n_rows)
    want_back = torch.einsum("jg,abgc->abjc", bb, want).reshape(2, 3, -1, k * 5)
    torch.testing.assert_close(back, want_back, rtol=1e-13, atol=1e-13)
