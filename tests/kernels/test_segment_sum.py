"""segment_sum: the fixed-order node sum replacing index_add_ (forward, first and second order)."""

from __future__ import annotations

import pytest
import torch

from mdband.kernels._common import csr
from mdband.kernels.segments import segment_sum


@pytest.mark.parametrize("E,n,shape", [(9, 4, (3,)), (9, 4, (2, 3)), (0, 3, (2,)), (5, 1, ())])
def test_matches_index_add_and_is_twice_differentiable(E, n, shape):
    g = torch.Generator().manual_seed(E + n)
    index = torch.randint(0, max(n - 1, 1), (E,), generator=g)  # unsorted, last node empty
    values = torch.randn(E, *shape, generator=g, dtype=torch.float64, requires_grad=True)
    c = csr(index, n)
    got = segment_sum(values, index, c)
    want = values.new_zeros(n, *shape).index_add(0, index, values)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)
    if E:
        assert torch.autograd.gradcheck(lambda v: segment_sum(v, index, c), (values,))
        assert torch.autograd.gradgradcheck(lambda v: segment_sum(v, index, c) ** 2, (values,))


def test_same_bits_every_call():
    g = torch.Generator().manual_seed(3)
    index = torch.randint(0, 50, (4000,), generator=g)
    values = torch.randn(4000, 8, generator=g)
    c = csr(index, 50)
    assert torch.equal(segment_sum(values, index, c), segment_sum(values, index, c))
