"""Shared helpers of the chunked-evaluation tests: the deepmd-kit parity fixtures' frames, edge
tensors of a frame, plans, an evaluation through the potential and float64 comparisons."""

from __future__ import annotations

import json
from pathlib import Path

import ase.io
import numpy as np
import torch

from mdband.graph import build_edge_graph
from mdband.model.chunking import plan_chunks, row_pointer
from mdband.model.factory import build_sezm, initialise_weights
from mdband.potential import Potential

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"
META = json.loads((FIX / "configs.json").read_text())
FRAMES = ase.io.read(FIX / META["structures"], index=":")
REL = 1e-12  # float64, chunked against unchunked


def tensors(pot, atoms):
    g = build_edge_graph(atoms.positions, atoms.cell.array, atoms.pbc, pot.cutoff)
    types = torch.as_tensor(pot.types_of(atoms.get_chemical_symbols()))
    ev = g.edge_vectors(torch.as_tensor(atoms.positions), torch.as_tensor(atoms.cell.array))
    return types, torch.as_tensor(g.src), torch.as_tensor(g.dst), ev.detach()


def plan_for(dst, n_atoms, max_edges):
    ptr, is_sorted = row_pointer(dst, n_atoms)
    return plan_chunks(ptr, max_edges, dst_sorted=is_sorted)


def evaluate(pot, types, src, dst, ev, plan=None, grad=True):
    out = pot.evaluate_edges(types, src, dst, ev, plan=plan, grad=grad)
    if not grad:
        return out.atom_energy.numpy(), None, None
    f, w = pot.assemble(out.edge_grad, ev, src, dst, int(types.shape[0]))
    return out.atom_energy.numpy(), f.numpy(), w.numpy()


def assert_close(got, ref):
    e, f, w = got
    e0, f0, w0 = ref
    scale = max(1.0, float(np.abs(e0).max()))
    np.testing.assert_allclose(e, e0, rtol=0, atol=REL * scale)
    assert abs(e.sum() - e0.sum()) <= REL * max(1.0, abs(e0.sum()))
    if f0 is not None:
        assert np.abs(f0).max() > 1e-6  # not trivially zero
        np.testing.assert_allclose(f, f0, rtol=0, atol=REL * np.abs(f0).max())
        np.testing.assert_allclose(w, w0, rtol=0, atol=REL * max(1.0, np.abs(w0).max()))


def sezm(cfg, seed=2, dtype="float64", **options):
    model = build_sezm(cfg, None, options)
    initialise_weights(model, seed=seed, gain=0.5)
    return Potential(model, kind="sezm", type_map=list(cfg["type_map"]), cutoff=cfg["rcut"],
                     config=cfg, dtype=dtype)  # fmt: skip
