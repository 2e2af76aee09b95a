"""Deviation math against a direct computation from separate single-model evaluations."""

import math

import numpy as np

from mdband.committee import Committee, model_deviation
from mdband.committee.deviation import force_deviation, from_partials, virial_deviation

TOL = 1e-12


def direct(results, n_atoms):
    """deepmd-kit's definitions written out atom by atom and component by component."""
    m = len(results)
    eps_f = []
    for i in range(n_atoms):
        mean = sum(r.forces[i] for r in results) / m
        eps_f.append(math.sqrt(sum(float(np.sum((r.forces[i] - mean) ** 2)) for r in results) / m))
    eps_v = []
    for a in range(3):
        for b in range(3):
            values = [r.virial[a, b] / n_atoms for r in results]
            mean = sum(values) / m
            eps_v.append(math.sqrt(sum((v - mean) ** 2 for v in values) / m))
    energies = [r.energy / n_atoms for r in results]
    e_mean = sum(energies) / m
    return {
        "devi_f": np.array(eps_f),
        "max_devi_f": max(eps_f),
        "min_devi_f": min(eps_f),
        "avg_devi_f": sum(eps_f) / n_atoms,
        "max_devi_v": max(eps_v),
        "min_devi_v": min(eps_v),
        "avg_devi_v": math.sqrt(sum(e * e for e in eps_v) / 9),
        "devi_e": math.sqrt(sum((e - e_mean) ** 2 for e in energies) / m),
    }


def test_deviations_equal_direct_computation(sezm_models, frame):
    atoms = frame
    args = (atoms.positions, atoms.cell.array, atoms.pbc, atoms.numbers)
    separate = [pot.evaluate(*args) for pot in sezm_models]
    devi = Committee(sezm_models).evaluate(*args).deviation
    ref = direct(separate, len(atoms))
    assert ref["max_devi_f"] > 1e-3 and ref["max_devi_v"] > 1e-4  # the models disagree
    for name, value in ref.items():
        np.testing.assert_allclose(getattr(devi, name), value, rtol=TOL, atol=1e-15, err_msg=name)


def test_identical_copies_give_zero(sezm_models, frame):
    atoms = frame
    devi = (
        Committee([sezm_models[0]] * 3)
        .evaluate(atoms.positions, atoms.cell.array, atoms.pbc, atoms.numbers)
        .deviation
    )
    assert devi.row() == (0.0,) * 6
    assert np.all(devi.devi_f == 0.0) and devi.devi_e == 0.0


def test_matches_numpy_std_formulation():
    """ε_F = ‖std_m F‖ and ε_W = std_m(W/N), as deepmd-kit's calc_model_devi_f / _v write them."""
    rng = np.random.default_rng(0)
    forces = rng.normal(size=(4, 7, 3))
    virials = rng.normal(size=(4, 3, 3))
    np.testing.assert_allclose(
        force_deviation(forces), np.linalg.norm(np.std(forces, axis=0), axis=-1), rtol=TOL
    )
    std_v = np.std(virials.reshape(4, 9) / 7, axis=0)
    np.testing.assert_allclose(virial_deviation(virials, 7), std_v, rtol=TOL)
    devi = model_deviation(forces, virials)
    np.testing.assert_allclose(devi.avg_devi_v, np.linalg.norm(std_v) / 3, rtol=TOL)


def test_partials_over_domains_equal_whole():
    """max / min / sum over two domains and summed virials give the same numbers (LAMMPS)."""
    rng = np.random.default_rng(1)
    forces = rng.normal(size=(3, 10, 3))
    virials = rng.normal(size=(3, 3, 3))
    whole = model_deviation(forces, virials)
    parts = [force_deviation(forces[:, :4]), force_deviation(forces[:, 4:])]
    reduced = from_partials(
        max(p.max() for p in parts),
        min(p.min() for p in parts),
        sum(p.sum() for p in parts),
        10,
        virials,
    )
    np.testing.assert_allclose(reduced.row(), whole.row(), rtol=TOL)


def test_committee_equals_separate_bitwise_on_the_cell_list(monkeypatch, frame):
    """With the device-step neighbour list (the torch cell list, what CUDA models use) the
    committee's members see the list their own evaluate builds: the same bits."""
    from mdband.testing.sezm import random_potential, small_config

    monkeypatch.setenv("MDBAND_NEIGHBOUR_LIST", "cell_list")
    models = [random_potential(small_config(), seed=s, gain=0.5, dtype="float64") for s in (4, 5)]
    assert all(m.neighbour_backend == "cell_list" for m in models)
    args = (frame.positions, frame.cell.array, frame.pbc, frame.numbers)
    separate = [pot.evaluate(*args) for pot in models]
    out = Committee(models).evaluate(*args)
    for got, ref in zip(out.results, separate):
        assert np.array_equal(got.forces, ref.forces) and got.energy == ref.energy
