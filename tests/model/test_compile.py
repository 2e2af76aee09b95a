"""compile=on: the torch code between the fused ops under torch.compile, same numbers."""

from __future__ import annotations

import numpy as np
import pytest
from ase.build import bulk

from mdband.kernels import force_triton
from mdband.model import compiling
from mdband.model.factory import build_sezm, initialise_weights
from mdband.potential import Potential
from mdband.settings import EngineSettings
from mdband.testing.sezm import small_config


@pytest.fixture(autouse=True)
def _fast_backend(monkeypatch):
    """The graphs and graph breaks of the inductor path, without generating C++ on the CPU."""
    import torch._dynamo

    monkeypatch.setattr(compiling, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _potential(cfg, dtype="float64", **options):
    model = build_sezm(cfg, None, options)
    initialise_weights(model, seed=4, gain=0.5)
    return Potential(model, kind="sezm", type_map=["H", "C", "O"], cutoff=cfg["rcut"],
                     config=cfg, device="cpu", dtype=dtype)  # fmt: skip


def _frame(n=1, seed=0):
    a = bulk("C", "diamond", a=3.6, cubic=True) * (n, 1, 1)
    a.rattle(0.08, seed=seed)
    sym = a.get_chemical_symbols()
    sym[1], sym[5] = "O", "H"
    a.set_chemical_symbols(sym)
    return a


def _eval(pot, atoms):
    return pot.evaluate(atoms.positions, atoms.cell.array, True, atoms.get_chemical_symbols())


@pytest.mark.parametrize("overrides", [{}, dict(n_atten_head=0, radial_so2_mode="none")])
def test_compiled_equals_eager(overrides):
    """Same energies, forces and virial as the eager model, at two sizes (a recompile)."""
    cfg = small_config(**overrides)
    eager, comp = _potential(cfg), _potential(cfg, compile="on")
    for n in (1, 2):
        atoms = _frame(n)
        a, b = _eval(eager, atoms), _eval(comp, atoms)
        assert b.energy == pytest.approx(a.energy, rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(b.forces, a.forces, rtol=0, atol=1e-11)
        np.testing.assert_allclose(b.virial, a.virial, rtol=0, atol=1e-10)
    assert comp.model.descriptor._compiled is not None
    assert eager.model.descriptor._compiled is None


def test_fused_ops_are_graph_breaks():
    """With every fused op on its Triton kernel (interpreter on CPU) the compiled model stops
    at each op and gives the eager model's numbers."""
    cfg = small_config(channels=4, n_radial=4, l_schedule=(1,), mixing_layers=1)
    eager = _potential(cfg, kernels="ops")
    comp = _potential(cfg, kernels="ops", compile="on")
    atoms = _frame()
    with force_triton():
        a, b = _eval(eager, atoms), _eval(comp, atoms)
    assert comp.model.descriptor._compiled is not None
    assert b.energy == pytest.approx(a.energy, rel=1e-12)
    np.testing.assert_allclose(b.forces, a.forces, rtol=0, atol=1e-11)


def test_recompute_and_chunks_stay_eager():
    cfg = small_config()
    atoms = _frame()
    stack = _potential(cfg, compile="on", recompute="stack")
    _eval(stack, atoms)
    assert stack.model.descriptor._compiled is None
    chunked = _potential(cfg, compile="on", memory_budget="3MB")  # unchunked needs ~6 MB
    assert _eval(chunked, atoms).chunks > 1
    assert chunked.model.descriptor._compiled is None


def test_setting_values(monkeypatch):
    assert EngineSettings().compile == "off"
    assert EngineSettings.resolve(compile=True).compile == "on"
    monkeypatch.setenv("MDBAND_COMPILE", "on")
    assert EngineSettings.resolve().compile == "on"
    assert EngineSettings.resolve(compile="off").compile == "off"  # an argument wins
    monkeypatch.setenv("MDBAND_COMPILE", "fast")
    with pytest.raises(ValueError, match="MDBAND_COMPILE"):
        EngineSettings.resolve()
