"""EdgeGraph (vesin) against a brute-force neighbour enumeration."""

import itertools

import numpy as np
import pytest

from mdband.errors import StructureError
from mdband.graph import build_edge_graph


def brute(pos, cell, pbc, rc):
    reps = (
        [
            int(np.ceil(rc / np.abs(np.linalg.inv(cell).T[k]).sum() ** -1)) + 1 if pbc[k] else 0
            for k in range(3)
        ]
        if np.any(pbc)
        else [0, 0, 0]
    )
    out = set()
    for s in itertools.product(*[range(-r, r + 1) for r in reps]):
        shift = np.array(s) @ cell if np.any(pbc) else np.zeros(3)
        for i in range(len(pos)):
            for j in range(len(pos)):
                d = pos[j] + shift - pos[i]
                r2 = d @ d
                if 1e-10 < r2 < rc * rc:
                    out.add((j, i, tuple(int(x) for x in s)))
    return out


CASES = {
    "cubic": (np.eye(3) * 5.0, [True, True, True]),
    "triclinic": (np.array([[4.0, 0, 0], [1.3, 3.8, 0], [0.7, -0.9, 4.4]]), [True] * 3),
    "small_cell": (np.array([[2.1, 0, 0], [0.4, 2.5, 0], [0, 0.3, 2.2]]), [True] * 3),
    "mixed": (np.eye(3) * 4.0, [True, False, True]),
    "open": (np.zeros((3, 3)), [False] * 3),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_brute_force(name):
    cell, pbc = CASES[name]
    rng = np.random.default_rng(0)
    frac = rng.random((5, 3))
    pos = frac @ cell if np.any(pbc) else rng.random((5, 3)) * 4
    rc = 3.3
    g = build_edge_graph(pos, cell, pbc, rc)
    got = {(int(s), int(d), tuple(int(x) for x in sh)) for s, d, sh in zip(g.src, g.dst, g.shifts)}
    assert got == brute(pos, cell, np.array(pbc), rc)
    if name == "small_cell":
        assert any(s == d for s, d, _ in got)  # self images are kept


def test_bad_structures():
    with pytest.raises(StructureError, match="NaN"):
        build_edge_graph(np.array([[0, 0, np.nan]]), np.eye(3), True, 3.0)
    with pytest.raises(StructureError, match="zero volume"):
        build_edge_graph(np.zeros((2, 3)) + [[0, 0, 0], [1, 0, 0]], np.zeros((3, 3)), True, 3.0)
