"""The kernels a float32 model's backward runs by default ("auto"): aggregate's tf32x3 dot
kernels, rotate_mix's only for radial rows, the environment seed's segment_outer; forces against
the float64 torch path."""

import numpy as np
import pytest

from mdband.kernels import _common as cm
from mdband.kernels import force_triton
from mdband.model.factory import build_sezm, initialise_weights
from mdband.potential import Potential
from mdband.testing.sezm import small_config

POS = np.array([[0.0, 0.0, 0.0], [1.1, 0.2, -0.1], [-0.3, 1.2, 0.4], [0.5, -0.4, 1.3]])
SYM = ["C", "O", "H", "H"]


def _launched(monkeypatch) -> set:
    """Names of the Triton kernels launched from now on in this test (``cm.wrap`` spied)."""
    seen, real = set(), cm.wrap

    def wrap(kernel):
        seen.add(getattr(kernel, "__name__", str(kernel)))
        return real(kernel)

    monkeypatch.setattr(cm, "wrap", wrap)
    return seen


def _potential(cfg, dtype, **options):
    model = build_sezm(cfg, None, options)
    initialise_weights(model, seed=2, gain=0.5)
    return Potential(model, kind="sezm", type_map=["H", "C", "O"], cutoff=4.0, config=cfg,
                     dtype=dtype)  # fmt: skip


@pytest.mark.parametrize("radial,rm_dot", [("degree_channel", False), ("none", True)])
def test_float32_backward_kernels_and_forces(monkeypatch, radial, rm_dot):
    """float32, Triton (the interpreter on CPU): the aggregate backward is its dot kernel, the
    rotate_mix backward its dot kernel for radial rows and its edge kernels for the mixer, the
    environment seed's sums segment_outer's kernels, the envelope and basis radial_basis'; energy
    and forces agree with the float64 torch path to float32 accuracy."""
    cfg = small_config(channels=16, n_radial=4, l_schedule=(2,), mixing_layers=2,
                       radial_so2_mode=radial)  # fmt: skip
    ref = _potential(cfg, "float64", kernels="torch").evaluate(POS, None, False, SYM)
    pot = _potential(cfg, "float32", kernels="ops")
    seen = _launched(monkeypatch)
    with force_triton():
        got = pot.evaluate(POS, None, False, SYM)
    assert "aggregate_dot_bwd_kernel" in seen and "aggregate_walk_bwd_kernel" not in seen
    assert "aggregate_walk_fwd_kernel" in seen  # the forward is the walk
    assert ("rotate_mix_dot_bwd_kernel" in seen) is rm_dot
    assert ("rotate_mix_edge_bwd_kernel" in seen) is not rm_dot
    assert {"segment_outer_fwd_kernel", "segment_outer_bwd_kernel"} <= seen  # environment seed
    assert {"radial_basis_fwd_kernel", "radial_basis_bwd_kernel"} <= seen  # envelope and basis
    assert abs(got.energy - ref.energy) <= 1e-5 * max(1.0, abs(ref.energy))
    np.testing.assert_allclose(got.forces, ref.forces, rtol=0, atol=2e-5)


@pytest.mark.parametrize("capability,dot", [((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_tf32x3_choices_need_tensor_cores(monkeypatch, capability, dot):
    """Every "auto" tf32x3 choice asks one predicate, ``has_tf32_cores``: on a GPU without
    TF32 tensor cores (below sm80) aggregate and zonal keep their exact walks, rotate_mix its
    edge kernels, the grid product its FMAs."""
    from types import SimpleNamespace

    import torch

    from mdband.kernels import grid_product as gp
    from mdband.kernels import zonal
    from mdband.kernels.aggregate import launch as agg_launch
    from mdband.kernels.rotate_mix import launch as rm_launch

    monkeypatch.setattr(cm, "interpret_mode", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    gpu = SimpleNamespace(dtype=torch.float32, device=torch.device("cuda"))
    assert cm.has_tf32_cores(gpu.device) is dot
    assert not cm.has_tf32_cores("cpu")
    assert agg_launch.bwd_kernels(gpu) == ("dot" if dot else "walk")
    assert rm_launch.bwd_kernels(gpu, mix=False) == ("dot" if dot else "edge")
    assert zonal.bwd_kernel(gpu) == ("dot" if dot else "walk")
    assert gp._precision(gpu, exact=False) == int(dot)
    assert cm.dot_precision("auto", gpu.device) == ("tf32x3" if dot else "ieee")  # the MLP ops
    assert cm.dot_precision("ieee", gpu.device) == "ieee"
    assert cm.dot_precision("tf32x3", "cpu") == "tf32x3"
    with pytest.raises(ValueError, match="bf16"):
        cm.dot_precision("bf16", gpu.device)


def test_each_edge_csr_is_built_once(monkeypatch):
    """Where the fused ops run, Potential builds the edges' dst and src CSRs once per call and
    hands them to the model and (on CUDA) to the force assembly, which sorted both again: the
    model sorts none of its own (two sorts per call, as many as it makes alone on the CPU, whose
    assembly sorts nothing), with the same energy and forces bit for bit."""
    import torch

    cfg = small_config(channels=16, n_radial=4, l_schedule=(2,), mixing_layers=1)
    pot = _potential(cfg, "float64", kernels="ops")
    n_edges = []
    real = torch.argsort

    def argsort(t, *args, **kwargs):
        n_edges.append(int(t.shape[0]))
        return real(t, *args, **kwargs)

    with force_triton():
        before = pot.evaluate(POS, None, False, SYM)
        monkeypatch.setattr(torch, "argsort", argsort)
        got = pot.evaluate(POS, None, False, SYM)
        monkeypatch.setattr(type(pot.model), "accepts_edge_csr", False)
        n_with = len(n_edges)
        alone = pot.evaluate(POS, None, False, SYM)
    assert n_with == 2 and len(n_edges) - n_with == 2  # CPU: the assembly sorts nothing
    assert got.energy == before.energy == alone.energy
    np.testing.assert_array_equal(got.forces, alone.forces)


@pytest.mark.parametrize(
    "op,kernels,edge_norm",
    [
        ("seed_mlp", ("seed_mlp_fwd_kernel", "seed_mlp_bwd_kernel"), False),
        ("radial_mlp", ("radial_mlp_fwd_kernel", "radial_mlp_bwd_kernel"), False),
        ("radial_mlp", ("radial_mlp_fwd_kernel", "radial_mlp_bwd_kernel"), True),
    ],
)
def test_edge_mlp_switches(monkeypatch, op, kernels, edge_norm):
    """The tuning table's ``kernels = "op"`` of seed_mlp (the environment seed's edge MLPs) or
    radial_mlp (the radial MLP and envelope product, with and without the RMS norm): the op's
    two kernels run (float32, interpreter), with the energy and forces of the float64 torch
    path to float32 accuracy; "torch" runs neither. A radial MLP wider than the table's
    ``radial_mlp.max_width`` keeps the torch path."""
    from mdband.kernels import tuning
    from mdband.model.radial import RadialMLP

    cfg = small_config(channels=16, n_radial=4, l_schedule=(2,), mixing_layers=1,
                       edge_norm=edge_norm)  # fmt: skip
    ref = _potential(cfg, "float64", kernels="torch").evaluate(POS, None, False, SYM)
    pot = _potential(cfg, "float32", kernels="ops")
    assert pot.model.descriptor.radial_embedding.one_hidden_layer() is not None
    assert RadialMLP([4, 8, 8, 12], norm=edge_norm).one_hidden_layer() is None  # torch path
    assert getattr(tuning.DEFAULTS, op).kernels == "op"  # the default
    seen = _launched(monkeypatch)
    with force_triton():
        with tuning.override(**{op: {"kernels": "torch"}}):
            pot.evaluate(POS, None, False, SYM)
        assert not seen & set(kernels)
        if op == "radial_mlp":
            with tuning.override(radial_mlp={"max_width": 3 * 16 - 1}):  # (L+1)·C = 48 outputs
                pot.evaluate(POS, None, False, SYM)
            assert not seen & set(kernels)
        with tuning.override(**{op: {"kernels": "op", "max_width": 3 * 16}}):
            got = pot.evaluate(POS, None, False, SYM)
    assert set(kernels) <= seen
    assert abs(got.energy - ref.energy) <= 1e-5 * max(1.0, abs(ref.energy))
    np.testing.assert_allclose(got.forces, ref.forces, rtol=0, atol=2e-5)
