"""Training a ZBL-bridged model: the loss's forward pass takes float64 edge vectors whatever
the training dtype (as Potential does), so the ZBL forces of close pairs (~1500 eV/Å) stay
exact in float32 training."""

from pathlib import Path

import numpy as np
import pytest
import torch
from ase import Atoms

import mdband
from mdband.fit.data import Frame, collate, to_graph
from mdband.fit.loss import predict

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"


@pytest.mark.parametrize("dtype,f_abs", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_predict_of_a_bridged_model(dtype, f_abs):
    pot = mdband.load_model(FIX / "zbl.pt", device="cpu", dtype="float64")
    ref = np.load(FIX / "zbl.npz")
    sym = [pot.type_map[t] for t in ref["atype_5"]]
    atoms = Atoms(sym, positions=ref["coord_5"], cell=ref["cell_5"], pbc=True)
    single = pot.evaluate(atoms.positions, atoms.cell.array, True, sym)
    frame = Frame(sym, atoms.positions, atoms.cell.array, atoms.pbc, 0.0, single.forces)
    batch = collate([to_graph(frame, {s: i for i, s in enumerate(pot.type_map)}, pot.cutoff)])
    model = pot.model.to(dtype)
    try:
        e, f, w = (t.detach() for t in predict(model, batch, dtype, False))
    finally:
        pot.model.to(torch.float64)
    assert np.abs(single.forces).max() > 1000.0
    np.testing.assert_allclose(f.numpy(), single.forces, rtol=0, atol=f_abs)
    assert float(e[0]) == pytest.approx(
        single.energy, rel=1e-7 if dtype == torch.float32 else 1e-12
    )
