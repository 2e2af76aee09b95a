"""A ZBL-bridged DPA4 model through ``pair_style mdband`` (fixtures: tests/fixtures/deepmd/zbl*).

The bridged model's source gate sums per-atom partials over edges that live on different ranks
(``GhostExchange.complete``), and its ZBL term gives each edge V/2 on its centre atom, so a pair
counts once however the two edges of it are spread. Without LAMMPS: the bridge's buffers on one
rank (ghosts mapped to owners) and on several (a stand-in backend), against deepmd-kit's numbers
(per-atom virials included). With LAMMPS: ``lmp`` on 1 and 2 ranks, the close pairs of the
compact frames straddling the rank boundary.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from lammps_harness import (
    DEVICE,
    NKTV2P_METAL,
    ghost_layout,
    read_dump,
    requires_lammps,
    results,
    run_lmp,
)

import mdband
from mdband.lammps import bridge
from mdband.lammps.exchange import GhostExchange, owner_backend

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"
VOIGT = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]
PERIODIC = {"compact_cubic": 4, "compact_triclinic": 5}  # fixture frame index
MASSES = {"H": 1.008, "C": 12.011, "O": 15.999}


@pytest.fixture(scope="module")
def pot():
    return mdband.load_model(FIX / "zbl.pt", device="cpu", dtype="float64")


@pytest.fixture(scope="module")
def ref():
    return np.load(FIX / "zbl.npz")


def frame(ref, i, type_map):
    return ref[f"coord_{i}"], ref[f"cell_{i}"], [type_map[t] for t in ref[f"atype_{i}"]]


def atom_virial6(ref, i):
    """deepmd-kit's per-atom virial (rows −Σ g ⊗ r / 2) in LAMMPS' Voigt order (−r ⊗ g)."""
    av = ref[f"atom_virial_{i}"].reshape(-1, 3, 3)
    return np.stack([av[:, b, a] for a, b in VOIGT], axis=1)


def test_complete_sums_every_copy_and_is_its_own_adjoint():
    owner = np.array([0, 1, 2, 0, 2, 2])  # rows 3..5 are ghosts of 0, 2, 2
    ex = GhostExchange(owner_backend(owner), n_all=6, n_local=3)
    x = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
    y = ex.complete(x)
    total = torch.zeros(3, 2, dtype=torch.float64).index_add(0, torch.as_tensor(owner), x.detach())
    torch.testing.assert_close(y.detach(), total[torch.as_tensor(owner)])
    w = torch.randn(6, 2, dtype=torch.float64)
    (grad,) = torch.autograd.grad((y * w).sum(), x)
    wt = torch.zeros(3, 2, dtype=torch.float64).index_add(0, torch.as_tensor(owner), w)
    torch.testing.assert_close(grad, wt[torch.as_tensor(owner)])
    assert ex.calls == 4  # reverse + forward, each way
    with pytest.raises(ValueError, match="expects 6 rows"):
        ex.complete(torch.zeros(5, 2))


def _compute(model, positions, cell, owner_types, x, owner, src, dst):
    n, n_all = len(positions), len(x)
    vec = np.ascontiguousarray(x[src] - x[dst])
    forces, eatom, vatom, out = np.zeros((n_all, 3)), np.zeros(n), np.zeros((n_all, 6)), np.zeros(7)
    ltypes = (owner_types[owner] + 1).astype(np.int32)
    model.compute(n, n_all - n, ltypes, src, dst, vec, forces, eatom, vatom, out)
    f, va = np.zeros((n, 3)), np.zeros((n, 6))
    np.add.at(f, owner, forces)  # LAMMPS' reverse communication of ghost forces
    np.add.at(va, owner, vatom)
    return out, f, eatom, va


@pytest.mark.parametrize("nprocs", [1, 2])
@pytest.mark.parametrize("name", sorted(PERIODIC))
def test_bridge_buffers_match_deepmd(pot, ref, name, nprocs):
    """One rank (ghosts mapped to owners) and several (per-layer exchange plus the gate's
    completion) give deepmd-kit's energy, forces, virial, per-atom energies and virials."""
    i = PERIODIC[name]
    pos, cell, sym = frame(ref, i, pot.type_map)
    x, owner, src, dst = ghost_layout(pos, cell, pot.cutoff)
    assert len(x) > len(pos)
    types = pot.types_of(sym)
    model = bridge.LammpsModel(
        pot, np.arange(len(pot.type_map)), {"nprocs": nprocs}, backend=owner_backend(owner)
    )
    out, f, eatom, va = _compute(model, pos, cell, types, x, owner, src, dst)
    assert model.last_path == ("owners" if nprocs == 1 else "exchange")
    e = float(ref[f"energy_{i}"])
    assert out[0] == pytest.approx(e, rel=1e-10)
    np.testing.assert_allclose(f, ref[f"forces_{i}"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(eatom, ref[f"atom_energy_{i}"], rtol=0, atol=1e-9)
    w = ref[f"virial_{i}"].reshape(3, 3)
    np.testing.assert_allclose(out[1:], [w[a, b] for a, b in VOIGT], rtol=0, atol=1e-8)
    np.testing.assert_allclose(va, atom_virial6(ref, i), rtol=0, atol=1e-8)


def test_gate_needs_its_completion(pot, ref, monkeypatch):
    """Without completing the ghosts' partial products the exchange path is wrong: the test
    above is not vacuous, and the completion runs once each way."""
    i = PERIODIC["compact_cubic"]
    pos, cell, sym = frame(ref, i, pot.type_map)
    x, owner, src, dst = ghost_layout(pos, cell, pot.cutoff)
    types = pot.types_of(sym)
    calls = []
    real = GhostExchange.complete_rows

    def spy(self, t):
        calls.append(t.shape)
        return real(self, t)

    monkeypatch.setattr(GhostExchange, "complete_rows", spy)
    model = bridge.LammpsModel(
        pot, np.arange(len(pot.type_map)), {"nprocs": 2}, backend=owner_backend(owner)
    )
    _, f, _, _ = _compute(model, pos, cell, types, x, owner, src, dst)
    assert calls == [(len(x), 2), (len(x), 2)]
    monkeypatch.setattr(GhostExchange, "complete_rows", lambda self, t: t.detach().clone())
    _, f_bad, _, _ = _compute(model, pos, cell, types, x, owner, src, dst)
    assert np.abs(f_bad - f).max() > 1e-3


# ---------------------------------------------------------------------------- lmp, 1 and 2 ranks
def write_data(path, pos, cell, sym, type_map):
    lines = ["mdband ZBL test frame", "", f"{len(pos)} atoms", f"{len(type_map)} atom types", ""]
    c = [[float(v) for v in row] for row in cell]
    lines += [f"0.0 {c[0][0]!r} xlo xhi", f"0.0 {c[1][1]!r} ylo yhi"]
    lines += [f"0.0 {c[2][2]!r} zlo zhi"]
    lines += [f"{c[1][0]!r} {c[2][0]!r} {c[2][1]!r} xy xz yz", "", "Masses", ""]
    lines += [f"{k + 1} {MASSES[s]}" for k, s in enumerate(type_map)]
    lines += ["", "Atoms # atomic", ""]
    for k, (s, p) in enumerate(zip(sym, pos)):
        x, y, z = (float(v) for v in p)
        lines.append(f"{k + 1} {type_map.index(s) + 1} {x!r} {y!r} {z!r}")
    path.write_text("\n".join(lines) + "\n")


def _script(name, data, procs, newton, type_map):
    vir = " ".join(f"$(c_vir[{k}]:%.17g)" for k in range(1, 7))
    sa = " ".join(f"c_sa[{k}]" for k in range(1, 7))
    return f"""
clear
units metal
atom_style atomic
newton {newton}
processors {procs}
read_data {data}
pair_style mdband {FIX / "zbl.pt"} dtype float64 device {DEVICE}
pair_coeff * * {" ".join(type_map)}
neighbor 0.5 bin
compute pe all pe/atom
compute sa all stress/atom NULL virial
compute vir all pressure NULL virial
thermo_style custom step pe
dump d all custom 1 {name}.dump id fx fy fz c_pe {sa}
dump_modify d sort id format float %.17g
run 0
print "RESULT {name} $(pe:%.17g) {vir} $(vol:%.17g)"
undump d
"""


@requires_lammps
@pytest.mark.parametrize("nprocs", [1, 2])
def test_lammps_single_point(pot, ref, nprocs, tmp_path):
    """``lmp`` gives the single-call numbers (and deepmd-kit's) on one and two ranks; on two,
    the cube is cut at x = 3 Å through its 0.42 Å O-H pair and the triclinic cell along c
    through its 0.40 Å C-O pair (across the periodic boundary too)."""
    cases, script = [], ""
    procs = {"compact_cubic": "2 1 1", "compact_triclinic": "1 1 2"}
    newtons = ("on", "off") if nprocs == 2 else ("on",)
    for name, i in PERIODIC.items():
        pos, cell, sym = frame(ref, i, pot.type_map)
        data = tmp_path / f"{name}.data"
        write_data(data, pos, cell, sym, pot.type_map)
        for newton in newtons:
            case = f"{name}-newton{newton}"
            cases.append((case, i))
            p = procs[name] if nprocs == 2 else "1 1 1"
            script += _script(case, data, p, newton, pot.type_map)
    proc = run_lmp(script, tmp_path, nprocs=nprocs, timeout=900)
    got = results(proc.stdout)
    for case, i in cases:
        pos, cell, sym = frame(ref, i, pot.type_map)
        single = pot.evaluate(pos, cell, True, sym)
        pe, *wp, vol = got[case]
        assert pe == pytest.approx(single.energy, rel=1e-10), case
        assert pe == pytest.approx(float(ref[f"energy_{i}"]), rel=1e-10), case
        w = np.array(wp) * vol / NKTV2P_METAL
        assert np.abs(w - [single.virial[a, b] for a, b in VOIGT]).max() <= 1e-8, case
        dump = read_dump(tmp_path / f"{case}.dump")
        f = np.stack([dump["fx"], dump["fy"], dump["fz"]], axis=1)
        assert np.abs(f - single.forces).max() <= 1e-8, case
        assert np.abs(f).max() > 100.0  # the close pairs' ZBL forces are there
        assert np.abs(dump["c_pe"] - single.atom_energy).max() <= 1e-9, case
        wa = -np.stack([dump[f"c_sa[{k}]"] for k in range(1, 7)], axis=1) / NKTV2P_METAL
        assert np.abs(wa - atom_virial6(ref, i)).max() <= 1e-8, case


def test_exchange_with_chunked_evaluation(pot, ref):
    """Several ranks and a memory budget that chunks each rank's atoms: the gate is completed
    once, before the chunks, and the numbers are the unchunked ones."""
    from mdband.model.factory import build_sezm
    from mdband.potential import Potential

    i = PERIODIC["compact_triclinic"]
    pos, cell, sym = frame(ref, i, pot.type_map)
    x, owner, src, dst = ghost_layout(pos, cell, pot.cutoff)
    est = pot.model.descriptor.memory_estimate(torch.float64)
    budget = est.chunked(len(x), len(src), len(src) // 4)
    model = build_sezm(pot.config, pot.model.state_dict(), {"memory_budget": budget})
    chunked = Potential(model, kind="sezm", type_map=pot.type_map, cutoff=pot.cutoff,
                        config=pot.config, dtype="float64")  # fmt: skip
    types = pot.types_of(sym)
    outs = []
    for p in (pot, chunked):
        lm = bridge.LammpsModel(
            p, np.arange(len(p.type_map)), {"nprocs": 2}, backend=owner_backend(owner)
        )
        outs.append(_compute(lm, pos, cell, types, x, owner, src, dst))
        assert lm.last_path == "exchange"
    assert chunked.last_chunks >= 3
    for a, b in zip(*outs):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12 * max(1.0, np.abs(a).max()))
