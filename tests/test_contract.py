"""The model contract (mdband/contract.py): every model kind declares it, a Potential refuses a
network that does not (one-line typed error), and StepGraphs returns its chunk count instead of
writing it into the model. That Potential and StepGraphs read the model through the contract
alone (no getattr probes) is checked from the source in tests/test_architecture.py."""

from pathlib import Path

import numpy as np
import pytest
import torch
from ase.build import bulk

from mdband import kinds
from mdband import step_graph as sg
from mdband.charge_spin import ChargeSpinInputs
from mdband.config import SpinConfig
from mdband.contract import (
    CHUNKING,
    MEMBERS,
    Chunking,
    DirectForceModel,
    ModelContract,
    check_model,
)
from mdband.errors import ModelContractError, ModelFileError
from mdband.graph import build_edge_graph
from mdband.loader import load_model
from mdband.model.factory import build_sezm
from mdband.potential import Potential
from mdband.settings import EngineSettings
from mdband.so3.storage import RotationLayout
from mdband.testing.lj import LennardJones, lennard_jones_potential
from mdband.testing.mp import message_passing_potential
from mdband.testing.sezm import random_potential, small_config

FIX = Path(__file__).resolve().parent / "fixtures"
F64 = dict(device="cpu", dtype="float64")

#: every model kind mdband has (SeZM and its variants, the test potentials): a Potential each
KINDS = {
    "sezm": lambda: random_potential(small_config(), seed=1, gain=0.5),
    "sezm-zbl": lambda: random_potential(small_config(bridging="zbl"), seed=1, gain=0.5),
    "sezm-dens": lambda: load_model(FIX / "deepmd" / "dens.pt", **F64),
    "sezm-spin-native": lambda: load_model(FIX / "deepmd_spin" / "spin_native.pt", **F64),
    "sezm-spin-deepspin": lambda: load_model(FIX / "deepmd_spin" / "spin_deepspin.pt", **F64),
    "sezm-charge-spin": lambda: load_model(FIX / "deepmd" / "chgspin.pt", **F64),
    "lj": lennard_jones_potential,
    "mp2": message_passing_potential,
}
#: what each kind declares beyond the common types (member: value)
EXPECTED = {
    "sezm": dict(direct_forces=False, float64_edges=False, zero_beyond_cutoff=True, spin=None),
    "sezm-zbl": dict(direct_forces=False, float64_edges=True, zero_beyond_cutoff=True),
    "sezm-dens": dict(direct_forces=True, float64_edges=False, zero_beyond_cutoff=True),
    "sezm-spin-native": dict(direct_forces=False, zero_beyond_cutoff=True),
    "sezm-spin-deepspin": dict(direct_forces=False, zero_beyond_cutoff=True),
    "sezm-charge-spin": dict(direct_forces=False, zero_beyond_cutoff=True, spin=None),
    "lj": dict(settings=None, rotation_layout=None, spin=None, chunking=None, direct_forces=False,
               zero_beyond_cutoff=False, accepts_energy_rows=False, accepts_edge_csr=False,
               charge_spin_inputs=None),
    "mp2": dict(settings=None, rotation_layout=None, spin=None, chunking=None, exchange_width=4,
                zero_beyond_cutoff=False, accepts_energy_rows=False, accepts_edge_csr=False,
                charge_spin_inputs=None),
}  # fmt: skip
SPIN_SCHEME = {"sezm-spin-native": "native", "sezm-spin-deepspin": "deepspin"}


def declared(model, name: str) -> bool:
    """``name`` is the model's own: set on the instance, or in the body of its class or a base
    class of mdband's (not inherited from torch.nn.Module or object, not a default)."""
    if name in vars(model):
        return True
    bases = [k for k in type(model).__mro__ if k not in (torch.nn.Module, object)]
    return any(name in vars(k) for k in bases)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_model_kind_declares_the_contract(name):
    pot = KINDS[name]()
    model = pot.model
    assert isinstance(model, ModelContract) and check_model(model, name) is model
    assert [m for m in MEMBERS if not declared(model, m)] == []
    assert model.settings is None or isinstance(model.settings, EngineSettings)
    assert model.rotation_layout is None or isinstance(model.rotation_layout, RotationLayout)
    assert isinstance(model.rotation_layout_reason, str)
    assert model.spin is None or isinstance(model.spin, SpinConfig)
    takes = model.charge_spin_inputs
    assert takes is None or isinstance(takes, ChargeSpinInputs)
    assert (takes is not None) == (name == "sezm-charge-spin")
    flags = ("direct_forces", "float64_edges", "zero_beyond_cutoff", "accepts_energy_rows",
             "accepts_edge_csr")  # fmt: skip
    assert all(type(getattr(model, f)) is bool for f in flags)
    assert type(model.exchange_width) is int and model.exchange_width >= 1
    assert model.chunking is None or isinstance(model.chunking, Chunking)
    assert not model.direct_forces or isinstance(model, DirectForceModel)
    for member, value in EXPECTED[name].items():
        assert getattr(model, member) == value, member
    if name in SPIN_SCHEME:
        assert model.spin.scheme == SPIN_SCHEME[name]
    if name.startswith("sezm"):  # SeZM stores rotations and chunks under the memory budget
        assert isinstance(model.settings, EngineSettings) and model.chunking is not None
        assert model.accepts_energy_rows and model.accepts_edge_csr
        assert pot.rotation_layout in ("band", "dense") and pot.memory_budget != "n/a"
    # the Potential's own attributes are the contract's, read once
    assert pot.direct_forces is model.direct_forces and pot.spin is model.spin
    assert pot.charge_spin is model.charge_spin_inputs
    assert pot.settings is model.settings and pot.exchange_width == model.exchange_width
    assert pot.edge_dtype == (torch.float64 if model.float64_edges else pot.dtype)


class Bare(torch.nn.Module):
    """A pair model that declares only part of the contract (as a third-party kind might)."""

    rotation_layout = None

    def forward(self, types, src, dst, edge_vec, exchange=None):
        r = torch.linalg.vector_norm(edge_vec, dim=-1)
        return torch.zeros(types.shape[0], dtype=r.dtype).index_add(0, dst, r)


def potential_of(model, kind="bare"):
    return Potential(model, kind=kind, type_map=["Ar"], cutoff=5.0, config={}, **F64)


def one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert "\n" not in msg and isinstance(exc, ModelFileError)
    return msg


def test_a_network_without_the_contract_is_refused_in_one_line():
    with pytest.raises(ModelContractError) as info:
        potential_of(Bare())
    msg = one_line(info.value)
    assert "model kind 'bare'" in msg and "ModelContract" in msg
    missing = [m for m in MEMBERS if m != "rotation_layout"]
    assert info.value.missing == missing and all(m in msg for m in missing)
    assert not isinstance(Bare(), ModelContract)
    with pytest.raises(ModelContractError, match="torch.nn.Module .it built a dict"):
        check_model({}, "bare")


def test_direct_forces_and_chunking_declare_their_methods():
    lj = LennardJones(0.0104, 3.4, 8.5, 7.0)
    lj.direct_forces = True  # says its forces are the network's, but has no energies_and_forces
    with pytest.raises(ModelContractError, match="energies_and_forces") as info:
        potential_of(lj, "lj")
    one_line(info.value)

    class Plan:  # a chunking without its budget's text
        last_chunks = 1

        def would_chunk(self, n_atoms, n_edges, like):
            return False

        def shrink_chunks(self, device, n_atoms):
            return False

    lj = LennardJones(0.0104, 3.4, 8.5, 7.0)
    lj.chunking = Plan()
    with pytest.raises(ModelContractError) as info:
        potential_of(lj, "lj")
    assert info.value.missing == ["chunking.memory_budget_text"]
    assert set(CHUNKING) - {"memory_budget_text"} <= set(dir(Plan))


def test_load_model_refuses_a_kind_whose_network_breaks_the_contract(tmp_path, monkeypatch):
    lennard_jones_potential().save(tmp_path / "lj.mdband")

    def build(config, state_dict, options):  # the file's weights, not the contract
        model = Bare()
        for name in ("epsilon", "sigma"):
            model.register_buffer(name, torch.tensor(0.0, dtype=torch.float64))
        return model

    monkeypatch.setitem(kinds._REGISTERED, "lj", build)
    with pytest.raises(ModelContractError, match="model kind 'lj'") as info:
        load_model(tmp_path / "lj.mdband", **F64)
    one_line(info.value)


def test_front_ends_read_settings_and_exchange_width_from_the_potential():
    pot = KINDS["sezm"]()
    assert pot.settings is pot.model.settings and pot.settings.neighbour_list == "auto"
    assert pot.exchange_width == 128  # contract.DEFAULT_EXCHANGE_WIDTH
    mp = message_passing_potential(channels=6)
    assert mp.settings is None and mp.exchange_width == 6


# ---------------------------------------------------------------------- StepGraphs
def frame():
    a = bulk("C", "diamond", a=3.6, cubic=True)
    a.rattle(0.08, seed=4)
    sym = a.get_chemical_symbols()
    sym[1], sym[5] = "O", "H"
    a.set_chemical_symbols(sym)
    return a


def arrays(pot, atoms):
    g = build_edge_graph(atoms.positions, atoms.cell.array, atoms.pbc, pot.cutoff)
    types = pot.types_of(atoms.get_chemical_symbols())
    return types, g.src, g.dst, g.shifts, atoms.positions, atoms.cell.array


def test_step_graphs_return_the_chunk_count_and_leave_the_model_alone():
    """Eager steps report the chunks their forward used; a replayed graph (no forward) reports
    one, and the model's own count stays what its last forward set."""
    cfg = small_config()
    ref = random_potential(cfg, seed=3, gain=0.5)
    small, big = frame(), frame() * (2, 1, 1)
    est = ref.model.descriptor.memory_estimate(torch.float64)
    n_small = build_edge_graph(small.positions, small.cell.array, True, cfg["rcut"]).n_edges
    budget = str(int(est.unchunked(len(small), sg.edge_capacity(n_small)) * 1.02))
    model = build_sezm(cfg, ref.model.state_dict(), {"memory_budget": budget})
    pot = Potential(model, kind="sezm", type_map=ref.type_map, cutoff=ref.cutoff, config=cfg,
                    **F64)  # fmt: skip
    runner = sg.StepGraphs(pot, capture=False)
    runner.capture = True  # the policy on the CPU, with a graph that replays nothing
    runner._on_stream = lambda fn: fn()

    class Frozen:
        def replay(self):
            pass

    def capture(step, source):
        step.outputs, step.graph = step.compute(source), Frozen()

    runner._capture = capture
    first = runner.run(*arrays(pot, small))
    assert isinstance(first, sg.StepOutputs) and len(first) == 3 and first.chunks == 1
    assert runner.run(*arrays(pot, small)).chunks == 1 and runner.n_replays == 1
    chunked = runner.run(*arrays(pot, big))
    assert chunked.chunks > 1 and chunked.chunks == model.chunking.last_chunks
    replayed = runner.run(*arrays(pot, small))
    assert runner.n_replays == 2 and replayed.chunks == 1
    assert model.chunking.last_chunks == chunked.chunks  # StepGraphs wrote nothing into it
    for a, b in zip(first, replayed):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
