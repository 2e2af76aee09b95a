"""Single-point parity: ``lmp`` with ``pair_style mdband`` equals ``Potential.evaluate``.

Energy, forces, virial, per-atom energies and per-atom virials, in float64, for the LJ model and
the two-layer message-passing model mp2 (whose ghost features cross ranks through the per-layer
exchange), on 1, 2 and 4 ranks, newton on and off, an orthogonal and a triclinic cell, and a
slab decomposed so that some ranks own no atoms (one of them no ghost atoms either).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lammps_harness import (
    DEVICE,
    ELEMENTS,
    NKTV2P_METAL,
    make_frame,
    read_dump,
    requires_lammps,
    results,
    run_lmp,
    write_data,
)

from mdband import load_model
from mdband.graph import build_edge_graph

pytestmark = requires_lammps

CELLS = {
    "ortho": dict(grid=(5, 5, 6), seed=1),
    "tri": dict(grid=(5, 5, 6), tilt=(0.2, -0.15, 0.1), seed=2),
    # atoms only at x < 12 Å of a 60 Å box: with 'processors P 1 1' ranks 1.. own nothing
    "slab": dict(grid=(16, 4, 4), keep_x=0.2, seed=3),
}
MODELS = ("lj", "mp2")
NEWTON = ("on", "off")

E_REL = 1e-10  # energy, relative
F_ABS = 1e-8  # forces, eV/Å
EA_ABS = 1e-10  # per-atom energies, eV
W_ABS = 1e-8  # virial, eV
WA_ABS = 1e-9  # per-atom virial, eV


def _case_script(name, data, model, newton, nprocs, slab, dtype="float64"):
    procs = f"processors {nprocs} 1 1" if slab and nprocs > 1 else ""
    vir = " ".join(f"$(c_vir[{k}]:%.17g)" for k in range(1, 7))
    sa = " ".join(f"c_sa[{k}]" for k in range(1, 7))
    return f"""
clear
units metal
atom_style atomic
boundary p p p
newton {newton}
{procs}
read_data {data}
pair_style mdband {model} dtype {dtype} device {DEVICE}
pair_coeff * * {" ".join(ELEMENTS)}
neighbor 1.0 bin
compute pe all pe/atom
compute sa all stress/atom NULL virial
compute vir all pressure NULL virial
thermo_style custom step pe c_vir[1]
dump d all custom 1 {name}.dump id fx fy fz c_pe {sa}
dump_modify d sort id format float %.17g
run 0
print "RESULT {name} $(pe:%.17g) {vir} $(vol:%.17g)"
undump d
"""


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    d = tmp_path_factory.mktemp("frames")
    out = {}
    for name, kw in CELLS.items():
        frame = make_frame(**kw)
        out[name] = (frame, write_data(d / f"{name}.data", frame))
    return out


@pytest.fixture(scope="module")
def references(frames, models):
    """mdband's own numbers for every (model, cell)."""
    refs = {}
    for m, path in models.items():
        pot = load_model(path, dtype="float64")
        for c, (frame, _) in frames.items():
            res = pot.evaluate(frame.positions, frame.cell, True, frame.species)
            # per-atom virial with the bridge's convention: each edge's −vec ⊗ g, half per atom
            g = build_edge_graph(frame.positions, frame.cell, True, pot.cutoff)
            vec = g.edge_vectors(torch.as_tensor(frame.positions), torch.as_tensor(frame.cell))
            types = torch.as_tensor(pot.types_of(frame.species))
            src, dst = torch.as_tensor(g.src), torch.as_tensor(g.dst)
            grad = pot.evaluate_edges(types, src, dst, vec).edge_grad
            a, b = [0, 1, 2, 0, 0, 1], [0, 1, 2, 1, 2, 2]
            w6 = -(vec[:, a] * grad[:, b]).detach()
            wa = torch.zeros(len(frame.positions), 6, dtype=torch.float64)
            wa.index_add_(0, dst, 0.5 * w6).index_add_(0, src, 0.5 * w6)
            refs[m, c] = (res, wa.numpy())
    return refs


@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_single_point_parity(nprocs, frames, models, references, tmp_path):
    script = ""
    cases = []
    for m in MODELS:
        for c, (_, data) in frames.items():
            for newton in NEWTON:
                name = f"{m}-{c}-newton{newton}"
                cases.append((name, m, c))
                script += _case_script(name, data, models[m], newton, nprocs, c == "slab")
    proc = run_lmp(script, tmp_path, nprocs=nprocs)
    got = results(proc.stdout)
    # one rank evaluates local atoms only, ghosts mapped to owners; more ranks exchange features
    assert ("ghost atoms mapped to their owners" in proc.stdout) == (nprocs == 1)
    voigt = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]
    for name, m, c in cases:
        res, wa_ref = references[m, c]
        assert name in got, f"{name}: no RESULT line\n{proc.stdout[-3000:]}"
        pe, *wp, vol = got[name]
        frame = frames[c][0]
        assert vol == pytest.approx(abs(np.linalg.det(frame.cell)), rel=1e-12)
        assert abs(pe - res.energy) <= E_REL * abs(res.energy), (name, pe, res.energy)
        w = np.array(wp) * vol / NKTV2P_METAL
        w_ref = np.array([res.virial[a, b] for a, b in voigt])
        assert np.max(np.abs(w - w_ref)) <= W_ABS, (name, w, w_ref)
        dump = read_dump(tmp_path / f"{name}.dump")
        n = len(frame.positions)
        assert dump["id"].astype(int).tolist() == list(range(1, n + 1)), name
        f = np.stack([dump["fx"], dump["fy"], dump["fz"]], axis=1)
        assert np.max(np.abs(f - res.forces)) <= F_ABS, (name, np.max(np.abs(f - res.forces)))
        assert np.max(np.abs(dump["c_pe"] - res.atom_energy)) <= EA_ABS, name
        # compute stress/atom reports −(per-atom virial) in pressure·volume units
        wa = -np.stack([dump[f"c_sa[{k}]"] for k in range(1, 7)], axis=1) / NKTV2P_METAL
        assert np.max(np.abs(wa - wa_ref)) <= WA_ABS, (name, np.max(np.abs(wa - wa_ref)))
    # the mp2 forces must depend on the exchanged features (the test is not vacuous)
    assert any("mp2" in name for name, _, _ in cases)


def test_float32_parity(frames, models, references, tmp_path):
    """dtype float32: the model runs in single precision; exchanged rows keep their values."""
    data = frames["tri"][1]
    script = "".join(
        _case_script(f"{m}-f32", data, models[m], "on", 2, False, dtype="float32") for m in MODELS
    )
    got = results(run_lmp(script, tmp_path, nprocs=2).stdout)
    for m in MODELS:
        res, _ = references[m, "tri"]
        pe = got[f"{m}-f32"][0]
        assert pe == pytest.approx(res.energy, rel=1e-6), m
        dump = read_dump(tmp_path / f"{m}-f32.dump")
        f = np.stack([dump["fx"], dump["fy"], dump["fz"]], axis=1)
        assert np.max(np.abs(f - res.forces)) <= 5e-6, (m, np.max(np.abs(f - res.forces)))
        assert np.max(np.abs(f - res.forces)) > 0.0  # it really ran in float32
