"""The stages of a chunked evaluation: between forward and backward only each block's input x
(one node tensor per block) and the edge vectors are kept; the last stage (last block, readout,
energy head) does its backward in the forward, so it runs each chunk once, not twice, for the
cotangent callers announce (the sum of the atom energies, or of the first ``n_local``), and
every other derivative (weighted sums, ``create_graph``, a second backward) still equals the
unchunked one.

float64 throughout; chunked against unchunked to 1e-12 relative (test_chunked.py says why not
bitwise)."""

from __future__ import annotations

from collections import Counter

import ase
import numpy as np
import pytest
import torch
from chunk_helpers import FRAMES, plan_for, sezm, tensors

from mdband.model import block as block_module
from mdband.model import chunked
from mdband.model.chunking import plan_for_budget
from mdband.model.memory import kept_geometry_floats
from mdband.so3 import storage as st
from mdband.testing.sezm import small_config

REL = 1e-12


@pytest.fixture(autouse=True, params=[False, True], ids=["geometry-rebuilt", "geometry-cached"])
def geometry_cached(request, monkeypatch):
    """Every test twice: each stage rebuilds the edge geometry, or it is built once and kept
    (``chunked.CACHE_GEOMETRY``)."""
    monkeypatch.setattr(chunked, "CACHE_GEOMETRY", request.param)
    return request.param


@pytest.fixture
def calls(monkeypatch):
    """Counter of InteractionBlock.chunk_rows calls per block index."""
    seen: Counter = Counter()
    original = block_module.InteractionBlock.chunk_rows

    def counting(self, *args, **kwargs):
        seen[self.index] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(block_module.InteractionBlock, "chunk_rows", counting)
    return seen


def _setup(n_blocks=3, frame=0):
    cfg = small_config(l_schedule=(2,) * n_blocks, n_focus=2, n_atten_head=2)
    pot = sezm(cfg)
    for i, blk in enumerate(pot.model.descriptor.blocks):
        blk.index = i
    atoms = FRAMES[frame]
    return pot, atoms, *tensors(pot, atoms)


def _grad(pot, t, src, dst, ev, plan, weights=None, **kw):
    v = ev.clone().requires_grad_(True)
    e = pot.model(t, src, dst, v, plan=plan, **kw)
    total = e.sum() if weights is None else (weights * e).sum()
    (g,) = torch.autograd.grad(total, v)
    return e.detach().numpy(), g.numpy()


def _close(got, ref):
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=0, atol=REL * max(1.0, np.abs(b).max()))


@pytest.mark.parametrize("n_blocks", [1, 3])
def test_the_last_block_runs_once_per_chunk(calls, n_blocks):
    pot, atoms, t, src, dst, ev = _setup(n_blocks)
    ref = _grad(pot, t, src, dst, ev, None)
    calls.clear()  # the unchunked call never goes through chunk_rows
    plan = plan_for(dst, len(atoms), max(int(torch.bincount(dst).max()), src.shape[0] // 5))
    n = plan.n_chunks
    assert n >= 3
    got = _grad(pot, t, src, dst, ev, plan)
    _close(got, ref)
    # earlier blocks: forward without a graph, recomputed in the backward; the last: once
    assert calls == Counter({**{i: 2 * n for i in range(n_blocks - 1)}, n_blocks - 1: n})


def test_other_cotangents_recompute_and_stay_exact(calls):
    pot, atoms, t, src, dst, ev = _setup()
    w = torch.linspace(-1.0, 2.0, len(atoms), dtype=torch.float64)
    ref = _grad(pot, t, src, dst, ev, None, weights=w)
    plan = plan_for(dst, len(atoms), 1)  # one atom per chunk
    calls.clear()
    got = _grad(pot, t, src, dst, ev, plan, weights=w)
    _close(got, ref)
    n = plan.n_chunks
    assert calls[2] == 2 * n  # the announced gradients were not the asked ones: recomputed


def test_energy_rows_announce_a_partial_sum(calls):
    """LAMMPS' ghost atoms: the caller sums the first n_local energies only."""
    pot, atoms, t, src, dst, ev = _setup()
    n_local = len(atoms) - 3
    w = (torch.arange(len(atoms)) < n_local).to(torch.float64)
    ref = _grad(pot, t, src, dst, ev, None, weights=w)
    plan = plan_for(dst, len(atoms), 1)
    calls.clear()
    got = _grad(pot, t, src, dst, ev, plan, weights=w, energy_rows=n_local)
    _close(got, ref)
    assert calls[2] == plan.n_chunks  # not recomputed
    # through the potential's own entry point, which announces n_local
    calls.clear()
    out = pot.evaluate_edges(t, src, dst, ev, plan=plan, n_local=n_local)
    _close((out.atom_energy.numpy(), out.edge_grad.numpy()), ref)
    assert calls[2] == plan.n_chunks


def test_a_second_backward_recomputes():
    pot, atoms, t, src, dst, ev = _setup()
    ref = _grad(pot, t, src, dst, ev, None)[1]
    v = ev.clone().requires_grad_(True)
    e = pot.model(t, src, dst, v, plan=plan_for(dst, len(atoms), 1)).sum()
    (g1,) = torch.autograd.grad(e, v, retain_graph=True)
    (g2,) = torch.autograd.grad(2.0 * e, v)
    _close((g1.numpy(), g2.numpy()), (ref, 2.0 * ref))


def test_without_gradients_and_open_cell():
    pot, atoms, t, src, dst, ev = _setup(frame=3)  # a molecule (open boundaries)
    plan = plan_for(dst, len(atoms), 1)
    with torch.no_grad():
        e0 = pot.model(t, src, dst, ev).numpy()
        e1 = pot.model(t, src, dst, ev, plan=plan).numpy()
    _close((e1,), (e0,))
    ref = _grad(pot, t, src, dst, ev, None)
    _close(_grad(pot, t, src, dst, ev, plan), ref)


def test_edge_free_atoms_in_a_chunk():
    """An isolated atom (no edges) shares a chunk; its energy and zero force hold."""
    pot = sezm(small_config(l_schedule=(2, 2)))
    atoms = ase.Atoms("CHOH", positions=[[0, 0, 0], [1.0, 0, 0], [0, 1.1, 0], [30.0, 0, 0]])
    t, src, dst, ev = tensors(pot, atoms)
    ref = _grad(pot, t, src, dst, ev, None)
    for max_edges in (1, 4, 100):
        _close(_grad(pot, t, src, dst, ev, plan_for(dst, len(atoms), max_edges)), ref)


def kept_bytes(out: torch.Tensor) -> int:
    """Bytes of the distinct storages the autograd graph of ``out`` holds (saved tensors and
    the stages' announced gradients)."""
    seen, stack, done = {}, [out.grad_fn], set()

    def add(x):
        if isinstance(x, torch.Tensor):
            s = x.untyped_storage()
            seen[(s.data_ptr(), s.nbytes())] = s.nbytes()
        elif isinstance(x, (tuple, list)):
            for y in x:
                add(y)

    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in done:
            continue
        done.add(id(fn))
        for attr in dir(fn):
            if attr.startswith("_saved_") or attr in ("saved_tensors", "grads"):
                try:
                    add(getattr(fn, attr))
                except RuntimeError:  # a saved tensor of a node that was already run
                    pass
        stack.extend(f for f, _ in fn.next_functions)
    return sum(seen.values())


@pytest.mark.parametrize("options", [{}, dict(n_focus=2, n_atten_head=2, l_schedule=(3, 2, 1))])
def test_a_chunked_evaluation_keeps_one_node_tensor_per_block(options, geometry_cached):
    """Between forward and backward: every block's input, the last stage's x cotangent and
    the edge vectors (and their gradient, index permutation; with the geometry cached, its
    packed tensor): not the blocks' x1, attention terms or graphs. The estimate's kept bytes
    cover it."""
    cfg = small_config(**{"l_schedule": (2, 2, 2), "channels": 16, **options})
    pot = sezm(cfg)
    atoms = FRAMES[0]
    t, src, dst, ev = tensors(pot, atoms)
    N, E = len(atoms), int(src.shape[0])
    v = ev.clone().requires_grad_(True)
    e = pot.model(t, src, dst, v, plan=plan_for(dst, N, max(1, E // 6)))
    node = [st.dim_of(lb) * cfg["channels"] * 8 for lb in cfg["l_schedule"]]  # float64
    want = sum(node) + node[-1]
    got = kept_bytes(e) - E * (3 * 8 * 3 + 8)  # sorted vectors, their gradient, caller's; perm
    desc = pot.model.descriptor
    geo = kept_geometry_floats(desc) * 8  # per edge, float64
    assert (geo > 0) is geometry_cached
    if geometry_cached:
        width = 5 + desc.cfg.n_radial + st.band_width(desc.cfg.lmax)
        assert geo == 2 * 8 * width  # the geometry, and the last stage's gradient of it
        got -= E * geo
    assert 0.9 * want * N <= got <= 1.2 * want * N, (got / N, want)
    est = desc.memory_estimate(torch.float64)
    assert est.node_kept * N + est.edge_kept * E >= kept_bytes(e)


# ------------------------------------------------------------------ out of memory: smaller chunks
def _oom_after(monkeypatch, fails: int):
    """InteractionBlock.forward (the unchunked path) and chunk_rows raise torch's
    out-of-memory error on their first ``fails`` calls; returns the call counter."""
    seen = Counter()
    for name in ("forward", "chunk_rows"):
        original = getattr(block_module.InteractionBlock, name)

        def failing(self, *args, _original=original, **kwargs):
            seen["calls"] += 1
            if seen["calls"] <= fails:
                raise torch.OutOfMemoryError("simulated: CUDA out of memory")
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(block_module.InteractionBlock, name, failing)
    return seen


def _budget_potential(budget):
    pot = sezm(small_config(l_schedule=(2, 2)), memory_budget=budget)
    atoms = FRAMES[0]
    return pot, atoms, *tensors(pot, atoms)


def test_out_of_memory_runs_again_in_smaller_chunks(monkeypatch):
    pot, atoms, t, src, dst, ev = _budget_potential("1GB")  # the estimate fits: unchunked
    ref = pot.evaluate_edges(t, src, dst, ev)
    assert pot.last_chunks == 1
    seen = _oom_after(monkeypatch, 1)
    out = pot.evaluate_edges(t, src, dst, ev)
    desc = pot.model.descriptor
    cap = src.shape[0] // 2
    assert desc.chunk_edge_cap == cap and pot.last_chunks >= 2 and desc.last_chunk_edges <= cap
    _close((out.atom_energy.numpy(), out.edge_grad.numpy()),
           (ref.atom_energy.numpy(), ref.edge_grad.numpy()))  # fmt: skip
    assert seen["calls"] > 1
    # the potential keeps the cap: the next call chunks at once; another failure halves again
    seen.clear()
    pot.evaluate_edges(t, src, dst, ev)
    assert pot.last_chunks >= 2 and seen["calls"] > 0
    before = desc.last_chunk_edges
    _oom_after(monkeypatch, 1)
    pot.evaluate_edges(t, src, dst, ev)
    max_deg = int(torch.bincount(dst).max())  # an atom with more edges is a chunk alone
    assert desc.chunk_edge_cap == before // 2
    assert desc.last_chunk_edges <= max(before // 2, max_deg)


@pytest.mark.parametrize("case", ["fixed plan", "no budget", "always"])
def test_out_of_memory_that_chunks_cannot_help_is_raised(monkeypatch, case):
    pot, atoms, t, src, dst, ev = _budget_potential("off" if case == "no budget" else "1GB")
    plan = plan_for(dst, len(atoms), 10) if case == "fixed plan" else None
    seen = _oom_after(monkeypatch, 10**6 if case == "always" else 1)
    with pytest.raises(torch.OutOfMemoryError):
        pot.evaluate_edges(t, src, dst, ev, plan=plan)
    from mdband.potential import OOM_RETRIES

    assert seen["calls"] == (1 + OOM_RETRIES if case == "always" else 1)


def test_a_chunk_cap_forces_chunks_within_any_budget():
    pot, atoms, t, src, dst, ev = _budget_potential("1GB")
    N, E = len(atoms), int(src.shape[0])
    desc = pot.model.descriptor
    est = desc.memory_estimate(pot.dtype)
    assert plan_for_budget(est, 10**12, dst, N) is None  # fits: unchunked
    for cap in (E // 3, 1):
        plan = plan_for_budget(est, 10**12, dst, N, max_chunk_edges=cap)
        deg = torch.bincount(dst, minlength=N).tolist()
        for a0, a1, e0, e1 in plan.chunks():
            assert e1 - e0 <= cap or a1 - a0 == 1  # an atom with more edges is alone
        assert plan.max_chunk_edges == max(e1 - e0 for _, _, e0, e1 in plan.chunks())
        assert plan.max_chunk_edges <= max(cap, max(deg))
    assert not pot.would_chunk(N, E)
    desc.chunk_edge_cap = E // 2
    assert pot.would_chunk(N, E) and not pot.would_chunk(N, E // 2)
