"""The torch cell list (the device neighbour list's code path) against vesin's edge set."""

import numpy as np
import pytest
import torch

from mdband.cell_list import cell_list_edges
from mdband.graph import build_edge_graph

TRICLINIC = np.array([[4.0, 0, 0], [1.3, 3.8, 0], [0.7, -0.9, 4.4]])
CASES = {
    "cubic": (np.eye(3) * 5.0, (True, True, True)),
    "triclinic": (TRICLINIC, (True, True, True)),
    "small_cell": (np.array([[2.1, 0, 0], [0.4, 2.5, 0], [0, 0.3, 2.2]]), (True, True, True)),
    "mixed": (np.eye(3) * 4.0, (True, False, True)),
    "slab_triclinic": (TRICLINIC, (True, True, False)),
    "wire_triclinic": (TRICLINIC, (False, False, True)),
    "open_with_cell": (TRICLINIC, (False, False, False)),
    "open": (np.zeros((3, 3)), (False, False, False)),
}


def edge_set(src, dst, shifts):
    return set(
        zip(
            np.asarray(src).tolist(),
            np.asarray(dst).tolist(),
            map(tuple, np.asarray(shifts).tolist()),
        )
    )


def structure(cell, pbc, n, seed):
    rng = np.random.default_rng(seed)
    if any(pbc):
        pos = rng.random((n, 3)) @ cell
    else:
        pos = rng.random((n, 3)) * 6.0
    return pos + rng.normal(scale=2.0, size=(n, 3))  # unwrapped: atoms outside the cell


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("n", [1, 7, 60])
@pytest.mark.parametrize("cutoff", [1.7, 3.3, 7.5])
def test_same_edge_set_as_vesin(name, n, cutoff):
    cell, pbc = CASES[name]
    pos = structure(cell, pbc, n, seed=n)
    ref = build_edge_graph(pos, cell, pbc, cutoff)
    src, dst, shifts = cell_list_edges(torch.tensor(pos), torch.tensor(cell), pbc, cutoff)
    assert src.dtype == dst.dtype == shifts.dtype == torch.int64
    got = edge_set(src, dst, shifts)
    assert len(got) == src.shape[0]  # no pair twice
    assert got == edge_set(ref.src, ref.dst, ref.shifts)
    assert bool((dst[1:] >= dst[:-1]).all())  # sorted by destination
    if name == "small_cell" and n == 1 and cutoff > 2.5:
        assert src.shape[0] > 0 and bool((src == dst).all())  # self images only


@pytest.mark.parametrize("bins_per_cutoff", [1, 2, 3])
def test_bins_and_batches_change_nothing(bins_per_cutoff):
    cell, pbc = CASES["triclinic"]
    pos = torch.tensor(structure(cell * 2, pbc, 150, seed=3))
    ref = cell_list_edges(pos, torch.tensor(cell * 2), pbc, 3.0)
    got = cell_list_edges(
        pos, torch.tensor(cell * 2), pbc, 3.0, bins_per_cutoff=bins_per_cutoff, max_candidates=500
    )
    assert edge_set(*got) == edge_set(*ref)
    if bins_per_cutoff == 2:  # same bins: the batched result is the same list, in order
        for a, b in zip(got, ref):
            assert torch.equal(a, b)


def test_vectors_match_the_edge_convention():
    cell, pbc = CASES["small_cell"]
    pos = structure(cell, pbc, 5, seed=1)
    src, dst, shifts = cell_list_edges(torch.tensor(pos), cell, pbc, 4.0)
    vec = pos[src] + shifts.numpy() @ cell - pos[dst]
    r = np.linalg.norm(vec, axis=1)
    assert r.max() < 4.0 and r.min() > 1e-5


def test_empty_and_far_apart():
    empty = cell_list_edges(torch.zeros(0, 3, dtype=torch.float64), None, False, 3.0)
    assert all(t.shape[0] == 0 for t in empty)
    gas = torch.tensor([[0.0, 0, 0], [50.0, 0, 0], [0, 80.0, 3.0]], dtype=torch.float64)
    src, _, _ = cell_list_edges(gas, None, False, 3.0)
    assert src.shape[0] == 0
    coincident = torch.tensor([[1.0, 1, 1], [1.0, 1, 1]], dtype=torch.float64)
    assert cell_list_edges(coincident, None, False, 3.0)[0].shape[0] == 0


def test_host_cell_and_cached_frames_change_nothing():
    """The host copy of the cell gives the same list; frames and grids cached for one cell
    are not reused for another (alternating cells, same atom count)."""
    pos = structure(TRICLINIC, (True, True, True), 40, seed=2)
    cells = [TRICLINIC, TRICLINIC * 1.1, TRICLINIC]
    for cell in cells + cells:
        ref = build_edge_graph(pos, cell, True, 3.3)
        want = edge_set(ref.src, ref.dst, ref.shifts)
        plain = cell_list_edges(torch.tensor(pos), torch.tensor(cell), True, 3.3)
        hosted = cell_list_edges(torch.tensor(pos), torch.tensor(cell), True, 3.3, host_cell=cell)
        assert edge_set(*plain) == want
        for a, b in zip(plain, hosted):
            assert torch.equal(a, b)
