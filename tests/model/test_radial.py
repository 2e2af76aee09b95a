"""The radial pieces of SeZM (mdband/model/radial.py)."""

from __future__ import annotations

import pytest
import torch

from mdband.model.radial import RadialBasis


@pytest.mark.parametrize("fixed", [False, True])
def test_fixed_radial_basis_is_a_buffer_of_the_same_name(fixed):
    """A ``/fix`` basis (deepmd-kit after 3.2.0) keeps ``adam_freqs`` out of training: a buffer,
    under the state-dict name deepmd-kit uses, with the same numbers as the trainable one."""
    rb = RadialBasis(5.0, 8, "gaussian", 0, fixed=fixed)
    assert "adam_freqs" in rb.state_dict()
    assert ("adam_freqs" in dict(rb.named_parameters())) is not fixed
    r = torch.linspace(0.5, 6.0, 7, dtype=torch.float64)[:, None]
    want = RadialBasis(5.0, 8, "gaussian", 0)(r).detach()
    torch.testing.assert_close(rb(r).detach(), want, rtol=0, atol=0)
    assert float(want[-1].abs().min()) > 0.0  # exponent 0: the raw basis, also past rcut
