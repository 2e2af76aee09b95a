"""StepGraphs: padded edge lists and CUDA-graph replay of one evaluation.

A call of :meth:`Potential.evaluate` launches over a thousand kernels; below a few thousand atoms
the GPU finishes them faster than Python issues them. On CUDA, ``StepGraphs`` captures the whole
device step (edge vectors, energy model, ∂E/∂edge_vec, force and virial assembly) in a CUDA
graph and replays it.

A graph has fixed shapes, while the edge count changes from step to step. The edge list is
therefore padded to a capacity bucket (:func:`edge_capacity`, at most 0.8 % above the edge count)
with edges ``k → k`` (k = 0, 1, … mod N) whose vector is :data:`PAD_DIRECTION` · 1.5 rcut. SeZM
gives edges with r ≥ rcut exactly zero weight everywhere (envelope 0, zero gradient), so the
padding changes results only by rounding (the attention's max-shift sees the padded logits).
A model opts in with ``zero_beyond_cutoff = True``.

Results are a deterministic function of (positions, cell, edge list): the capacity depends on the
edge count alone, and the first call of a bucket runs the same padded step eagerly that later
calls replay, so a restart reproduces a run bit for bit.

Policy: the first call of a bucket runs eagerly (on the capture stream, which warms it up), the
second captures and replays, later calls replay. A bucket that the memory budget evaluates in
chunks (see :mod:`mdband.model.chunking`) is never captured: it runs eagerly every call. At
most :data:`MAX_GRAPHS` buckets are kept (least recently used dropped); their graphs share one
memory pool, so they cost about the peak memory of one step. Running out of memory drops them
(and unreachable potentials' graphs) and retries the call once, eagerly. A capture that fails
otherwise (an operation not allowed in a graph) switches graphs off for this potential with a
:class:`RuntimeWarning`; weights edited in place drop the graphs.
Calls from several threads are serialised (the static buffers are shared) and get copies of a
graph's outputs.

``StepGraphs`` uses its potential through :class:`StepSource` alone (held weakly): one step
function, the size check of the memory budget, the module whose weights a graph bakes in, the
charge/spin inputs a bucket buffers. It
reads nothing of the model's contract and writes nothing into the potential or its model:
every call returns :class:`StepOutputs`, which carry the chunks the step used.
"""

from __future__ import annotations

import gc
import threading
import warnings
import weakref
from collections import OrderedDict
from typing import Any, Protocol

import numpy as np
import torch

from mdband.errors import ChargeSpinError

#: unit direction of the padding edges (generic: no axis, no special frame)
PAD_DIRECTION = (0.36, 0.48, 0.8)
#: padding edges sit at this multiple of the cutoff
PAD_DISTANCE = 1.5
#: captured buckets kept per potential
MAX_GRAPHS = 8
#: smallest capacity step (edges)
MIN_GRANULE = 64


class StepSource(Protocol):
    """What :class:`StepGraphs` and :class:`DeviceStep` use of their potential.

    They use nothing else; :class:`~mdband.potential.Potential` provides it.
    """

    device: torch.device
    cutoff: float
    #: the module whose parameters and buffers a captured graph bakes in (edits drop graphs)
    model: torch.nn.Module
    #: what the model takes of a system's charge and spin (None: nothing; then no buffer)
    charge_spin: object

    def would_chunk(self, n_atoms: int, n_edges: int) -> bool:
        """Whether the memory budget evaluates this size in chunks (then never captured)."""
        ...

    def charge_spin_of(self) -> torch.Tensor | None:
        """Return the (1, 2) charge/spin row of the model's defaults (None: it takes none)."""
        ...

    def graph_step(self, types, src, dst, edge_vec, charge_spin=None) -> tuple:
        """(atom energies (N,), forces (N, 3), virial (3, 3), chunks used) of device tensors."""
        ...


class StepOutputs(tuple):
    """The outputs of one call, and the chunks its forward used.

    The outputs are (atom energies (N,), forces (N, 3), virial (3, 3)), float64 device tensors;
    ``chunks``: the chunks of destination atoms its forward used (1 for a replayed graph, which
    runs no forward: captured buckets are never chunked).
    """

    chunks: int

    def __new__(cls, outputs, chunks: int) -> StepOutputs:
        """Make the tuple of ``outputs`` carrying ``chunks``."""
        out = super().__new__(cls, outputs)
        out.chunks = int(chunks)
        return out


def edge_capacity(n_edges: int) -> int:
    """Return the padded edge count for ``n_edges``.

    It is the next multiple of ``next_pow2(n_edges) / 256``. Pure function of the edge count
    (0 for 0). Buckets are 0.4–0.8 % of the edge count wide (≥ 64 edges), so the padding is
    < 0.8 % of the edges or < 64 edges.
    """
    if n_edges <= 0:
        return 0
    granule = max(MIN_GRANULE, (1 << (int(n_edges) - 1).bit_length()) // 256)
    return -(-int(n_edges) // granule) * granule


def pad_edges(src: np.ndarray, dst: np.ndarray, rows: np.ndarray, n_atoms: int, capacity: int):
    """Edge arrays padded to ``capacity``: (src, dst, rows float64 (zero-padded), is_pad bool).

    ``rows`` (E, 3) are the edges' cell shifts or their vectors.
    """
    n = int(src.shape[0])
    extra = capacity - n
    if extra < 0:
        raise ValueError(f"capacity {capacity} is below the edge count {n}")
    fill = np.arange(extra, dtype=np.int64) % max(n_atoms, 1)
    src_p = np.concatenate([np.asarray(src, dtype=np.int64), fill])
    dst_p = np.concatenate([np.asarray(dst, dtype=np.int64), fill])
    rows_p = np.zeros((capacity, 3), dtype=np.float64)
    rows_p[:n] = np.asarray(rows).reshape(n, 3)
    is_pad = np.zeros(capacity, dtype=bool)
    is_pad[n:] = True
    return src_p, dst_p, rows_p, is_pad


class DeviceStep:
    """Static device buffers of one bucket and its captured graph.

    ``mode`` "positions": frames of (types, src, dst, shifts, positions, cell), edge vectors
    ``r[src] + shift @ cell − r[dst]`` formed on the device; "vectors": frames of
    (types, src, dst, vectors) with the edge vectors given (LAMMPS).
    """

    def __init__(self, potential: StepSource, mode: str, n_atoms: int, capacity: int) -> None:
        dev = potential.device
        self.mode, self.n_atoms, self.capacity = mode, n_atoms, capacity
        i64: dict[str, Any] = dict(dtype=torch.int64, device=dev)
        f64: dict[str, Any] = dict(dtype=torch.float64, device=dev)
        self.types = torch.zeros(n_atoms, **i64)
        self.src = torch.zeros(capacity, **i64)
        self.dst = torch.zeros(capacity, **i64)
        self.edge_rows = torch.zeros(capacity, 3, **f64)  # shifts or vectors
        self.is_pad = torch.zeros(capacity, dtype=torch.bool, device=dev)
        if mode == "positions":
            self.positions = torch.zeros(n_atoms, 3, **f64)
            self.cell = torch.zeros(3, 3, **f64)
        #: (1, 2) total charge and spin multiplicity of a charge/spin model (None: none taken)
        self.charge_spin = None if potential.charge_spin is None else torch.zeros(1, 2, **i64)
        pad = torch.tensor(PAD_DIRECTION, **f64)
        self.pad_vector = pad / pad.norm() * (PAD_DISTANCE * potential.cutoff)
        #: a bucket the memory budget evaluates in chunks runs eagerly: its chunk plan is
        #: found from the frame's edges (a host sync, not allowed in a capture) and such
        #: cells are far past the sizes where launches cost anything
        self.chunked = potential.would_chunk(n_atoms, capacity)
        self._slot = torch.arange(capacity, **i64)
        self._fill = self._slot % max(n_atoms, 1)  # padding edges k -> k
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs: tuple[torch.Tensor, ...] | None = None
        self.calls = 0
        self.chunks = 1  # chunks the last eager compute used

    def load(self, types, src, dst, rows, positions=None, cell=None, charge_spin=None) -> None:
        """Copy one frame into the static buffers, padding the edges on the device.

        Inputs are numpy arrays or tensors (any device); edges unpadded. The padding equals
        :func:`pad_edges`: edges ``k → k`` (k = 0, 1, … mod N) with zero rows.
        ``charge_spin``: (1, 2) from :meth:`Potential.charge_spin_of` (a charge/spin model).
        """
        n = int(src.shape[0])
        extra = self.capacity - n
        if extra < 0:
            raise ValueError(f"capacity {self.capacity} is below the edge count {n}")
        _put(self.types, types)
        _put(self.src[:n], src)
        _put(self.dst[:n], dst)
        _put(self.edge_rows[:n], rows)
        if extra:
            self.src[n:].copy_(self._fill[:extra])
            self.dst[n:].copy_(self._fill[:extra])
            self.edge_rows[n:].zero_()
        torch.ge(self._slot, n, out=self.is_pad)
        if self.mode == "positions":
            _put(self.positions, positions)
            _put(self.cell, cell)
        if self.charge_spin is not None and charge_spin is not None:  # (StepGraphs._cs)
            _put(self.charge_spin, charge_spin)

    def edge_vectors(self) -> torch.Tensor:
        """(capacity, 3) float64 edge vectors, padding edges at ``pad_vector``."""
        if self.mode == "positions":
            pos = self.positions
            ev = pos[self.src] - pos[self.dst] + self.edge_rows @ self.cell
        else:
            ev = self.edge_rows
        return torch.where(self.is_pad[:, None], self.pad_vector, ev)

    def compute(self, source: StepSource) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Compute (atom energies (N,), forces (N, 3), virial (3, 3)), float64, from the buffers.

        The chunks the step used are kept in :attr:`chunks`.
        """
        *outputs, self.chunks = source.graph_step(
            self.types, self.src, self.dst, self.edge_vectors(), self.charge_spin
        )
        return tuple(outputs)


def _put(buf: torch.Tensor, arr) -> None:
    """``buf[...] = arr`` for a numpy array or a tensor on any device (dtype converted)."""
    src = arr if isinstance(arr, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(arr))
    buf.copy_(src.reshape(buf.shape))


def _copies(outputs):
    """Return copies of a graph's outputs, which its next replay overwrites."""
    return tuple(t.clone() for t in outputs)


def _weights_version(module: torch.nn.Module) -> tuple:
    return tuple((id(t), t._version) for t in (*module.parameters(), *module.buffers()))


#: bumped whenever any module registers or replaces a parameter, buffer or submodule
#: (torch's global registration hooks, which ``setattr`` and ``register_*`` call)
_structure_epoch = 0


def _structure_changed(*_args) -> None:
    global _structure_epoch
    _structure_epoch += 1


for _register in (
    torch.nn.modules.module.register_module_parameter_registration_hook,
    torch.nn.modules.module.register_module_buffer_registration_hook,
    torch.nn.modules.module.register_module_module_registration_hook,
):
    _register(_structure_changed)


class _WeightsWatch:
    """:func:`_weights_version` of a module for every call; the module tree is walked rarely.

    The module tree (about 1,000 modules and 150 tensors for the default config: ~0.5 ms of
    Python) is walked only after some module registered or replaced a parameter, buffer or
    submodule; otherwise the tensors of the last walk are read again (in-place edits still show
    in their ``_version``).
    """

    def __init__(self) -> None:
        self._epoch = -1
        self._tensors: tuple[torch.Tensor, ...] = ()

    def version(self, module: torch.nn.Module) -> tuple:
        """Return ``(id, _version)`` of every parameter and buffer of ``module`` (last walked)."""
        if self._epoch != _structure_epoch:
            self._tensors = (*module.parameters(), *module.buffers())
            self._epoch = _structure_epoch
        return tuple((id(t), t._version) for t in self._tensors)


class StepGraphs:
    """Padded, graph-replayed evaluations of one :class:`~mdband.potential.Potential`.

    ``capture`` False (CPU, or to test the padding alone) runs every call eagerly. Holds the
    potential weakly (the potential owns it: no reference cycle keeps GPU memory alive).
    """

    #: the bucket class (:class:`DeviceStep`; :mod:`mdband.batch` gives its own)
    step_class = DeviceStep

    def __init__(self, potential: StepSource, capture: bool = True) -> None:
        self._potential = weakref.ref(potential)
        self.device = potential.device
        self.capture = bool(capture) and potential.device.type == "cuda"
        self.steps: OrderedDict[tuple[str, int, int], DeviceStep] = OrderedDict()
        self.n_captures = 0
        self.n_replays = 0
        self.n_releases = 0
        self.disabled_reason = ""
        self._stream = torch.cuda.Stream(self.device) if self.capture else None
        self._pool = torch.cuda.graph_pool_handle() if self.capture else None
        self._watch = _WeightsWatch()
        self._weights = self._watch.version(potential.model)
        self._lock = threading.RLock()

    @property
    def potential(self):
        """The potential these graphs serve (RuntimeError once it was freed)."""
        pot = self._potential()
        if pot is None:
            raise RuntimeError("the potential of these step graphs was freed")
        return pot

    # ------------------------------------------------------------------ bookkeeping
    def _step(self, pot, mode: str, n_atoms: int, capacity: int) -> DeviceStep:
        key = (mode, n_atoms, capacity)
        step = self.steps.pop(key, None)
        if step is None:
            step = self.step_class(pot, mode, n_atoms, capacity)
            while len(self.steps) >= MAX_GRAPHS:
                self.steps.popitem(last=False)
        self.steps[key] = step  # most recently used last
        return step

    def _check_weights(self) -> None:
        version = self._watch.version(self.potential.model)
        if version != self._weights:  # captured graphs would replay stale weight packings
            self.steps.clear()
            self._weights = version

    def release(self) -> None:
        """Drop every bucket and its graph and return their memory pool to the device.

        The pools of unreachable potentials go too: garbage is collected first.
        """
        self.steps.clear()
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()

    # ------------------------------------------------------------------ evaluation
    def run(self, types, src, dst, shifts, positions, cell, charge_spin=None) -> StepOutputs:
        """Evaluate one frame: device (atom energies, forces, virial), with the chunks used.

        The frame is numpy arrays or tensors (unpadded edges).

        Out of memory (graphs hold a pool of about one step's peak, and a new bucket's first
        call runs outside it): every graph is dropped, garbage collected, and the call runs
        once more eagerly, so a large system near the memory limit still runs; a second
        out-of-memory error is raised. ``charge_spin``: :meth:`Potential.charge_spin_of`'s
        (None: the model's defaults), in a static buffer of the bucket.
        """
        frame = (types, src, dst, shifts, positions, cell, self._cs(charge_spin))
        return self._evaluate("positions", frame)

    def run_vectors(self, types, src, dst, vectors, charge_spin=None) -> StepOutputs:
        """Evaluate as :meth:`run` does, for edge vectors (E, 3) given directly.

        That is LAMMPS on one rank: ghost neighbours are already mapped to their owners.
        """
        return self._evaluate("vectors", (types, src, dst, vectors, None, None,
                                          self._cs(charge_spin)))  # fmt: skip

    def _cs(self, charge_spin):
        """Return the ``charge_spin`` for the buffers: the model's defaults when None.

        The defaults are resolved here, so a missing input raises before any buffer is touched.
        """
        pot = self.potential
        if pot.charge_spin is None:
            if charge_spin is not None:
                raise ChargeSpinError("this model takes no total charge or spin multiplicity")
            return None
        return pot.charge_spin_of() if charge_spin is None else charge_spin

    def _evaluate(self, mode, frame):
        # one call at a time: the buckets' static buffers are shared by every caller (threads)
        with self._lock:
            if self.device.type == "cuda":
                with torch.cuda.device(self.device):  # streams, graphs and pool on this GPU
                    return self._evaluate_here(mode, frame)
            return self._evaluate_here(mode, frame)

    def _evaluate_here(self, mode, frame):
        self._check_weights()
        pot = self.potential
        key = (mode, int(frame[0].shape[0]), edge_capacity(int(frame[1].shape[0])))
        try:
            return self._run(pot, key, frame)
        except torch.OutOfMemoryError:
            pass
        # outside the handler (the failed call's tensors went with its traceback): drop this
        # potential's graphs, collect unreachable ones (a potential kept only by an atoms <->
        # calculator cycle still holds its pool) and run the call once more, eagerly
        self.release()
        self.n_releases += 1
        return self._run(pot, key, frame)

    def _run(self, pot, key, frame):
        step = self._step(pot, *key)
        step.load(*frame)
        step.calls += 1
        if not self.capture:
            return StepOutputs(step.compute(pot), step.chunks)
        if step.graph is not None:
            return self._replay(step, pot)
        if step.calls >= 2 and not self.disabled_reason and not step.chunked:
            # the free memory may have shrunk since the bucket was made (another potential's
            # graphs, say): a bucket the budget now chunks stays eager
            step.chunked = pot.would_chunk(step.n_atoms, step.capacity)
        if step.calls >= 2 and not self.disabled_reason and not step.chunked:
            try:
                self._capture(step, pot)
            except torch.OutOfMemoryError as exc:
                if any(s.graph is not None for s in self.steps.values()):
                    raise  # run() frees the other graphs and retries
                self._give_up(exc)
            except Exception as exc:  # an op that cannot be captured: stay eager from now on
                self._give_up(exc)
            else:
                return self._replay(step, pot)
        return StepOutputs(self._on_stream(lambda: step.compute(pot)), step.chunks)

    def _replay(self, step: DeviceStep, pot) -> StepOutputs:
        assert step.graph is not None  # replayed once captured
        step.graph.replay()
        self.n_replays += 1
        return StepOutputs(_copies(step.outputs), 1)  # no forward ran: one chunk (never chunked)

    def _on_stream(self, fn):
        cur = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(cur)
        with torch.cuda.stream(self._stream):
            out = fn()
        cur.wait_stream(self._stream)
        return out

    def _capture(self, step: DeviceStep, pot) -> None:
        graph = torch.cuda.CUDAGraph()
        assert self._stream is not None  # made when capturing
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        # no garbage collection inside the capture: freeing another object's CUDA graph or
        # tensors (say an earlier potential kept alive by an atoms <-> calculator cycle) is not
        # allowed while a stream captures, and fails the capture
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            with torch.cuda.graph(graph, pool=self._pool, stream=self._stream):
                outputs = step.compute(pot)
        finally:
            if gc_was_enabled:
                gc.enable()
        step.graph, step.outputs = graph, outputs
        self.n_captures += 1

    def _give_up(self, exc: Exception) -> None:
        self.disabled_reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        self.release()
        warnings.warn(
            f"CUDA graph capture failed ({self.disabled_reason}); evaluating without graphs",
            RuntimeWarning,
            stacklevel=3,
        )
