"""compute_listed: LAMMPS' full neighbour list taken once per build, positions every step.

The plugin takes this path on one rank with one model; here the Python side runs without
LAMMPS, with the ghost layout one rank has (see test_lammps_exchange.ghost_layout)."""

from __future__ import annotations

import numpy as np
import pytest
from lammps_harness import make_frame
from test_lammps_exchange import ELEMENTS, _sezm_potential, ghost_layout

from mdband.errors import MdbandError
from mdband.lammps import bridge
from mdband.lammps.exchange import owner_backend
from mdband.testing.mp import message_passing_potential

SKIN = 1.5  # Å beyond the cutoff: LAMMPS' list holds these pairs too
VOIGT = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]


@pytest.fixture(scope="module")
def frame():
    return make_frame(grid=(3, 3, 4), spacing=3.8, tilt=(0.1, 0.0, -0.1), seed=5)


def _potential(kind):
    if kind == "mp2":
        return message_passing_potential(type_map=ELEMENTS, cutoff=6.0, r_on=5.0)
    return _sezm_potential()


def _listed(model, frame, x, owner, src, dst, per_atom=True):
    """One compute_listed call; src/dst None: no list this step."""
    n, n_all = len(frame.positions), len(x)
    ltypes = frame.types[owner].astype(np.int32)
    forces, eatom, out = np.zeros((n_all, 3)), np.zeros(n), np.zeros(7)
    vatom = np.zeros((n_all, 9)) if per_atom else None
    model.compute_listed(n, n_all - n, ltypes, np.ascontiguousarray(x), src, dst, forces, eatom,
                         vatom, out)  # fmt: skip
    return out, forces, eatom


def _check(ref, out, forces, eatom, owner):
    """Results against Potential.evaluate; ghost rows' forces (several ranks: LAMMPS adds them
    to their owners) folded onto the owners."""
    n = len(eatom)
    folded = np.zeros((n, 3))
    np.add.at(folded, owner, forces)
    assert out[0] == pytest.approx(ref.energy, rel=1e-12)
    np.testing.assert_allclose(folded, ref.forces, rtol=0, atol=1e-11)
    np.testing.assert_allclose(eatom, ref.atom_energy, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out[1:], [ref.virial[a, b] for a, b in VOIGT], rtol=0, atol=1e-10)


@pytest.mark.parametrize("nprocs,path", [(1, "owners"), (2, "exchange")])
@pytest.mark.parametrize("per_atom", [True, False])
@pytest.mark.parametrize("kind", ["mp2", "sezm"])
def test_list_once_positions_every_step(kind, per_atom, nprocs, path, frame):
    """Steps between two builds send only positions: the kept pairs (skin included) give the
    same results as a fresh evaluation of the moved atoms, on one rank (ghosts as owners) and
    on several (the per-layer exchange); the list is copied once."""
    pot = _potential(kind)
    n = len(frame.positions)
    x, owner, src, dst = ghost_layout(frame.positions, frame.cell, pot.cutoff + SKIN)
    r = np.linalg.norm(x[src] - x[dst], axis=1)
    assert (r >= pot.cutoff).sum() > len(src) // 4  # the list reaches well past the cutoff
    model = bridge.LammpsModel(pot, pot.types_of(ELEMENTS), {"nprocs": nprocs},
                               backend=owner_backend(owner))  # fmt: skip
    ref = pot.evaluate(frame.positions, frame.cell, True, frame.species)
    out, forces, eatom = _listed(model, frame, x, owner, src, dst, per_atom)
    _check(ref, out, forces, eatom, owner)
    assert model.last_path == path and model.list_copies == 1
    if path == "owners":
        assert not forces[n:].any()
    image = x - frame.positions[owner]  # each row's periodic image shift, fixed between builds
    rng = np.random.default_rng(1)
    for _ in range(2):  # atoms move less than half the skin: LAMMPS keeps its list
        moved = frame.positions + rng.uniform(-0.3, 0.3, frame.positions.shape)
        ref = pot.evaluate(moved, frame.cell, True, frame.species)
        out, forces, eatom = _listed(model, frame, moved[owner] + image, owner, None, None,
                                     per_atom)  # fmt: skip
        _check(ref, out, forces, eatom, owner)
    assert model.list_copies == 1


def test_list_without_owner_map_takes_the_exchange(frame):
    """One rank but no owner map (a backend that fills no ghost rows): the pairs within the
    cutoff go through the per-layer exchange."""
    pot = _potential("mp2")
    x, owner, src, dst = ghost_layout(frame.positions, frame.cell, pot.cutoff + SKIN)
    model = bridge.LammpsModel(pot, pot.types_of(ELEMENTS), {"nprocs": 1},
                               backend=lambda rows, rev: None)  # fmt: skip
    _listed(model, frame, x, owner, src, dst)
    assert model.last_path == "exchange"


def test_first_step_without_a_list_is_an_error(frame):
    pot = _potential("mp2")
    x, owner, _, _ = ghost_layout(frame.positions, frame.cell, pot.cutoff)
    model = bridge.LammpsModel(pot, pot.types_of(ELEMENTS), {"nprocs": 1},
                               backend=owner_backend(owner))  # fmt: skip
    with pytest.raises(MdbandError, match="no neighbour list"):
        _listed(model, frame, x, owner, None, None)
