"""The rotation-layout gate end to end: one decision per model, no wrong-layout reads, and the
fused ops (Triton or their references) give the same numbers as the torch path."""

import numpy as np
import pytest
import torch

import mdband.kernels.capability as cap
import mdband.model.block as block
from mdband.kernels import force_triton
from mdband.model.factory import build_sezm, initialise_weights
from mdband.potential import Potential
from mdband.so3.storage import RotationLayout
from mdband.testing.sentinel import SentinelStorage
from mdband.testing.sezm import small_config

POS = np.array([[0.0, 0.0, 0.0], [1.1, 0.2, -0.1], [-0.3, 1.2, 0.4], [0.5, -0.4, 1.3]])
SYM = ["C", "O", "H", "H"]

OPTIONS = {
    "attn1": {},
    "attn2_focus2": dict(n_focus=2, n_atten_head=2, radial_so2_rank=2),
    "scatter_none": dict(n_atten_head=0, radial_so2_mode="none"),
    "degree_rank0": dict(radial_so2_rank=0),
    "pyramid": dict(l_schedule=(3, 2, 1)),
}


def potential(cfg, seed=2, **options):
    model = build_sezm(cfg, None, options)
    initialise_weights(model, seed=seed, gain=0.5)
    return Potential(model, kind="sezm", type_map=["H", "C", "O"], cutoff=4.0, config=cfg,
                     dtype="float64")  # fmt: skip


def sentinel_run(pot, monkeypatch):
    wrapped = []
    original = block.SeZMDescriptor.edge_cache

    def wrapping(self, *a, **k):
        ec = original(self, *a, **k)
        if ec.rotations is not None:
            ec.rotations = SentinelStorage.wrap(ec.rotations)
            wrapped.append(ec.rotations)
        return ec

    monkeypatch.setattr(block.SeZMDescriptor, "edge_cache", wrapping)
    res = pot.evaluate(POS, None, False, SYM)
    monkeypatch.setattr(block.SeZMDescriptor, "edge_cache", original)
    return res, wrapped


@pytest.mark.parametrize("kernels", ["torch", "ops"])
@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_no_wrong_layout_reads_and_band_equals_dense(name, kernels, monkeypatch):
    cfg = small_config(**OPTIONS[name])
    results = {}
    for layout in ("band", "dense"):
        pot = potential(cfg, rotation_layout=layout, kernels=kernels)
        assert pot.rotation_layout == layout
        res, wrapped = sentinel_run(pot, monkeypatch)
        assert len(wrapped) == 1 and wrapped[0].violations == []
        assert wrapped[0].reads and {lay for _, lay in wrapped[0].reads} == {RotationLayout(layout)}
        results[layout] = res
    b, d = results["band"], results["dense"]
    assert b.energy == d.energy
    np.testing.assert_array_equal(b.forces, d.forces)


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_ops_match_torch_path(name):
    cfg = small_config(**OPTIONS[name])
    a = potential(cfg, kernels="torch").evaluate(POS, None, False, SYM)
    b = potential(cfg, kernels="ops").evaluate(POS, None, False, SYM)
    assert abs(a.energy - b.energy) <= 1e-12 * max(1.0, abs(a.energy))
    np.testing.assert_allclose(a.forces, b.forces, rtol=0, atol=1e-12)


@pytest.mark.parametrize("unavailable", ["rotate_mix", "aggregate", "zonal_embed", None])
def test_gate_matrix_with_monkeypatched_availability(unavailable, monkeypatch):
    """Band iff every consumer accepts it; a consumer whose op is unavailable falls back to the
    torch path (which reads both); a consumer that refuses the band forces dense, named."""
    from mdband.model import gate

    if unavailable is not None:
        mod = {"rotate_mix": gate._rm, "aggregate": gate._agg, "zonal_embed": gate._zonal}
        monkeypatch.setattr(mod[unavailable], "backend", lambda *a, **k: (None, "patched away"))
    cfg = small_config()
    pot = potential(cfg, kernels="ops")
    assert pot.rotation_layout == "band"
    names = [s.name for s in gate.model_consumers(pot.model.cfg, pot.model.settings)]
    if unavailable == "rotate_mix":
        assert "blocks.0.rotate_to_local" in names and "blocks.0.rotate_mix" not in names
    if unavailable == "aggregate":
        assert "blocks.1.rotate_back" in names
    # a consumer that declares dense only blocks the band for the whole model
    refusing = cap.ConsumerSpec("blocks.1.aggregate", cap.DENSE_ONLY, "test: dense-only reader")
    real = gate.cap.spec_for_aggregate

    def spec(device, dtype, **kw):
        s = real(device, dtype, **kw)
        return refusing if kw.get("name") == "blocks.1.aggregate" else s

    monkeypatch.setattr(gate.cap, "spec_for_aggregate", spec)
    if unavailable == "aggregate":
        return  # the torch path replaces the aggregate op; nothing refuses
    forced = potential(cfg, kernels="ops", rotation_layout="band")
    assert forced.rotation_layout == "dense"
    assert "blocks.1.aggregate" in forced.rotation_layout_reason
    dense = potential(cfg, kernels="ops", rotation_layout="dense")
    r1 = forced.evaluate(POS, None, False, SYM)
    r2 = dense.evaluate(POS, None, False, SYM)
    assert r1.energy == r2.energy
    np.testing.assert_array_equal(r1.forces, r2.forces)


@pytest.mark.parametrize("lmax", [1, 2])
def test_triton_kernels_in_the_model(lmax):
    """The whole model with every fused op on its Triton kernel (interpreter on CPU)."""
    cfg = small_config(channels=4, n_radial=4, l_schedule=(lmax,), mixing_layers=1)
    ref = potential(cfg, kernels="torch").evaluate(POS, None, False, SYM)
    with force_triton():
        got = potential(cfg, kernels="ops").evaluate(POS, None, False, SYM)
    assert abs(got.energy - ref.energy) <= 1e-12 * max(1.0, abs(ref.energy))
    np.testing.assert_allclose(got.forces, ref.forces, rtol=0, atol=1e-11)


GRID_NETS = {  # the grid nets that run the fused grid product: S2 FFN (default), DPA4-Mini's
    "s2_ffn": {},  # SO(3)-grid FFN with one branch, message-node SO(3) grid, MLP readout
    "mini_grids": dict(ffn_so3_grid=True, grid_branch=(0, 0, 1), message_node_so3=True,
                       so3_readout="mlp"),
    "branches": dict(ffn_so3_grid=True, grid_branch=(0, 2, 2), message_node_so3=True,
                     so3_readout="glu"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(GRID_NETS))
def test_fused_grid_products_in_the_model(name):
    """The grid nets' fused product (interpreter on CPU) against the torch path, float64."""
    cfg = small_config(channels=8, n_radial=4, l_schedule=(2,), mixing_layers=1, **GRID_NETS[name])
    ref = potential(cfg, kernels="torch").evaluate(POS, None, False, SYM)
    pot = potential(cfg, kernels="ops")
    nets = [m for m in pot.model.modules() if hasattr(m, "grid_settings")]
    assert nets and all(m.grid_settings is not None for m in nets)
    with force_triton():
        got = pot.evaluate(POS, None, False, SYM)
    assert abs(got.energy - ref.energy) <= 1e-12 * max(1.0, abs(ref.energy))
    np.testing.assert_allclose(got.forces, ref.forces, rtol=0, atol=1e-11)
    np.testing.assert_allclose(got.virial, ref.virial, rtol=0, atol=1e-10)
    torch_nets = [m for m in potential(cfg, kernels="torch").model.modules()
                  if hasattr(m, "grid_settings")]  # fmt: skip
    assert all(m.grid_settings is None for m in torch_nets)


@pytest.mark.parametrize("precision,recompute", [("ieee", "off"), ("tf32x3", "off"),
                                                  ("tf32x3", "stack"), ("fp16x3", "off"),
                                                  ("fp16x3", "stack")])  # fmt: skip
def test_fused_mixing_layers_in_the_model(precision, recompute):
    """float32 model with the fused SO(2) mixing layers (Triton, interpreter on CPU) against the
    float64 torch path: energy and forces to float32 accuracy."""
    cfg = small_config(channels=16, n_radial=4, l_schedule=(2,), mixing_layers=2)
    ref = potential(cfg, kernels="torch").evaluate(POS, None, False, SYM)
    opts = dict(kernels="ops", stack_precision=precision, recompute=recompute)
    model = build_sezm(cfg, None, opts)
    initialise_weights(model, seed=2, gain=0.5)
    pot = Potential(model, kind="sezm", type_map=["H", "C", "O"], cutoff=4.0, config=cfg,
                    dtype="float32")  # fmt: skip
    blocks = pot.model.descriptor.blocks
    assert all(b.so2_conv._stack_fused(torch.zeros(1, 1, 7, 16)) for b in blocks)
    with force_triton():
        got = pot.evaluate(POS, None, False, SYM)
    assert abs(got.energy - ref.energy) <= 1e-5 * max(1.0, abs(ref.energy))
    np.testing.assert_allclose(got.forces, ref.forces, rtol=0, atol=2e-5)


def test_single_fp16_products_in_the_model():
    """stack_precision="fp16": one fp16 product per fp32 product, forces off by fp16 rounding
    (2⁻¹¹ relative per product) but no more, and measurably off (the mode does run in fp16)."""
    cfg = small_config(channels=16, n_radial=4, l_schedule=(2,), mixing_layers=2)
    ref = potential(cfg, kernels="torch").evaluate(POS, None, False, SYM)
    model = build_sezm(cfg, None, dict(kernels="ops", stack_precision="fp16"))
    initialise_weights(model, seed=2, gain=0.5)
    pot = Potential(model, kind="sezm", type_map=["H", "C", "O"], cutoff=4.0, config=cfg,
                    dtype="float32")  # fmt: skip
    with force_triton():
        got = pot.evaluate(POS, None, False, SYM)
    err = np.abs(got.forces - ref.forces).max()
    scale = np.abs(ref.forces).max()
    assert 1e-6 * scale < err < 2e-2 * scale


def test_fused_mixing_layers_only_with_frozen_weights():
    """The fused SO(2) layers give no weight gradients: any trainable stack weight (linear or
    gate) keeps the torch path."""
    cfg = small_config(channels=16, n_radial=4, l_schedule=(2,), mixing_layers=2)
    model = build_sezm(cfg, None, dict(kernels="ops"))
    conv = model.descriptor.blocks[0].so2_conv
    x = torch.zeros(1, 1, 7, 16)
    for p in model.parameters():
        p.requires_grad_(False)
    assert conv._stack_fused(x)
    conv.non_linearities[0].gate_linear.weight.requires_grad_(True)
    assert not conv._stack_fused(x)
    assert not conv._stack_fused(x.double())  # no float64 kernel
