"""The native spin embedding (mdband/model/spin.py): its l = 1 map rotates with the geometry, so
a spin model's energy is invariant under a joint rotation of the positions and the moments (and
not under a rotation of the moments alone), its forces and magnetic forces rotate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

import mdband
from mdband.model.spin import cart_to_l1
from mdband.so3.harmonics import spherical_harmonics

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd_spin"


def test_cart_to_l1_rotates_like_the_l1_harmonics():
    """cart_to_l1(R s) = D¹(R) cart_to_l1(s), with D¹(R) the l = 1 block of mdband's real
    spherical harmonics (Y₁(R x) = D¹(R) Y₁(x), solved on a few points): the moments' l = 1
    features rotate with the geometry's."""
    rng = np.random.default_rng(4)
    pts = torch.tensor(rng.normal(size=(8, 3)))
    pts = pts / pts.norm(dim=1, keepdim=True)
    s = torch.tensor(rng.normal(size=(5, 3)))
    for seed in range(3):
        rot = torch.tensor(Rotation.random(random_state=seed).as_matrix())
        y = spherical_harmonics(1, pts)[:, 1:4]
        y_rot = spherical_harmonics(1, pts @ rot.T)[:, 1:4]
        d1 = torch.linalg.lstsq(y, y_rot).solution.T  # y_rot = y @ d1.T
        torch.testing.assert_close(y @ d1.T, y_rot, rtol=0, atol=1e-12)
        torch.testing.assert_close(cart_to_l1(s @ rot.T), cart_to_l1(s) @ d1.T, rtol=0,
                                   atol=1e-12)  # fmt: skip


@pytest.mark.parametrize("name", ["spin_native", "spin_deepspin"])
def test_joint_rotation_invariance(name):
    pot = mdband.load_model(FIX / f"{name}.pt", device="cpu", dtype="float64")
    ref = np.load(FIX / f"{name}.npz")
    pos, spin = ref["coord_3"], ref["spin_3"]  # the open cluster
    sym = [str(ref["type_map"][t]) for t in ref["atype_3"]]
    rot = Rotation.random(random_state=7).as_matrix()
    a = pot.evaluate(pos, None, False, sym, magmoms=spin)
    b = pot.evaluate(pos @ rot.T, None, False, sym, magmoms=spin @ rot.T)
    assert abs(a.energy - b.energy) < 1e-11
    np.testing.assert_allclose(b.forces, a.forces @ rot.T, rtol=0, atol=1e-10)
    np.testing.assert_allclose(b.magnetic_forces, a.magnetic_forces @ rot.T, rtol=0, atol=1e-10)
    c = pot.evaluate(pos, None, False, sym, magmoms=spin @ rot.T)  # moments alone
    assert abs(c.energy - a.energy) > 1e-4
