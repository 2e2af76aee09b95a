"""Physics of the SeZM engine in float64: invariances, forces, virial, smoothness, edge cases."""

import numpy as np
import pytest
from ase.build import bulk, molecule

from mdband.testing.sezm import random_potential, small_config


def rotation(seed):
    q = np.random.default_rng(seed).normal(size=4)
    q /= np.linalg.norm(q)
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def periodic_frame():
    a = bulk("C", "diamond", a=3.6, cubic=True)
    a.rattle(0.08, seed=4)
    sym = a.get_chemical_symbols()
    sym[1], sym[5] = "O", "H"
    a.set_chemical_symbols(sym)
    return a


def ev(pot, atoms):
    return pot.evaluate(atoms.positions, atoms.cell.array, atoms.pbc, atoms.get_chemical_symbols())


def test_invariances_and_force_rotation(small_potential):
    a = periodic_frame()
    r0 = ev(small_potential, a)
    R = rotation(7)
    b = a.copy()
    b.positions = a.positions @ R.T
    b.cell = a.cell.array @ R.T
    rb = ev(small_potential, b)
    assert abs(rb.energy - r0.energy) < 1e-10 * max(1.0, abs(r0.energy))
    np.testing.assert_allclose(rb.forces, r0.forces @ R.T, atol=1e-10)
    np.testing.assert_allclose(rb.virial, R @ r0.virial @ R.T, atol=1e-10)
    c = a.copy()
    c.positions += np.array([0.3, -1.1, 2.5])
    assert abs(ev(small_potential, c).energy - r0.energy) < 1e-10
    perm = np.random.default_rng(1).permutation(len(a))
    d = a[perm]
    rd = ev(small_potential, d)
    assert abs(rd.energy - r0.energy) < 1e-10
    np.testing.assert_allclose(rd.forces, r0.forces[perm], atol=1e-10)


def test_forces_are_minus_gradient_with_axis_aligned_edges(small_potential):
    m = molecule("CH3OH")
    pos = m.positions.copy()
    # put the C-O bond exactly along +z and one H exactly along -x/ -z of C
    pos -= pos[0]
    pos[1] = [0.0, 0.0, 1.43]
    pos[2] = [-1.09, 0.0, 0.0]
    pos[3] = [0.0, 0.0, -1.09] + np.array([0.0, 0.0, 0.0])
    sym = m.get_chemical_symbols()
    r = small_potential.evaluate(pos, None, False, sym)
    assert np.abs(r.forces).max() > 1e-3
    h = 1e-5
    fd = np.zeros_like(pos)
    for i in range(len(pos)):
        for k in range(3):
            p, q = pos.copy(), pos.copy()
            p[i, k] += h
            q[i, k] -= h
            ep = small_potential.evaluate(p, None, False, sym).energy
            eq = small_potential.evaluate(q, None, False, sym).energy
            fd[i, k] = -(ep - eq) / (2 * h)
    np.testing.assert_allclose(r.forces, fd, atol=1e-7)
    assert np.abs(r.forces.sum(0)).max() < 1e-12


def test_virial_is_strain_derivative(small_potential):
    a = periodic_frame()
    r = ev(small_potential, a)
    h = 1e-6
    W = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            e = []
            for s in (h, -h):
                eps = np.eye(3)
                eps[i, j] += s
                b = a.copy()
                b.set_cell(a.cell.array @ eps, scale_atoms=False)
                b.positions = a.positions @ eps
                e.append(ev(small_potential, b).energy)
            W[i, j] = -(e[0] - e[1]) / (2 * h)
    np.testing.assert_allclose(r.virial, W, atol=1e-7)


def test_energy_and_forces_continuous_across_cutoff(small_potential):
    rc = small_potential.cutoff
    sym = ["C", "O", "H"]

    def at(d):
        pos = np.array([[0.0, 0.0, 0.0], [1.2, 0.0, 0.0], [1.2 + d, 0.3, 0.0]])
        return small_potential.evaluate(pos, None, False, sym)

    # atom 2 crosses the cutoff of atom 1 (and stays beyond atom 0's cutoff)
    inner = at(rc - 1e-6)
    outer = at(rc + 1e-6)
    assert abs(inner.energy - outer.energy) < 1e-12
    np.testing.assert_allclose(inner.forces, outer.forces, atol=1e-10)


def test_single_atom_and_no_edges(small_potential):
    r = small_potential.evaluate([[0.0, 0.0, 0.0]], None, False, ["O"])
    assert np.isfinite(r.energy) and r.forces.shape == (1, 3)
    assert np.all(r.forces == 0)
    far = small_potential.evaluate([[0, 0, 0], [20.0, 0, 0]], None, False, ["O", "H"])
    assert np.all(far.forces == 0)
    np.testing.assert_allclose(far.energy, r.energy + far.atom_energy[1], atol=1e-12)


CONFIGS = {
    "default": {},
    "pyramid_noattn": dict(l_schedule=(3, 2, 1), n_atten_head=0, radial_so2_mode="none"),
    "focus2": dict(n_focus=2, n_atten_head=2, radial_so2_rank=2, edge_norm=False),
    "grids": dict(
        ffn_so3_grid=True,
        grid_branch=(0, 0, 2),
        message_node_so3=True,
        so3_readout="mlp",
        version=1.0,
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_band_equals_dense(name):
    cfg = small_config(**CONFIGS[name])
    band = random_potential(cfg, seed=5, gain=0.5, rotation_layout="band")
    dense = random_potential(cfg, seed=5, gain=0.5, rotation_layout="dense")
    assert band.rotation_layout == "band" and dense.rotation_layout == "dense"
    a = periodic_frame()
    rb, rd = ev(band, a), ev(dense, a)
    assert np.abs(rd.forces).max() > 1e-6
    # both layouts feed every consumer the same numbers through the same arithmetic
    assert rb.energy == rd.energy
    np.testing.assert_array_equal(rb.forces, rd.forces)
    np.testing.assert_array_equal(rb.virial, rd.virial)


@pytest.mark.parametrize("mode", ["stack", "all"])
def test_recompute_gives_identical_forces(mode):
    import mdband.model.factory as fac
    from mdband.potential import Potential

    cfg = small_config(n_focus=2, n_atten_head=2)
    plain = random_potential(cfg, seed=9, gain=0.5)
    model = fac.build_sezm(cfg, None, {"recompute": mode})
    model.load_state_dict(plain.model.state_dict())
    assert model.descriptor.recompute == mode
    rec = Potential(
        model, kind="sezm", type_map=plain.type_map, cutoff=plain.cutoff, config=plain.config,
        dtype="float64",
    )  # fmt: skip
    a = periodic_frame()
    r1, r2 = ev(plain, a), ev(rec, a)
    assert r1.energy == r2.energy
    np.testing.assert_array_equal(r1.forces, r2.forces)
