"""The one-product form of the torch path's block maps (CPU) against the per-block products (the
CUDA torch path): rotations, the radial degree mixer, and a whole model, float64."""

import numpy as np
import pytest
import torch

from mdband.model.factory import build_sezm, initialise_weights
from mdband.model.so2 import RadialDegreeMixer
from mdband.potential import Potential
from mdband.so3 import storage as st
from mdband.so3.wigner import rotation_storage
from mdband.testing.sezm import small_config

F64 = torch.float64


@pytest.fixture
def per_block(monkeypatch):
    """Run the per-block products on the CPU too (as the CUDA torch path does)."""

    def use(on: bool):
        devices = frozenset() if on else frozenset({"cpu"})
        monkeypatch.setattr(st, "ONE_PRODUCT_DEVICES", devices)

    return use


def storage(layout, lmax, n=23, lmax_storage=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(n, 3, generator=g, dtype=F64)
    rs = rotation_storage(v, lmax if lmax_storage is None else lmax_storage, layout)
    return st.RotationStorage(rs.layout, rs.lmax, rs.data.clone().requires_grad_())


@pytest.mark.parametrize("layout", list(st.RotationLayout))
@pytest.mark.parametrize("lmax, lmax_storage", [(0, 0), (1, 1), (2, 2), (3, 3), (2, 4)])
@pytest.mark.parametrize("scaled", [False, True])
def test_rotations_one_product_equal_per_block(layout, lmax, lmax_storage, scaled, per_block):
    rs = storage(layout, lmax, lmax_storage=lmax_storage)
    E, D, Dm, C = rs.data.shape[0], st.dim_of(lmax), st.reduced_dim(lmax), 5
    g = torch.Generator().manual_seed(1)
    x = torch.randn(E, D, C, generator=g, dtype=F64, requires_grad=True)
    xl = torch.randn(E, Dm, C, generator=g, dtype=F64, requires_grad=True)
    scale = torch.rand(D, generator=g, dtype=F64) + 0.5 if scaled else None
    outs = {}
    for on in (True, False):
        per_block(on)
        a = st.rotate_to_local(rs, x, lmax)
        b = st.rotate_back(rs, xl, lmax, scale=scale)
        loss = (a * a.detach().cos()).sum() + (b * b.detach().sin()).sum()
        grads = torch.autograd.grad(loss, (x, xl, rs.data))
        outs[on] = (a.detach(), b.detach(), *grads)
    for p, q in zip(outs[True], outs[False]):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-13)


def test_rotations_differentiate_twice():
    """Training differentiates forces again: the one-product rotations have a second derivative."""
    rs = storage(st.RotationLayout.BAND, 2, n=4)
    x = torch.randn(4, 9, 3, dtype=F64, requires_grad=True)
    xl = torch.randn(4, 7, 3, dtype=F64, requires_grad=True)
    scale = torch.linspace(0.5, 1.5, 9, dtype=F64)

    def f(x, xl, data):
        r = st.RotationStorage(st.RotationLayout.BAND, 2, data)
        return st.rotate_to_local(r, x, 2).sum() + (st.rotate_back(r, xl, 2, scale) ** 2).sum()

    assert torch.autograd.gradgradcheck(f, (x, xl, rs.data))


@pytest.mark.parametrize(
    "mode, rank", [("degree", 0), ("degree_channel", 1), ("degree_channel", 3)]
)
@pytest.mark.parametrize("lmax", [1, 2, 3])
def test_mixer_one_product_equals_per_block(mode, rank, lmax, per_block):
    C, E = 4, 17
    mixer = RadialDegreeMixer(lmax, C, mode, rank).to(F64)
    g = torch.Generator().manual_seed(lmax)
    with torch.no_grad():
        for p in mixer.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64))
    xl = torch.randn(E, 3 * lmax + 1, C, generator=g, dtype=F64, requires_grad=True)
    rad = torch.randn(E, lmax + 1, C, generator=g, dtype=F64, requires_grad=True)
    outs = {}
    for on in (True, False):
        per_block(on)
        y = mixer(xl, rad)
        grads = torch.autograd.grad((y * y.detach().cos()).sum(), (xl, rad, *mixer.parameters()))
        outs[on] = (y.detach(), *grads)
    for p, q in zip(outs[True], outs[False]):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "options",
    [
        {},
        dict(n_focus=2, n_atten_head=2, radial_so2_rank=2),
        dict(radial_so2_mode="degree"),
        dict(l_schedule=(3, 2, 1)),
    ],  # fmt: skip
)
def test_model_one_product_equals_per_block(options, per_block):
    cfg = small_config(**options)
    model = build_sezm(cfg, None, {"kernels": "torch"})
    initialise_weights(model, seed=3, gain=0.5)
    pot = Potential(model, kind="sezm", type_map=["H", "C", "O"], cutoff=4.0, config=cfg,
                    dtype="float64")  # fmt: skip
    pos = np.array([[0.0, 0.0, 0.0], [1.1, 0.2, -0.1], [-0.3, 1.2, 0.4], [0.5, -0.4, 1.3]])
    sym = ["C", "O", "H", "H"]
    res = {}
    for on in (True, False):
        per_block(on)
        res[on] = pot.evaluate(pos, None, False, sym)
    assert abs(res[True].energy - res[False].energy) <= 1e-12 * max(1.0, abs(res[False].energy))
    np.testing.assert_allclose(res[True].forces, res[False].forces, rtol=0, atol=1e-12)
