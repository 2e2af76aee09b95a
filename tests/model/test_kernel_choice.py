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


def _potential(cfg, dtype, **options):
    model = build_sezm(cfg, None, options)
    initialise_weights(model, seed=2, gain=0.5)
    return Potential(model, kind="sezm", type_map=["H", "C", "O"], cutoff=4.0, config=cfg,
                     dtype=dtype)  # fmt: skip


@pytest.mark.parametrize("radial,rm_dot", [("degree_channel", False), ("none", True)])
def test_float32_backward_kernels_and_forces(monkeypatch, radial, rm_dot):
    """float32, Triton (the interpreter on CPU): the aggregate backward is its dot kernel, the
    rotate_mix backward its dot kernel for radial rows and its edge kernels for the mixer, the
    environment seed's sums segment_outer's kernels; energy
    and forces agree with the float64 torch path to float32 accuracy."""
    cfg = small_config(channels=16, n_radial=4, l_schedule=(2,), mixing_layers=2,
                       radial_so2_mode=radial)  # fmt: skip
    ref = _potential(cfg, "float64", kernels="torch").evaluate(POS, None, False, SYM)
    pot = _potential(cfg, "float32", kernels="ops")
    seen = set()
    real = cm.wrap

    def wrap(kernel):
        seen.add(getattr(kernel, "__name__", str(kernel)))
        return real(kernel)

    monkeypatch.setattr(cm, "wrap", wrap)
    with force_triton():
        got = pot.evaluate(POS, None, False, SYM)
    assert "_agg_dot_bwd_kernel" in seen and "_agg_bwd_kernel" not in seen
    assert "_agg_fwd_kernel" in seen  # the forward stays the walk
    assert ("_rm_dot_bwd_kernel" in seen) is rm_dot
    assert ("_rm_bwd_edge_kernel" in seen) is not rm_dot
    assert {"_seg_outer_fwd_kernel", "_seg_outer_bwd_kernel"} <= seen  # the environment seed
    assert abs(got.energy - ref.energy) <= 1e-5 * max(1.0, abs(ref.energy))
    np.testing.assert_allclose(got.forces, ref.forces, rtol=0, atol=2e-5)
