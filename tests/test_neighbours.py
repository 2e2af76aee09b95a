"""Neighbour lists that follow a trajectory (Verlet skin), host (vesin) and device (torch)."""

import numpy as np
import pytest
import torch
from ase.build import bulk

from mdband.neighbours import DeviceNeighbourList, HostNeighbourList


def edge_set(src, dst, shifts):
    rows = zip(np.asarray(src).tolist(), np.asarray(dst).tolist(), np.asarray(shifts).tolist())
    return {(s, d, tuple(sh)) for s, d, sh in rows}


def argon(seed=0):
    atoms = bulk("Ar", "fcc", a=5.3, cubic=True).repeat(3)
    atoms.rattle(0.1, seed=seed)
    atoms.pbc = (True, False, True)
    return atoms


def make(kind, cutoff, skin):
    if kind == "host":
        return HostNeighbourList(cutoff, skin)
    return DeviceNeighbourList(cutoff, skin, device="cpu")


def call(nl, kind, pos, cell, pbc):
    if kind == "host":
        return nl.edges(pos, cell, pbc)
    return nl.edges(torch.tensor(pos), torch.tensor(cell), pbc)


@pytest.mark.parametrize("kind", ["host", "device"])
def test_skin_gives_the_fresh_edge_set(kind):
    atoms = argon()
    cell, pbc = atoms.cell.array, atoms.pbc
    nl = make(kind, 5.0, 1.0)
    fresh = make(kind, 5.0, 0.0)
    rng = np.random.default_rng(1)
    pos = atoms.positions.copy()
    for _ in range(10):
        pos += rng.normal(scale=0.05, size=pos.shape)
        a = call(nl, kind, pos, cell, pbc)
        b = call(fresh, kind, pos, cell, pbc)
        assert edge_set(a.src, a.dst, a.shifts) == edge_set(b.src, b.dst, b.shifts)
    assert 1 <= nl.n_builds < 10 and fresh.n_builds == 10
    builds = nl.n_builds
    pos[0] += 0.6  # beyond skin / 2
    call(nl, kind, pos, cell, pbc)
    assert nl.n_builds == builds + 1
    call(nl, kind, pos, cell * 1.01, pbc)  # a new cell rebuilds too
    assert nl.n_builds == builds + 2


@pytest.mark.parametrize("kind", ["host", "device"])
def test_restore_reproduces_the_list(kind):
    atoms = argon(seed=2)
    cell, pbc = atoms.cell.array, atoms.pbc
    nl = make(kind, 5.0, 0.8)
    call(nl, kind, atoms.positions, cell, pbc)
    moved = atoms.positions + 0.1
    before = call(nl, kind, moved, cell, pbc)
    ref = nl.reference()
    again = make(kind, 5.0, 0.8)
    again.restore(ref)
    after = call(again, kind, moved, cell, pbc)
    for x, y in zip((before.src, before.dst, before.shifts), (after.src, after.dst, after.shifts)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))  # same edges, same order
    assert again.n_builds == 1


def test_device_list_matches_host_list():
    atoms = argon(seed=4)
    cell, pbc = atoms.cell.array, atoms.pbc
    host = call(make("host", 5.0, 0.5), "host", atoms.positions, cell, pbc)
    dev = call(make("device", 5.0, 0.5), "device", atoms.positions, cell, pbc)
    assert edge_set(host.src, host.dst, host.shifts) == edge_set(dev.src, dev.dst, dev.shifts)
