"""The pre-split fp16x3 SO(2) linear kernel of benchmarks/experiments/presplit_linear.py against
the float64 torch reference, under the Triton interpreter (its speed is measured on the
device)."""

from __future__ import annotations

import os

import pytest
import torch

from mdband.kernels import _common as cm
from mdband.kernels.so2_stack import reference as ss

pytestmark = pytest.mark.skipif(
    not cm.TRITON_AVAILABLE or os.environ.get("TRITON_INTERPRET") != "1",
    reason="needs Triton's interpreter (TRITON_INTERPRET=1, as make test sets)",
)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize(
    ("L", "C", "F", "E", "nr"), [(1, 16, 1, 33, 2), (2, 16, 1, 50, 1), (3, 16, 2, 70, 2)]
)
@pytest.mark.parametrize("magnitude", [1e-6, 1.0, 1e5])
@pytest.mark.parametrize("per_row", [False, True])
def test_presplit_kernel_equals_the_reference(L, C, F, E, nr, transpose, magnitude, per_row):
    from benchmarks.experiments import presplit_linear as pl

    g = torch.Generator().manual_seed(L + F)
    x = torch.randn(F, E, 3 * L + 1, C, generator=g) * magnitude
    x[:, 3] = 0.0  # an all-zero edge keeps its zero output
    x[:, 5, 1] *= 1e-4  # rows of one edge far apart in size
    res = torch.randn(F, E, 3 * L + 1, C, generator=g) * magnitude
    w0 = torch.randn((L + 1) * C, F * (L + 1) * C, generator=g) / 4
    wm = torch.randn(L * C, F * 2 * L * C, generator=g) / 4
    ref = ss.linear_t_reference if transpose else ss.linear_reference
    want = ref(x.double(), w0.double(), wm.double(), L) + res.double()
    parts = pl.split_x(x, be=8, warps=4, per_row=per_row)
    inv = parts[2].double().view(F, E, -1, 1)
    back = (parts[0].double() + parts[1].double() / pl.LO) * inv
    assert float((back - x.double()).abs().max() / x.double().abs().max()) < 2**-21
    got = pl.presplit_linear(parts, res, w0, wm, L, nr, be=32, warps=4, stages=2, per_row=per_row,
                             transpose=transpose)  # fmt: skip
    assert float((got.double() - want).abs().max() / want.abs().max()) < 2e-6
    assert torch.equal(got[:, 3], res[:, 3])


def test_row_blocks_divide_both_groups():
    from benchmarks.experiments import presplit_linear as pl

    assert pl.row_blocks(3) == [1, 2]
    assert pl.row_blocks(2) == [1]
    assert pl.row_blocks(1) == [1, 2]
