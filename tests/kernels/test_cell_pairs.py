"""cell_pairs (the cell list's pair kernels) against the torch candidate path: same tensors."""

import numpy as np
import pytest
import torch

from mdband.cell_list import cell_list_edges
from mdband.kernels import _common as cm
from mdband.kernels import cell_pairs, tuning

TRICLINIC = np.array([[4.0, 0, 0], [1.3, 3.8, 0], [0.7, -0.9, 4.4]])
CASES = {
    "cubic": (np.eye(3) * 5.0, (True, True, True)),
    "triclinic": (TRICLINIC, (True, True, True)),
    "thinner_than_cutoff": (np.array([[2.1, 0, 0], [0.4, 2.5, 0], [0, 0.3, 2.2]]), (True,) * 3),
    "mixed": (np.eye(3) * 4.0, (True, False, True)),
    "slab_triclinic": (TRICLINIC, (True, True, False)),
    "wire_triclinic": (TRICLINIC, (False, False, True)),
    "open": (np.zeros((3, 3)), (False, False, False)),
}


def structure(cell, pbc, n, seed):
    rng = np.random.default_rng(seed)
    pos = rng.random((n, 3)) @ cell if any(pbc) else rng.random((n, 3)) * 6.0
    return pos + rng.normal(scale=2.0, size=(n, 3))  # unwrapped: atoms outside the cell


def both_paths(pos, cell, pbc, cutoff, device, **kw):
    """(kernels, torch path) of cell_list_edges on ``device``."""
    p, c = torch.tensor(pos, device=device), torch.tensor(cell, device=device)
    with cm.force_triton():
        assert cell_pairs.applies(device, 125)
        got = cell_list_edges(p, c, pbc, cutoff, **kw)
    with cm.force_backend("reference"):
        assert not cell_pairs.applies(device, 125)
        ref = cell_list_edges(p, c, pbc, cutoff, **kw)
    return got, ref


def assert_same(got, ref):
    for a, b in zip(got, ref):
        assert a.dtype == b.dtype == torch.int64
        assert a.shape == b.shape
        assert torch.equal(a.cpu(), b.cpu())  # same pairs in the same order


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("n,cutoff", [(1, 3.3), (7, 1.7), (7, 3.3), (20, 2.5)])
def test_kernels_equal_the_torch_path(kdev, name, n, cutoff):
    cell, pbc = CASES[name]
    got, ref = both_paths(structure(cell, pbc, n, seed=n), cell, pbc, cutoff, kdev)
    assert_same(got, ref)
    if n > 1 and cutoff > 2:
        assert ref[0].shape[0] > 0  # the case has pairs to compare


@pytest.mark.parametrize("bins_per_cutoff", [1, 3])
def test_other_stencils(kdev, bins_per_cutoff):
    cell, pbc = CASES["triclinic"]
    pos = structure(cell, pbc, 12, seed=3)
    got, ref = both_paths(pos, cell, pbc, 3.0, kdev, bins_per_cutoff=bins_per_cutoff)
    assert_same(got, ref)
    assert ref[0].shape[0] > 0


def test_coincident_atoms_and_no_pairs(kdev):
    pos = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [2.0, 1.0, 1.0], [9.0, 9.0, 9.0]])
    got, ref = both_paths(pos, np.zeros((3, 3)), (False,) * 3, 1.5, kdev)
    assert_same(got, ref)
    pairs = set(zip(got[0].tolist(), got[1].tolist()))
    assert pairs == {(0, 2), (2, 0), (1, 2), (2, 1)}  # the coincident pair is dropped
    got, ref = both_paths(pos, np.zeros((3, 3)), (False,) * 3, 0.5, kdev)
    assert_same(got, ref)
    assert got[0].shape == (0,) and got[2].shape == (0, 3)


def test_switch_and_limits(kdev):
    with cm.force_triton():
        assert cell_pairs.applies(kdev, cell_pairs.MAX_STENCIL)
        assert not cell_pairs.applies(kdev, cell_pairs.MAX_STENCIL + 1)  # torch path
        with tuning.override(cell_pairs={"kernels": "torch"}):
            assert not cell_pairs.applies(kdev, 125)
        with pytest.raises(ValueError, match="CellPairsTuning.kernels"):
            with tuning.override(cell_pairs={"kernels": "fast"}):
                pass


def test_cpu_default_is_the_torch_path():
    assert not cell_pairs.applies(torch.device("cpu"), 125)


@pytest.mark.parametrize("name", ["triclinic", "mixed"])
def test_bins_fuller_than_a_tile(kdev, name):
    """Tiles of two candidates per slot: most bins take several steps, rows stay in order."""
    cell, pbc = CASES[name]
    with tuning.override(cell_pairs={"width": 2}):
        got, ref = both_paths(structure(cell, pbc, 24, seed=5), cell, pbc, 3.0, kdev)
    assert_same(got, ref)
    assert ref[0].shape[0] > 24
