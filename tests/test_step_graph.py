"""Padded edge lists and the CUDA-graph replay policy (the capture itself is checked on the GPU
by ``benchmarks/gpu_model.py``)."""

import gc
import warnings
import weakref

import numpy as np
import pytest
import torch
from ase.build import bulk

from mdband import step_graph as sg
from mdband.graph import build_edge_graph
from mdband.settings import EngineSettings
from mdband.testing.sezm import random_potential, small_config


def frame(seed=4):
    a = bulk("C", "diamond", a=3.6, cubic=True)
    a.rattle(0.08, seed=seed)
    sym = a.get_chemical_symbols()
    sym[1], sym[5] = "O", "H"
    a.set_chemical_symbols(sym)
    return a


def potential(**kw):
    return random_potential(small_config(**kw), seed=3, gain=0.5, dtype="float64")


def frame_arrays(pot, atoms):
    g = build_edge_graph(atoms.positions, atoms.cell.array, atoms.pbc, pot.cutoff)
    types = pot.types_of(atoms.get_chemical_symbols())
    return g, (types, g.src, g.dst, g.shifts, atoms.positions, atoms.cell.array)


# ---------------------------------------------------------------------- capacity and padding
@pytest.mark.parametrize("n", [1, 5, 63, 64, 65, 1000, 8191, 8192, 8193, 81_234, 647_154])
def test_edge_capacity(n):
    cap = sg.edge_capacity(n)
    assert cap >= n
    assert sg.edge_capacity(cap) == cap  # a full bucket stays in its bucket
    assert cap - n < max(sg.MIN_GRANULE, 0.008 * n)
    assert sg.edge_capacity(n + 1) >= cap  # monotone


def test_edge_capacity_zero_and_pad_arrays():
    assert sg.edge_capacity(0) == 0
    src, dst = np.array([1, 2, 0]), np.array([0, 0, 1])
    shifts = np.array([[0, 0, 1], [1, 0, 0], [0, 0, 0]])
    s, d, sh, pad = sg.pad_edges(src, dst, shifts, 3, 8)
    assert s.tolist() == [1, 2, 0, 0, 1, 2, 0, 1] and d.tolist() == [0, 0, 1, 0, 1, 2, 0, 1]
    assert sh.dtype == np.float64 and sh[:3].tolist() == shifts.tolist() and not sh[3:].any()
    assert pad.tolist() == [False] * 3 + [True] * 5
    with pytest.raises(ValueError, match="capacity"):
        sg.pad_edges(src, dst, shifts, 3, 2)


@pytest.mark.parametrize(
    "options",
    [{}, {"n_atten_head": 0}, {"n_atten_head": 2, "use_env_seed": False}, {"l_schedule": (3, 1)}],
)
def test_padding_changes_nothing(options):
    """fp64: padded evaluation equals the plain one; padding edges get exactly zero gradient."""
    pot = potential(**options)
    atoms = frame()
    g, arrays = frame_arrays(pot, atoms)
    ref = pot.evaluate(atoms.positions, atoms.cell.array, True, atoms.get_chemical_symbols())
    runner = sg.StepGraphs(pot, capture=False)
    atom_e, forces, virial = runner.run(*arrays)
    assert runner.steps[("positions", len(atoms), sg.edge_capacity(g.n_edges))].capacity > g.n_edges
    np.testing.assert_allclose(atom_e.numpy(), ref.atom_energy, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(forces.numpy(), ref.forces, rtol=0, atol=1e-11)
    np.testing.assert_allclose(virial.numpy(), ref.virial, rtol=0, atol=1e-11)

    step = next(iter(runner.steps.values()))
    out = pot.evaluate_edges(step.types, step.src, step.dst, step.edge_vectors())
    assert torch.count_nonzero(out.edge_grad[step.is_pad]) == 0
    assert torch.count_nonzero(out.edge_grad[~step.is_pad]) > 0


def test_padding_with_fused_ops_float32(monkeypatch):
    """The Triton ops (interpreted on CPU) see padded edges too: same numbers to fp32 rounding."""
    pot_ref = potential(l_schedule=(1,), mixing_layers=1)
    from mdband.model.factory import build_sezm
    from mdband.potential import Potential

    model = build_sezm(pot_ref.config, pot_ref.model.state_dict(), {"kernels": "ops"})
    pot = Potential(model, kind="sezm", type_map=pot_ref.type_map, cutoff=pot_ref.cutoff,
                    config=pot_ref.config, dtype="float32")  # fmt: skip
    atoms = frame()[:4]
    atoms.pbc = False
    atoms.positions *= 0.6
    g, arrays = frame_arrays(pot, atoms)
    ref = pot_ref.evaluate(atoms.positions, None, False, atoms.get_chemical_symbols())
    atom_e, forces, _ = sg.StepGraphs(pot, capture=False).run(*arrays)
    assert g.n_edges > 0
    np.testing.assert_allclose(atom_e.numpy(), ref.atom_energy, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(forces.numpy(), ref.forces, rtol=0, atol=1e-4)


def test_vectors_mode_equals_positions_mode():
    """run_vectors (edge vectors given, as from LAMMPS) equals run on the same frame, and the two
    modes keep separate buckets."""
    pot = potential()
    atoms = frame()
    g, arrays = frame_arrays(pot, atoms)
    runner = sg.StepGraphs(pot, capture=False)
    a = runner.run(*arrays)
    vec = atoms.positions[g.src] + g.shifts @ atoms.cell.array - atoms.positions[g.dst]
    b = runner.run_vectors(arrays[0], g.src, g.dst, vec)
    assert sorted(k[0] for k in runner.steps) == ["positions", "vectors"]
    for x, y in zip(a, b):
        np.testing.assert_allclose(y.numpy(), x.numpy(), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------- replay policy
class FakeGraph:
    def __init__(self, step, pot):
        self.step, self.pot, self.replays = step, pot, 0

    def replay(self):
        self.replays += 1
        self.step.outputs = self.step.compute(self.pot)


def policy_runner(pot, fail=False):
    runner = sg.StepGraphs(pot, capture=False)
    runner.capture = True  # exercise the policy on CPU with a fake graph
    runner._on_stream = lambda fn: fn()

    def capture(step, pot):
        if fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        step.graph, step.outputs = FakeGraph(step, pot), None
        runner.n_captures += 1

    runner._capture = capture
    return runner


def test_capture_on_second_use_then_replay_and_lru(monkeypatch):
    pot = potential()
    atoms = frame()
    _, arrays = frame_arrays(pot, atoms)
    runner = policy_runner(pot)
    first = runner.run(*arrays)
    assert runner.n_captures == 0 and runner.n_replays == 0
    second = runner.run(*arrays)
    assert runner.n_captures == 1 and runner.n_replays == 1
    third = runner.run(*arrays)
    assert runner.n_captures == 1 and runner.n_replays == 2
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    assert torch.equal(first[1], third[1])
    # other buckets (other edge counts) evict the least recently used one
    monkeypatch.setattr(sg, "MAX_GRAPHS", 2)
    for extra in (1000, 2000):
        monkeypatch.setattr(sg, "edge_capacity", lambda n, e=extra: n + e)
        runner.run(*arrays)
    assert len(runner.steps) == 2 and all(c > 1000 for _, _, c in runner.steps)


@pytest.mark.parametrize("edit", ["in_place", "replaced"])
def test_weight_edit_drops_graphs(edit):
    pot = potential()
    _, arrays = frame_arrays(pot, frame())
    runner = policy_runner(pot)
    runner.run(*arrays)
    e0 = runner.run(*arrays)[0].sum().item()
    bias = pot.model.fitting_net.bias_atom_e
    if edit == "in_place":
        with torch.no_grad():
            bias.add_(1.0)
        assert not runner.steps or runner._weights != sg._weights_version(pot.model)
    else:  # a new tensor in the parameter's place
        pot.model.fitting_net.bias_atom_e = torch.nn.Parameter(bias.detach() + 1.0)
    e1 = runner.run(*arrays)[0].sum().item()
    assert runner._weights == sg._weights_version(pot.model)
    assert runner.n_captures == 1  # the stale graph was dropped, the new bucket runs eagerly
    assert e1 == pytest.approx(e0 + 8.0, abs=1e-9)


@pytest.mark.parametrize("change", ["none", "in_place", "parameter", "buffer", "submodule"])
def test_weights_watch_equals_a_full_walk(change):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    model.register_buffer("scale", torch.ones(2))
    watch = sg._WeightsWatch()
    before = watch.version(model)
    assert before == sg._weights_version(model)
    with torch.no_grad():
        if change == "in_place":
            model[0].weight.mul_(2.0)
        elif change == "parameter":
            model[0].bias = torch.nn.Parameter(torch.zeros(4))
        elif change == "buffer":
            model.scale = torch.zeros(2)
        elif change == "submodule":
            model[1] = torch.nn.LayerNorm(4)
    after = watch.version(model)
    assert after == sg._weights_version(model)
    assert (after == before) == (change == "none")


def test_failed_capture_warns_and_stays_eager():
    pot = potential()
    _, arrays = frame_arrays(pot, frame())
    runner = policy_runner(pot, fail=True)
    ref = runner.run(*arrays)
    with pytest.warns(RuntimeWarning, match="CUDA graph capture failed"):
        again = runner.run(*arrays)
    assert "stream is capturing" in runner.disabled_reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        third = runner.run(*arrays)
    assert torch.equal(ref[1], again[1]) and torch.equal(ref[1], third[1])


def test_out_of_memory_with_graphs_held_drops_them_and_retries(monkeypatch):
    pot = potential()
    _, arrays = frame_arrays(pot, frame())
    runner = policy_runner(pot)
    ref = runner.run(*arrays)
    runner.run(*arrays)
    assert runner.n_captures == 1
    monkeypatch.setattr(sg, "edge_capacity", lambda n: n + 100)  # the next frame: a new bucket
    real, fails = sg.DeviceStep.compute, []

    def compute(self, p):
        if not fails:
            fails.append(1)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 90.00 GiB")
        return real(self, p)

    monkeypatch.setattr(sg.DeviceStep, "compute", compute)
    out = runner.run(*arrays)
    assert runner.n_releases == 1  # the old bucket's graph was dropped, the new one ran eagerly
    assert len(runner.steps) == 1 and all(s.graph is None for s in runner.steps.values())
    np.testing.assert_allclose(out[1].numpy(), ref[1].numpy(), rtol=0, atol=1e-12)
    # out of memory again on the retry: the caller sees it
    monkeypatch.setattr(sg.DeviceStep, "compute", lambda self, p: (_ for _ in ()).throw(
        torch.OutOfMemoryError("CUDA out of memory")))  # fmt: skip
    fresh = policy_runner(pot)
    with pytest.raises(torch.OutOfMemoryError):
        fresh.run(*arrays)
    assert fresh.n_releases == 1


@pytest.mark.parametrize("fail", [False, True])
def test_no_garbage_collection_during_capture(monkeypatch, fail):
    """Collecting another potential's graph inside a capture fails it (seen on the H200)."""
    import contextlib

    seen = []

    @contextlib.contextmanager
    def graph(g, pool=None, stream=None):
        seen.append(gc.isenabled())
        yield
        if fail:
            raise RuntimeError("operation not permitted when stream is capturing")

    class Stream:
        def wait_stream(self, other):
            pass

    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: object())
    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    pot = potential()
    runner = sg.StepGraphs(pot, capture=False)
    runner._stream = Stream()
    g, arrays = frame_arrays(pot, frame())
    step = runner._step(pot, "positions", 8, sg.edge_capacity(g.n_edges))
    step.load(*arrays)
    assert gc.isenabled()
    if fail:
        with pytest.raises(RuntimeError):
            runner._capture(step, pot)
    else:
        runner._capture(step, pot)
        assert step.graph is not None and runner.n_captures == 1
    assert seen == [False] and gc.isenabled()


def test_step_graphs_do_not_keep_their_potential_alive():
    pot = potential()
    pot._steps = sg.StepGraphs(pot, capture=False)
    pot._steps.run(*frame_arrays(pot, frame())[1])
    ref = weakref.ref(pot)
    gc.disable()
    try:
        del pot
        assert ref() is None  # freed by reference counting: no cycle holds GPU memory
    finally:
        gc.enable()


def test_potential_reports_graphs_off_on_cpu(monkeypatch):
    pot = potential()
    assert pot.cuda_graphs == "off (not on CUDA)" and pot._steps is None
    monkeypatch.setenv("MDBAND_CUDA_GRAPHS", "0")
    assert EngineSettings.resolve().cuda_graphs == "off"
    monkeypatch.setenv("MDBAND_CUDA_GRAPHS", "sometimes")
    with pytest.raises(ValueError, match="MDBAND_CUDA_GRAPHS"):
        EngineSettings.resolve()
    assert EngineSettings.resolve(cuda_graphs="auto").cuda_graphs == "auto"


def test_concurrent_calls_are_serialised():
    """Threads sharing a potential never interleave in the static buffers."""
    from concurrent.futures import ThreadPoolExecutor

    pot = potential()
    frames = [frame(seed) for seed in range(4)]
    runner = sg.StepGraphs(pot, capture=False)
    arrays = [frame_arrays(pot, f)[1] for f in frames]
    expected = [runner.run(*a)[1].clone() for a in arrays]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda a: runner.run(*a)[1].clone(), arrays * 3))
    for k, g in enumerate(got):
        assert torch.equal(g, expected[k % 4])


def test_potential_evaluate_vectors_equals_evaluate():
    """The public entry for given edge vectors (LAMMPS, one rank) matches evaluate (CPU: eager)."""
    pot = potential()
    atoms = frame()
    g, arrays = frame_arrays(pot, atoms)
    ref = pot.evaluate(atoms.positions, atoms.cell.array, True, atoms.get_chemical_symbols())
    vec = atoms.positions[g.src] + g.shifts @ atoms.cell.array - atoms.positions[g.dst]
    atom_e, forces, virial = pot.evaluate_vectors(arrays[0], g.src, g.dst, vec)
    np.testing.assert_allclose(atom_e.numpy(), ref.atom_energy, rtol=0, atol=1e-12)
    np.testing.assert_allclose(forces.numpy(), ref.forces, rtol=0, atol=1e-11)
    np.testing.assert_allclose(virial.numpy(), ref.virial, rtol=0, atol=1e-10)


@pytest.mark.parametrize("budget, chunked", [("off", False), ("auto", False), ("20kB", True)])
def test_buckets_the_budget_chunks_are_not_captured(budget, chunked):
    """A bucket evaluated in chunks finds its plan from the frame (a host sync): it is marked
    to run eagerly, never captured."""
    from mdband.model.factory import build_sezm
    from mdband.potential import Potential

    cfg = small_config()
    model = build_sezm(cfg, potential().model.state_dict(), {"memory_budget": budget})
    pot = Potential(model, kind="sezm", type_map=["H", "C", "O"], cutoff=cfg["rcut"],
                    config=cfg, device="cpu", dtype="float64")  # fmt: skip
    assert pot.would_chunk(8, 400) is chunked
    assert sg.DeviceStep(pot, "positions", 8, 448).chunked is chunked


def test_replay_after_a_chunked_call_reports_one_chunk():
    """A replayed graph runs no forward: its Result must not repeat the chunk count of an
    earlier chunked (eager) call."""
    from mdband.model.factory import build_sezm
    from mdband.potential import Potential

    cfg = small_config()
    small, big = frame(), frame() * (2, 1, 1)
    est = potential().model.descriptor.memory_estimate(torch.float64)

    def unchunked(atoms):
        g = build_edge_graph(atoms.positions, atoms.cell.array, atoms.pbc, cfg["rcut"])
        return est.unchunked(len(atoms), sg.edge_capacity(g.n_edges))

    budget = str(int(unchunked(small) * 1.02))  # bytes: the small cell fits, the big one chunks
    model = build_sezm(cfg, potential().model.state_dict(), {"memory_budget": budget})
    pot = Potential(model, kind="sezm", type_map=["H", "C", "O"], cutoff=cfg["rcut"],
                    config=cfg, device="cpu", dtype="float64")  # fmt: skip
    runner = sg.StepGraphs(pot, capture=False)
    runner.capture = True
    runner._on_stream = lambda fn: fn()

    class FrozenGraph:  # as a CUDA graph: replay rewrites the captured outputs, no forward runs
        def replay(self):
            pass

    def capture(step, pot):
        step.outputs = step.compute(pot)
        step.graph = FrozenGraph()

    runner._capture = capture
    pot._steps = runner

    def chunks(atoms):
        return pot.evaluate(atoms.positions, atoms.cell.array, True,
                            atoms.get_chemical_symbols()).chunks  # fmt: skip

    assert [chunks(small), chunks(small)] == [1, 1]  # eager, then captured
    assert chunks(big) > 1  # chunked: eager every call
    assert chunks(small) == 1 and runner.n_replays == 2  # the capture replays once too


def test_a_bucket_chunked_by_the_time_of_its_capture_stays_eager(monkeypatch):
    """The free memory can shrink between a bucket's first call and its capture (another
    potential's graphs): a bucket the budget chunks by then is not captured (a plan's host sync
    would fail the capture and turn graphs off for good)."""
    pot = potential()
    atoms = frame()
    runner = sg.StepGraphs(pot, capture=False)
    runner.capture = True
    runner._on_stream = lambda fn: fn()
    captured = []
    runner._capture = lambda step, pot: captured.append(step)
    answers = iter([False, True])  # fits at the bucket's first call, chunks at its second
    monkeypatch.setattr(pot, "would_chunk", lambda n, e: next(answers))
    arrays = frame_arrays(pot, atoms)[1]
    for _ in range(3):
        runner.run(*arrays)
    assert captured == [] and not runner.disabled_reason
    assert [s.chunked for s in runner.steps.values()] == [True]


def test_no_chunk_plan_inside_a_capture(monkeypatch):
    """Inside a CUDA-graph capture the descriptor never plans chunks (whatever the budget)."""
    from mdband.model import block
    from mdband.model.factory import build_sezm

    cfg = small_config()
    dst = torch.repeat_interleave(torch.arange(8), 50)
    like = torch.empty(0, dtype=torch.float64)
    est = potential().model.descriptor.memory_estimate(torch.float64)
    budget = str(int(est.unchunked(8, 400) * 0.6))  # bytes: two or more chunks
    model = build_sezm(cfg, potential().model.state_dict(), {"memory_budget": budget})
    assert model.descriptor.choose_plan(dst, 8, like) is not None
    monkeypatch.setattr(block, "capturing", lambda device: True)
    assert model.descriptor.choose_plan(dst, 8, like) is None
