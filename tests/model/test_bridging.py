"""ZBL zone bridging (deepmd-kit's ``bridging_method: "zbl"``, mdband.model.bridging).

Parity with deepmd-kit 3.2.0 on the fixtures of ``tests/fixtures/make_zbl_fixtures.py``: frames
0-3 of structures.extxyz and three compact frames (periodic cube, periodic triclinic, open
molecule) with pairs inside r_inner and inside the [r_inner, r_outer] window. Also: band ==
dense, float32 against float64, finite differences through the window, chunked and fused
evaluations, the canonical ``linear_ener`` spelling, and refusals by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from chunk_helpers import assert_close, evaluate, plan_for, sezm, tensors

import mdband
from mdband.config import SeZMConfig
from mdband.errors import UnsupportedModelError
from mdband.io.deepmd import unwrap_bridged_composition
from mdband.io.deepmd_params import config_from_deepmd
from mdband.kernels import _common as cm
from mdband.kernels import force_triton
from mdband.model import bridging
from mdband.testing.sezm import small_config

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"
NAMES = ("zbl", "zbl_scatter")
N_FRAMES = 7  # 4 of structures.extxyz, 3 of zbl_structures.extxyz
COMPACT = (4, 5, 6)
VOIGT = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]


def ref_of(name):
    return np.load(FIX / f"{name}.npz")


def frame(ref, i, type_map):
    sym = [type_map[t] for t in ref[f"atype_{i}"]]
    return ref[f"coord_{i}"], ref[f"cell_{i}"], ref[f"pbc_{i}"], sym


def run(pot, ref, i):
    pos, cell, pbc, sym = frame(ref, i, pot.type_map)
    return pot.evaluate(pos, cell, pbc, sym)


def check(res, ref, i, e_rel, f_abs, v_abs):
    e = float(ref[f"energy_{i}"])
    assert abs(res.energy - e) <= e_rel * max(abs(e), 1.0), (i, res.energy, e)
    np.testing.assert_allclose(res.forces, ref[f"forces_{i}"], rtol=0, atol=f_abs)
    np.testing.assert_allclose(res.virial.reshape(9), ref[f"virial_{i}"], rtol=0, atol=v_abs)
    ea = ref[f"atom_energy_{i}"]
    np.testing.assert_allclose(res.atom_energy, ea, rtol=0, atol=e_rel * np.abs(ea).max())


def test_fixtures_cover_the_window():
    """The compact frames hold pairs closer than r_inner and pairs inside the window, and the
    ZBL forces there are large: the parity below is not a test of the far field only."""
    for name in NAMES:
        ref = ref_of(name)
        meta = json.loads(str(ref["meta"]))
        assert meta["model_params"]["bridging_method"].lower() == "zbl"
        counts = meta["pairs_inside_r_inner_and_in_window"]
        assert all(inside > 0 and window > 0 for inside, window in counts[4:]), counts
        assert max(np.abs(ref[f"forces_{i}"]).max() for i in COMPACT) > 100.0


@pytest.mark.parametrize("layout", ["band", "dense"])
@pytest.mark.parametrize("name", NAMES)
def test_parity_float64(name, layout):
    pot = mdband.load_model(FIX / f"{name}.pt", dtype="float64", rotation_layout=layout)
    assert pot.rotation_layout == layout
    ref = ref_of(name)
    for i in range(N_FRAMES):
        check(run(pot, ref, i), ref, i, e_rel=1e-10, f_abs=1e-8, v_abs=1e-8)


@pytest.mark.parametrize("name", NAMES)
def test_band_equals_dense(name):
    band = mdband.load_model(FIX / f"{name}.pt", dtype="float64", rotation_layout="band")
    dense = mdband.load_model(FIX / f"{name}.pt", dtype="float64", rotation_layout="dense")
    ref = ref_of(name)
    for i in (4, 5):
        a, b = run(band, ref, i), run(dense, ref, i)
        assert a.energy == pytest.approx(b.energy, rel=1e-13)
        np.testing.assert_allclose(a.forces, b.forces, rtol=0, atol=1e-11)


#: float32 against float64: the ZBL term is evaluated in float64 from float64 edge vectors
#: (close pairs carry ~1500 eV/Å), so what is left is the network's float32 rounding; the random
#: network of zbl_scatter (forces up to 16 eV/Å) is 1.2e-5 eV/Å off on frame 0 already, where no
#: pair comes near the window
F32_ABS = {"zbl": 1e-5, "zbl_scatter": 5e-5}


@pytest.mark.parametrize("name", NAMES)
def test_float32_against_float64(name):
    p64 = mdband.load_model(FIX / f"{name}.pt", dtype="float64")
    p32 = mdband.load_model(FIX / f"{name}.pt", dtype="float32")
    assert p32.edge_dtype == torch.float64  # the leaf the model differentiates is float64
    ref = ref_of(name)
    for i in (0, 4, 5):  # far field; close pairs of 290 and 1500 eV/Å
        a, b = run(p64, ref, i), run(p32, ref, i)
        np.testing.assert_allclose(b.forces, a.forces, rtol=0, atol=F32_ABS[name])
        assert abs(b.energy - a.energy) <= 1e-5 * max(1.0, abs(a.energy))
        np.testing.assert_allclose(b.virial, a.virial, rtol=0, atol=10 * F32_ABS[name])


@pytest.mark.parametrize(
    "part", ["source_gate", "clamp_vectors", "pair_energy"], ids=["gate", "clamp", "zbl"]
)
def test_each_part_moves_the_result(monkeypatch, part):
    """Without the gate, the clamp or the ZBL term the compact frames are off by far more than
    the parity tolerances: each part is pinned by the fixtures."""
    if part == "source_gate":
        monkeypatch.setattr(bridging.ZBLBridging, part, lambda s, r, *a, **k: torch.ones_like(r))
    elif part == "clamp_vectors":
        monkeypatch.setattr(
            bridging.ZBLBridging,
            part,
            lambda s, v, eps: (v, torch.sqrt((v * v).sum(-1) + eps * eps)),
        )
    else:
        monkeypatch.setattr(
            bridging.ZBLBridging, part, lambda s, t, a, b, v, n: v.new_zeros(n).double()
        )
    pot = mdband.load_model(FIX / "zbl.pt", dtype="float64")
    ref = ref_of("zbl")
    assert np.abs(run(pot, ref, 4).forces - ref["forces_4"]).max() > 1e-2


def test_canonical_linear_ener_spelling(tmp_path):
    """deepmd-kit's canonical composition of the same model (what ``bridging_method`` expands
    to, taken from the fixture's meta) loads to the same numbers."""
    ref = ref_of("zbl")
    canonical = json.loads(str(ref["meta"]))["canonical_model_params"]
    assert canonical["type"] == "linear_ener"
    ckpt = torch.load(FIX / "zbl.pt", weights_only=True)
    ckpt["model"]["_extra_state"] = dict(ckpt["model"]["_extra_state"], model_params=canonical)
    torch.save(ckpt, tmp_path / "canonical.pt")
    pot = mdband.load_model(tmp_path / "canonical.pt", dtype="float64")
    assert pot.config["bridging"] == "zbl"
    assert (pot.config["bridging_r_inner"], pot.config["bridging_r_outer"]) == (0.55, 0.95)
    assert pot.config == mdband.load_model(FIX / "zbl.pt", dtype="float64").config
    check(run(pot, ref, 4), ref, 4, e_rel=1e-10, f_abs=1e-8, v_abs=1e-8)


def _params(**model):
    base = {
        "type": "dpa4",
        "type_map": ["H", "C", "O"],
        "descriptor": {"type": "dpa4", "channels": 8, "lmax": 2, "n_blocks": 1},
        "fitting_net": {"type": "dpa4_ener"},
    }
    base.update(model)
    return base


@pytest.mark.parametrize(
    "model,option",
    [
        ({"bridging_method": "lj"}, "model.bridging_method"),
        ({"bridging_method": ""}, "model.bridging_method"),
        ({"bridging_method": True}, "model.bridging_method"),
        ({"bridging_method": "zbl", "bridging_r_inner": 0.9}, "bridging_r_inner/bridging_r_outer"),
        ({"bridging_method": "zbl", "bridging_r_outer": "0.8"}, "model.bridging_r_outer"),
        ({"bridging_method": "zbl", "type_map": ["H", "Xx", "O"]}, "type_map"),
        (
            {
                "bridging_method": "zbl",
                "spin": {"scheme": "native", "use_spin": [False, True, True]},
            },
            "model.bridging_method",
        ),
    ],
)
def test_refused_by_name(model, option):
    with pytest.raises(UnsupportedModelError) as err:
        config_from_deepmd(_params(**model), 1.2)
    assert err.value.option == option


def test_bridged_spin_config_refused():
    """mdband's own config refuses ZBL with a spin section (model files, not only imports)."""
    base = small_config(bridging="zbl")
    with pytest.raises(UnsupportedModelError, match="spin models"):
        SeZMConfig.from_dict({**base, "spin": {"scheme": "native", "use_spin": [0, 1, 1]}})


def test_radii_default_and_case():
    cfg = config_from_deepmd(_params(bridging_method="ZBL"), 1.2)
    assert (cfg.bridging, cfg.bridging_r_inner, cfg.bridging_r_outer) == ("zbl", 0.5, 0.8)
    off = config_from_deepmd(_params(bridging_method="None", bridging_r_inner=3.0), 1.2)
    assert off.bridging == "none"
    assert not {"bridging", "bridging_r_inner"} & set(off.to_dict())  # hashes stay as they were


@pytest.mark.parametrize(
    "composition",
    [
        {"weights": "mean"},
        {"models": [{"type": "dpa4"}, {"type": "pairtab"}]},
        {"models": [{"type": "dpa4"}, {"type": "inner_potential"}, {"type": "inner_potential"}]},
    ],
)
def test_other_linear_compositions_refused(composition):
    canonical = {
        "type": "linear_ener",
        "type_map": ["H", "C", "O"],
        "weights": "sum",
        "models": [_params(), {"type": "inner_potential", "mode": "zbl"}],
        **composition,
    }
    with pytest.raises(UnsupportedModelError):
        unwrap_bridged_composition(canonical)


def test_window_functions():
    """The clamp is C³ with r̃ = r_in below the window and r̃ = r above it; the switch is C³,
    0 below and 1 above (deepmd-kit's septic polynomials)."""
    r_in, r_out = 0.5, 0.8
    r = torch.linspace(0.3, 1.0, 7001, dtype=torch.float64, requires_grad=True)
    rc = bridging.clamp_length(r, r_in, r_out)
    w = bridging.switch(r, r_in, r_out)
    (drc,) = torch.autograd.grad(rc.sum(), r)
    (dw,) = torch.autograd.grad(w.sum(), r)
    below, above = r.detach() <= r_in, r.detach() >= r_out
    assert torch.all(rc[below] == r_in) and torch.equal(rc[above], r[above])
    assert torch.all(w[below] == 0) and torch.all(w[above] == 1)
    assert torch.all((w >= 0) & (w <= 1)) and torch.all(torch.diff(w) >= 0)
    assert torch.all(torch.diff(rc) >= 0)
    # the derivatives join continuously at both radii (step 1e-4 Å: jumps would be O(1))
    assert torch.max(torch.abs(torch.diff(drc))) < 1e-2
    assert torch.max(torch.abs(torch.diff(dw))) < 1e-2


def test_zbl_pair_energy_closed_form():
    """V(r) of an O-H pair against the ZBL formula written out (k_e, a₀ and the universal
    screening of Ziegler, Biersack and Littmark)."""
    r = torch.tensor([0.3, 0.7, 1.5], dtype=torch.float64)
    z = torch.full_like(r, 8.0), torch.full_like(r, 1.0)
    a = 0.88534 * 0.5291772109 / (8.0**0.23 + 1.0**0.23)
    x = r.numpy() / a
    phi = (
        0.18175 * np.exp(-3.1998 * x)
        + 0.50986 * np.exp(-0.94229 * x)
        + 0.28022 * np.exp(-0.4029 * x)
        + 0.028171 * np.exp(-0.20162 * x)
    )
    want = 14.3996 * 8.0 / r.numpy() * phi
    np.testing.assert_allclose(bridging.zbl_energy(r, *z).numpy(), want, rtol=1e-14)


def test_finite_differences_through_the_window():
    """Forces against central differences of the energy along random displacements of every
    atom, while an O-H pair of the compact molecule crosses the window [0.5, 0.8] Å (clamp,
    gate and ZBL all varying), float64."""
    pot = mdband.load_model(FIX / "zbl_scatter.pt", dtype="float64")
    ref = ref_of("zbl_scatter")
    pos0, _, _, sym = frame(ref, 6, pot.type_map)
    u = pos0[1] - pos0[0]
    u = u / np.linalg.norm(u)
    rng = np.random.default_rng(7)
    h = 1e-4  # fourth-order differences: truncation ~h⁴, rounding ~1e-16·E/h

    def energy(x):
        return pot.evaluate(x, None, False, sym).energy

    for r in (0.45, 0.52, 0.65, 0.78, 0.82):
        pos = pos0.copy()
        pos[1] = pos[0] + r * u
        forces = pot.evaluate(pos, None, False, sym).forces
        d = rng.normal(size=pos.shape)
        d[1] += 3.0 * u  # the pair's own stretch dominates the step
        e = [energy(pos + k * h * d) for k in (-2, -1, 1, 2)]
        slope = -(e[0] - 8 * e[1] + 8 * e[2] - e[3]) / (12 * h)
        work = float(np.sum(forces * d))
        scale = max(1.0, float(np.abs(forces).max() * np.abs(d).sum()))
        assert abs(slope - work) <= 1e-8 * scale, (r, slope, work)


@pytest.mark.parametrize("cached", [False, True], ids=["geometry-rebuilt", "geometry-cached"])
def test_chunked_equals_unchunked(monkeypatch, cached):
    """The gate comes from all edges and rides with each chunk's edge vectors (and in the
    packed geometry when ``chunked.CACHE_GEOMETRY`` keeps it)."""
    import ase

    from mdband.model import chunked

    monkeypatch.setattr(chunked, "CACHE_GEOMETRY", cached)
    pot = mdband.load_model(FIX / "zbl_scatter.pt", dtype="float64")
    ref = ref_of("zbl_scatter")
    pos, cell, pbc, sym = frame(ref, 4, pot.type_map)
    atoms = ase.Atoms(sym, positions=pos, cell=cell, pbc=pbc)
    t, src, dst, ev = tensors(pot, atoms)
    whole = evaluate(pot, t, src, dst, ev)
    assert_close(evaluate(pot, t, src, dst, ev, plan_for(dst, len(atoms), len(src) // 3)), whole)
    assert pot.last_chunks > 2


def test_padded_step_changes_nothing():
    """The CUDA-graph step's padding edges (k → k at 1.5 rcut; here its eager path) carry no
    ZBL energy and a neutral gate factor."""
    from mdband.graph import build_edge_graph
    from mdband.step_graph import StepGraphs

    pot = mdband.load_model(FIX / "zbl_scatter.pt", dtype="float64")
    ref = ref_of("zbl_scatter")
    pos, cell, pbc, sym = frame(ref, 5, pot.type_map)
    g = build_edge_graph(pos, cell, pbc, pot.cutoff)
    runner = StepGraphs(pot, capture=False)
    atom_e, forces, virial = runner.run(pot.types_of(sym), g.src, g.dst, g.shifts, pos, cell)
    step = next(iter(runner.steps.values()))
    assert step.capacity > g.n_edges
    plain = pot.evaluate(pos, cell, pbc, sym)
    np.testing.assert_allclose(atom_e.numpy(), plain.atom_energy, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(forces.numpy(), plain.forces, rtol=0, atol=1e-10)
    np.testing.assert_allclose(virial.numpy(), plain.virial, rtol=0, atol=1e-10)


BRIDGED = dict(bridging="zbl", bridging_r_inner=0.55, bridging_r_outer=0.95)
MOLECULE = (
    np.array(
        [[0.0, 0.0, 0.0], [0.45, 0.1, 0.0], [0.3, 0.7, 0.2], [1.3, 0.2, 0.4], [0.9, 1.4, 0.1]]
    ),
    ["O", "H", "C", "O", "H"],
)


@pytest.mark.parametrize("options", [{}, {"n_atten_head": 0, "radial_so2_mode": "none"}])
def test_fused_ops_match_the_torch_path(options):
    """The fused ops (their torch references here; CUDA runs the kernels) read the gate through
    the environment-seed sums, the zonal GIE and the aggregation's env: same numbers as the
    torch modules."""
    cfg = small_config(**BRIDGED, **options)
    got = sezm(cfg, kernels="ops").evaluate(*MOLECULE[:1], None, False, MOLECULE[1])
    ref = sezm(cfg, kernels="torch").evaluate(*MOLECULE[:1], None, False, MOLECULE[1])
    assert got.energy == pytest.approx(ref.energy, rel=1e-12)
    np.testing.assert_allclose(got.forces, ref.forces, rtol=0, atol=1e-10)


@pytest.mark.skipif(
    not (cm.TRITON_AVAILABLE and (torch.cuda.is_available() or cm.interpret_mode())),
    reason="needs Triton with CUDA or TRITON_INTERPRET=1",
)
def test_triton_kernels_with_the_gate():
    """Every fused op on its Triton kernel (the interpreter on the CPU), bridged."""
    cfg = small_config(**BRIDGED, channels=4, n_radial=4, l_schedule=(2,), mixing_layers=1)
    ref = sezm(cfg, kernels="torch").evaluate(*MOLECULE[:1], None, False, MOLECULE[1])
    pot = sezm(cfg, kernels="ops")
    with force_triton():
        got = pot.evaluate(*MOLECULE[:1], None, False, MOLECULE[1])
    assert got.energy == pytest.approx(ref.energy, rel=1e-12)
    np.testing.assert_allclose(got.forces, ref.forces, rtol=0, atol=1e-10)


def test_model_file_keeps_the_bridging(tmp_path):
    pot = mdband.load_model(FIX / "zbl.pt", dtype="float64")
    pot.save(tmp_path / "zbl.mdband")
    back = mdband.load_model(tmp_path / "zbl.mdband", dtype="float64")
    assert back.model_hash == pot.model_hash
    cfg = SeZMConfig.from_dict(back.config)
    assert (cfg.bridging, cfg.bridging_r_inner, cfg.bridging_r_outer) == ("zbl", 0.55, 0.95)
    ref = ref_of("zbl")
    assert run(back, ref, 4).energy == run(pot, ref, 4).energy


def test_compile_on_reads_the_gate(monkeypatch):
    """compile=on passes the gate to the compiled descriptor (aot_eager: no C++ on the CPU)."""
    import torch._dynamo

    from mdband.model import compiling

    monkeypatch.setattr(compiling, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    try:
        cfg = small_config(**BRIDGED)
        ref = sezm(cfg).evaluate(*MOLECULE[:1], None, False, MOLECULE[1])
        pot = sezm(cfg, compile="on")
        got = pot.evaluate(*MOLECULE[:1], None, False, MOLECULE[1])
        assert pot.model.descriptor._compiled is not None
    finally:
        torch._dynamo.reset()
    assert got.energy == pytest.approx(ref.energy, rel=1e-12)
    np.testing.assert_allclose(got.forces, ref.forces, rtol=0, atol=1e-10)
