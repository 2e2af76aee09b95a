"""The candidate pair (Gauss) SO(2) linear kernel of benchmarks/experiments/linear_variants.py
against the float64 torch reference, under the Triton interpreter (its speed is measured on the
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
@pytest.mark.parametrize(("L", "C", "F", "E"), [(1, 16, 1, 33), (2, 16, 1, 50), (3, 16, 2, 70)])
def test_pair_kernel_equals_the_reference(L, C, F, E, transpose):
    from benchmarks.experiments import linear_variants as lv

    g = torch.Generator().manual_seed(L + F)
    x = torch.randn(F, E, 3 * L + 1, C, generator=g)
    res = torch.randn(F, E, 3 * L + 1, C, generator=g)
    w0 = torch.randn((L + 1) * C, F * (L + 1) * C, generator=g) / 4
    wm = torch.randn(L * C, F * 2 * L * C, generator=g) / 4
    ref = ss.linear_t_reference if transpose else ss.linear_reference
    want = ref(x.double(), w0.double(), wm.double(), L) + res.double()
    got = lv.pair_linear(x, res, w0, wm, L, be=32, warps=4, stages=2, transpose=transpose)
    assert float((got.double() - want).abs().max() / want.abs().max()) < 1e-6
