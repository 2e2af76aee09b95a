"""Many structures in few model calls: what :meth:`mdband.Potential.evaluate_many` runs.

Systems of any size, cell, periodicity and species are evaluated together as one disjoint
graph. Every system gets its own neighbour list (vesin on the host for CPU models, the cell
list on the device for CUDA models, as :attr:`Potential.neighbour_backend` says); the lists
are concatenated with atom offsets and one model call gives every atom's energy and
``g = ∂E/∂edge_vec`` of every edge. A system's energy is the sum of its atoms' energies, its
forces are its atoms' rows, and its virial ``W = −Σ_e g_e ⊗ v_e`` sums over its own edges
(each edge's term is booked to its centre atom, and the atoms' terms are summed per system).
The model is local (no term couples atoms that share no path of edges), so these are the
numbers of one-by-one :meth:`~mdband.Potential.evaluate` to rounding.

**Batches.** Systems are taken in order and packed into model calls of at most ``batch_size``
systems and ``batch_atoms`` atoms (:data:`DEFAULT_BATCH_ATOMS` when None), and never larger
than the memory budget lets run unchunked (the ``memory_budget`` setting, through
:meth:`Potential.would_chunk`): a budget splits a batch. A system that alone exceeds the budget
is evaluated alone, in chunks, as :meth:`~mdband.Potential.evaluate` would. A batch that runs
out of GPU memory all the same is split in two and retried.

**CUDA graphs.** Where the potential replays CUDA graphs (``cuda_graphs`` on), a batch's atoms
are padded to an atom bucket (:func:`atom_capacity`) with isolated atoms and its edges to an
edge bucket (:func:`mdband.step_graph.edge_capacity`) with the padding edges of
:mod:`mdband.step_graph` (beyond the cutoff: exactly zero weight); each bucket is replayed
from a graph captured at its second use (:class:`BatchGraphs`, its own buckets and memory
pool). Elsewhere the batch runs eagerly, unpadded.

**Charge/spin models** (``add_chg_spin_ebd``): every system has its own total charge and spin
multiplicity: ``atoms.info["charge"]`` / ``["spin"]`` of ASE atoms (as
:class:`mdband.Calculator` reads them), a :class:`~mdband.io.frames.Frame`'s ``charge`` /
``spin`` (deepmd-kit data's ``charge_spin.npy``), the ``charge`` / ``spin`` fields of a
:class:`BatchSystem`; what a system lacks is the model's ``default_chg_spin``
(:mod:`mdband.charge_spin`). One model call takes one (charge, spin) row per system and the
system of every atom. A model that takes neither ignores the values of atoms and frames (common
metadata) and refuses those of a :class:`BatchSystem`, as ``evaluate(charge=...)`` does.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np
import torch
from ase import Atoms

from mdband.cell_list import cell_list_edges
from mdband.charge_spin import refuse_unused
from mdband.errors import MdbandError
from mdband.graph import build_edge_graph, validate_structure
from mdband.io.frames import Frame
from mdband.result import Result
from mdband.step_graph import DeviceStep, StepGraphs, edge_capacity
from mdband.validate import check_frame_input

#: most atoms one model call takes when ``batch_atoms`` is None, per device type; the memory
#: budget may cut a batch shorter (CPU: ``benchmarks/batch_throughput.py``)
DEFAULT_BATCH_ATOMS = {"cpu": 1024, "cuda": 32768}
#: smallest atom bucket step (atoms) of a CUDA-graph batch
MIN_ATOM_GRANULE = 16


class BatchSystem(NamedTuple):
    """One structure of :meth:`~mdband.Potential.evaluate_many` given as a record.

    ``positions`` (N, 3) Å; ``cell`` (3, 3) rows are the cell vectors, or None for open
    boundaries; ``pbc`` one bool or three; ``species`` chemical symbols or atomic numbers;
    ``charge`` (e) and ``spin`` (2S+1) for a charge/spin model (None: its default). Plain
    tuples ``(positions, cell, pbc, species)`` (or with charge and spin) are read the same way.
    """

    positions: object
    cell: object = None
    pbc: object = False
    species: object = None
    charge: object = None
    spin: object = None


def atom_capacity(n_atoms: int) -> int:
    """Return the padded atom count of a CUDA-graph batch of ``n_atoms`` atoms.

    It is the next multiple of ``next_pow2(n) / 16`` (at least :data:`MIN_ATOM_GRANULE`): at
    most 16 buckets per doubling, under 12.5 % of the atoms or 16 atoms of padding (isolated
    atoms: no edge work). A pure function of the atom count (0 for 0).
    """
    if n_atoms <= 0:
        return 0
    granule = max(MIN_ATOM_GRANULE, (1 << (int(n_atoms) - 1).bit_length()) // 16)
    return -(-int(n_atoms) // granule) * granule


def batch_forward(pot, types, src, dst, vectors, charge_spin=None, systems=None):
    """Run one model call over concatenated systems.

    Returns (atom energies (N,), forces (N, 3), per-atom virials (N, 9)), float64 device
    tensors; ``vectors`` (E, 3) float64 on the device; ``charge_spin`` (S, 2) and ``systems``
    (N,): a charge/spin model's rows and each atom's.

    An edge's virial term ``−g_e ⊗ v_e`` is booked to its centre atom ``dst``; a system's
    virial is the sum over its atoms (rows xx, xy, xz, yx, … of ``W``). A direct-force model
    (deepmd-kit's dens mode) gives its own forces and NaN virials.
    """
    n = int(types.shape[0])
    out = pot.evaluate_edges(types, src, dst, vectors, charge_spin=charge_spin, systems=systems)
    if out.forces is not None:  # a direct-force model: no virial (NaN, as evaluate gives it)
        nan = torch.full((n, 9), float("nan"), dtype=torch.float64, device=out.forces.device)
        return out.atom_energy, out.forces.to(torch.float64), nan
    g = out.edge_grad.to(torch.float64)
    forces, _ = pot.assemble(g, vectors, src, dst, n, out.extra.get("csr_pair"))
    w = -(g[:, :, None] * vectors[:, None, :]).reshape(-1, 9)
    atom_w = torch.zeros(n, 9, dtype=torch.float64, device=g.device).index_add_(0, dst, w)
    return out.atom_energy, forces, atom_w


class BatchStep(DeviceStep):
    """A :class:`~mdband.step_graph.DeviceStep` of concatenated systems.

    Its outputs are :func:`batch_forward`'s (per-atom virials instead of one virial). A
    charge/spin model's buffers hold a row per atom at most (a system has at least one atom)
    and each atom's row; the rows past the batch's systems repeat its first, and the padding
    atoms take it.
    """

    def __init__(self, potential, mode: str, n_atoms: int, capacity: int) -> None:
        super().__init__(potential, mode, n_atoms, capacity)
        self.systems = None
        if self.charge_spin is not None:
            i64 = dict(dtype=torch.int64, device=potential.device)
            self.charge_spin = torch.zeros(n_atoms, 2, **i64)
            self.systems = torch.zeros(n_atoms, **i64)

    def load(self, types, src, dst, rows, positions=None, cell=None, charge_spin=None,
             systems=None) -> None:  # fmt: skip
        """Copy a batch into the step's buffers (and a charge/spin model's rows and systems)."""
        super().load(types, src, dst, rows, positions, cell)
        if self.charge_spin is not None:
            assert self.systems is not None  # made with charge_spin
            s, n = int(charge_spin.shape[0]), int(systems.shape[0])
            self.charge_spin[:s].copy_(charge_spin)
            self.charge_spin[s:].copy_(charge_spin[:1].expand(self.n_atoms - s, 2))
            self.systems[:n].copy_(systems)
            self.systems[n:].zero_()

    def compute(self, pot):
        """Run :func:`batch_forward` on the buffers; record the model call's chunk count."""
        out = batch_forward(pot, self.types, self.src, self.dst, self.edge_vectors(),
                            self.charge_spin, self.systems)  # fmt: skip
        self.chunks = pot.last_chunks
        return out


class BatchGraphs(StepGraphs):
    """CUDA-graph replay of batches.

    With ``capture=False`` batches run padded but eager (how the CPU tests see the padding).
    Buckets are keyed by the padded atom count and the edge capacity.
    """

    step_class = BatchStep

    def run_batch(self, types, src, dst, vectors, charge_spin=None, systems=None):
        """Return :func:`batch_forward`'s outputs for a batch, replayed from its bucket.

        The batch's ``types`` are already padded to :func:`atom_capacity` (padding atoms
        isolated); edges unpadded; ``charge_spin`` (S, 2) and ``systems`` (the real atoms') of
        a charge/spin model.
        """
        frame = (types, src, dst, vectors, None, None, charge_spin, systems)
        return self._evaluate("vectors", frame)


@dataclass
class _Prepared:
    """One system ready for a batch: types and its own edge list (local atom indices)."""

    index: int
    types: np.ndarray
    src: np.ndarray | torch.Tensor
    dst: np.ndarray | torch.Tensor
    vectors: np.ndarray | torch.Tensor
    charge_spin: tuple[int, int] | None = None  # a charge/spin model's (charge, spin)

    @property
    def n_atoms(self) -> int:
        """Number of atoms of the system."""
        return int(self.types.shape[0])

    @property
    def n_edges(self) -> int:
        """Number of edges of the system's neighbour list."""
        return int(self.src.shape[0])


def _host(x):
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


def as_record(item, charge_spin: bool = True) -> BatchSystem:
    """Return ``item`` as a :class:`BatchSystem`.

    ``item`` is ASE ``Atoms``, an mdband :class:`~mdband.io.frames.Frame`, a
    :class:`BatchSystem` or a 4- or 6-tuple; the charge and spin of atoms (``info``) and frames
    are taken only with ``charge_spin`` (a model that takes them).
    """
    if isinstance(item, Atoms):
        cs = (item.info.get("charge"), item.info.get("spin")) if charge_spin else ()
        return BatchSystem(item.positions, item.cell.array, item.pbc, item.numbers, *cs)
    if isinstance(item, Frame):
        cs = (item.charge, item.spin) if charge_spin else ()
        return BatchSystem(item.positions, item.cell, item.pbc, item.species, *cs)
    if isinstance(item, BatchSystem):
        return item
    if isinstance(item, (tuple, list)) and len(item) in (4, 6):
        return BatchSystem(*item)
    raise MdbandError(
        "expected ase.Atoms, an mdband Frame or a (positions, cell, pbc, species[, charge, "
        f"spin]) record, got {type(item).__name__}"
    )


class BatchEvaluator:
    """Packs systems into batches and evaluates them for one potential.

    Parameters
    ----------
    potential : Potential
    batch_size : int, optional
        Most systems per model call (None: no limit besides atoms and memory).
    batch_atoms : int, optional
        Most atoms per model call (None: :data:`DEFAULT_BATCH_ATOMS` of the device).
    graphs : BatchGraphs, optional
        The potential's CUDA-graph replay of batches (None: eager).
    compute_virial : bool
        False gives zero virials.
    """

    def __init__(self, potential, *, batch_size=None, batch_atoms=None, graphs=None,
                 compute_virial: bool = True) -> None:  # fmt: skip
        self.pot = potential
        if potential.spin is not None:
            raise MdbandError(
                "evaluate_many does not batch spin models (every atom's magnetic moment); "
                "evaluate them one by one: Potential.evaluate(..., magmoms=...)"
            )
        for name, value in (("batch_size", batch_size), ("batch_atoms", batch_atoms)):
            if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
                raise MdbandError(f"{name} must be a positive integer, got {value!r}")
        self.batch_size = None if batch_size is None else int(batch_size)
        dev = potential.device.type
        self.batch_atoms = DEFAULT_BATCH_ATOMS[dev] if batch_atoms is None else int(batch_atoms)
        self.graphs = graphs
        self.compute_virial = bool(compute_virial)
        self.on_device = potential.neighbour_backend == "cell_list"
        #: model calls made so far
        self.calls = 0

    # ------------------------------------------------------------------ preparation
    def prepare(self, index: int, item) -> _Prepared:
        """Return the checked types and neighbour list of system ``index``.

        Errors name the system.
        """
        try:
            return self._prepare(index, as_record(item, self.pot.charge_spin is not None))
        except MdbandError as exc:
            exc.args = (f"system {index}: {exc}",)
            raise

    def _prepare(self, index: int, rec: BatchSystem) -> _Prepared:
        check_frame_input(rec.positions, rec.cell, rec.pbc)
        pos = np.ascontiguousarray(_host(rec.positions), dtype=np.float64)
        cell = np.zeros((3, 3)) if rec.cell is None else np.asarray(_host(rec.cell), np.float64)
        pbc = np.broadcast_to(np.asarray(_host(rec.pbc), dtype=bool), (3,)).copy()
        if rec.species is None:
            raise MdbandError("no species given")
        types = self.pot.types_of(_host(rec.species))
        if types.shape[0] != pos.shape[0]:
            raise MdbandError(f"{pos.shape[0]} positions but {types.shape[0]} species")
        validate_structure(pos, cell, pbc)
        cs = self._charge_spin(rec)
        if self.on_device:  # the cell list on the potential's device
            dev = self.pot.device
            pos_t = torch.as_tensor(pos, device=dev)
            cell_t = torch.as_tensor(cell, device=dev)
            src, dst, shifts = cell_list_edges(pos_t, cell_t, tuple(pbc), self.pot.cutoff,
                                               host_cell=cell)  # fmt: skip
            vec = pos_t[src] - pos_t[dst] + shifts.to(torch.float64) @ cell_t
            return _Prepared(index, types, src, dst, vec, cs)
        g = build_edge_graph(pos, cell, pbc, self.pot.cutoff)
        vec = pos[g.src] - pos[g.dst] + g.shifts @ cell
        return _Prepared(index, types, g.src, g.dst, vec, cs)

    def _charge_spin(self, rec: BatchSystem) -> tuple[int, int] | None:
        """Return the (charge, spin) row of a charge/spin model's system, None for others.

        The row holds the system's values, else the model's defaults
        (:class:`~mdband.charge_spin.MissingChargeSpinError` without); other models refuse
        given values (:func:`mdband.charge_spin.refuse_unused`).
        """
        inputs = self.pot.charge_spin
        if inputs is None:
            refuse_unused(rec.charge, rec.spin)
            return None
        return inputs.resolve(rec.charge, rec.spin)

    # ------------------------------------------------------------------ packing
    def _fits(self, n_systems: int, n_atoms: int, n_edges: int) -> bool:
        """Tell whether a batch of this size may run as one unchunked model call."""
        if self.batch_size is not None and n_systems > self.batch_size:
            return False
        if n_atoms > self.batch_atoms:
            return False
        if self.graphs is not None:  # the padded sizes are what runs
            n_atoms, n_edges = atom_capacity(n_atoms), edge_capacity(n_edges)
        return not self.pot.would_chunk(n_atoms, n_edges)

    def run(self, systems: Iterable) -> Iterator[list[tuple[int, Result]]]:
        """Yield ``(index, Result)`` of every system, in order: one list per model call."""
        pending: list[_Prepared] = []
        atoms = edges = 0
        for index, item in enumerate(systems):
            p = self.prepare(index, item)
            if pending and not self._fits(len(pending) + 1, atoms + p.n_atoms, edges + p.n_edges):
                yield from self._flush(pending)
                pending, atoms, edges = [], 0, 0
            pending.append(p)
            atoms += p.n_atoms
            edges += p.n_edges
        if pending:
            yield from self._flush(pending)

    def _flush(self, batch: list[_Prepared]) -> Iterator[list[tuple[int, Result]]]:
        """Yield the results of ``batch``: one model call, or two halves after an OOM.

        After running out of GPU memory the batch is split in two halves, recursively, down to
        single systems, whose error is raised.
        """
        try:
            out = self._evaluate(batch)
        except torch.OutOfMemoryError:
            if len(batch) < 2:
                raise
            out = None  # outside the handler: the failed call's tensors went with it
        if out is None:
            if self.pot.device.type == "cuda":
                torch.cuda.empty_cache()
            half = len(batch) // 2
            yield from self._flush(batch[:half])
            yield from self._flush(batch[half:])
            return
        yield [(p.index, r) for p, r in zip(batch, out)]

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self, batch: list[_Prepared]) -> list[Result]:
        """Run one model call over the systems of ``batch``.

        Systems without atoms take no part (zeros).
        """
        full = [p for p in batch if p.n_atoms > 0]
        if not full:
            return [_empty() for _ in batch]
        results = iter(self._call(full))
        return [next(results) if p.n_atoms > 0 else _empty() for p in batch]

    def _call(self, batch: list[_Prepared]) -> list[Result]:
        """Run the model call over ``batch`` (systems of at least one atom)."""
        dev = self.pot.device
        counts = [p.n_atoms for p in batch]
        n = sum(counts)
        offsets = np.cumsum([0, *counts[:-1]])
        types = torch.as_tensor(np.concatenate([p.types for p in batch]), device=dev)
        if self.on_device:
            src = torch.cat([cast(torch.Tensor, p.src) + int(o) for p, o in zip(batch, offsets)])
            dst = torch.cat([cast(torch.Tensor, p.dst) + int(o) for p, o in zip(batch, offsets)])
            vec = torch.cat([cast(torch.Tensor, p.vectors) for p in batch])
        else:
            src = torch.as_tensor(np.concatenate([p.src + o for p, o in zip(batch, offsets)]),
                                  device=dev)  # fmt: skip
            dst = torch.as_tensor(np.concatenate([p.dst + o for p, o in zip(batch, offsets)]),
                                  device=dev)  # fmt: skip
            vec = torch.as_tensor(np.concatenate([p.vectors for p in batch]), device=dev)
        self.calls += 1
        system = torch.repeat_interleave(  # output_size: no device sync
            torch.arange(len(batch), device=dev),
            torch.as_tensor(counts, device=dev),
            output_size=n,
        )
        cs = {}
        if self.pot.charge_spin is not None:  # one row per system, and each atom's system
            rows = torch.tensor([p.charge_spin for p in batch], dtype=torch.int64, device=dev)
            cs = {"charge_spin": rows, "systems": system}
        if self.graphs is not None and src.shape[0] > 0:
            pad = atom_capacity(n) - n
            padded = torch.cat([types, types.new_zeros(pad)])  # isolated atoms of type 0
            out = self.graphs.run_batch(padded, src, dst, vec, **cs)
            atom_e, forces, atom_w = (t[:n] for t in out)
            chunks = out.chunks
        else:
            atom_e, forces, atom_w = batch_forward(self.pot, types, src, dst, vec, **cs)
            chunks = self.pot.last_chunks
        f64 = dict(dtype=torch.float64, device=dev)
        energy = torch.zeros(len(batch), **f64).index_add_(0, system, atom_e)
        virial = torch.zeros(len(batch), 9, **f64)
        if self.compute_virial:
            virial.index_add_(0, system, atom_w)
        # one device → host copy for the whole batch
        host = torch.cat([energy, virial.reshape(-1), atom_e, forces.reshape(-1)]).cpu().numpy()
        s = len(batch)
        e_host, v_host = host[:s], host[s : 10 * s].reshape(s, 3, 3)
        a_host = host[10 * s : 10 * s + n]
        f_host = host[10 * s + n :].reshape(n, 3)
        out = []
        for k, (o, c) in enumerate(zip(offsets, counts)):
            out.append(Result(float(e_host[k]), f_host[o : o + c], v_host[k],
                              a_host[o : o + c], chunks=chunks))  # fmt: skip
        return out


def _empty() -> Result:
    return Result(0.0, np.zeros((0, 3)), np.zeros((3, 3)), np.zeros(0), chunks=1)


#: each potential's CUDA-graph replay of batches (made at its first batched call)
_GRAPHS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def batch_graphs(potential) -> BatchGraphs | None:
    """Return the :class:`BatchGraphs` of ``potential`` where it replays CUDA graphs, else None."""
    if potential.cuda_graphs != "on":
        return None
    graphs = _GRAPHS.get(potential)
    if graphs is None:
        graphs = _GRAPHS[potential] = BatchGraphs(potential)
    return graphs


def evaluate_many(potential, systems, *, batch_size: int | None = None,
                  batch_atoms: int | None = None, compute_virial: bool = True,
                  progress: Callable[[int], None] | None = None) -> list[Result]:  # fmt: skip
    """Run :meth:`BatchEvaluation.evaluate_many` of ``potential`` (see there)."""
    ev = BatchEvaluator(potential, batch_size=batch_size, batch_atoms=batch_atoms,
                        graphs=batch_graphs(potential),
                        compute_virial=compute_virial)  # fmt: skip
    out: list[Result] = []
    for done in ev.run(systems):
        out.extend(r for _, r in done)
        if progress is not None:
            progress(len(out))
    return out


class BatchEvaluation:
    """Provide :meth:`evaluate_many`, which :class:`~mdband.potential.Potential` inherits."""

    def evaluate_many(self, systems, *, batch_size: int | None = None,
                      batch_atoms: int | None = None, compute_virial: bool = True,
                      progress: Callable[[int], None] | None = None) -> list[Result]:  # fmt: skip
        """Compute energy, forces, virial and per-atom energies of many frames in few calls.

        Parameters
        ----------
        systems : iterable
            ASE ``Atoms``, mdband :class:`~mdband.io.frames.Frame` objects,
            :class:`BatchSystem` records or ``(positions, cell, pbc, species[, charge, spin])``
            tuples; any sizes (zero atoms too), cells, boundary conditions and species. A
            charge/spin model reads each system's total charge and spin multiplicity
            (``atoms.info["charge"]`` / ``["spin"]``, the frame's or record's; see
            :mod:`mdband.batch`).
        batch_size : int, optional
            Most systems per model call (None: no limit of its own).
        batch_atoms : int, optional
            Most atoms per model call (None: :data:`DEFAULT_BATCH_ATOMS` of the device); the
            memory budget (``memory_budget`` setting) may cut a call shorter, never longer. A
            larger system runs alone (chunked if the budget says so).
        compute_virial : bool
            False gives zero virials.
        progress : callable, optional
            Called with the number of systems done after every model call.

        Returns
        -------
        list of Result
            One numpy :class:`~mdband.result.Result` per system, in input order: the numbers
            of :meth:`evaluate` to rounding (see :mod:`mdband.batch`; zeros for no atoms).

        Raises
        ------
        MdbandError
            A system is not a structure or is unusable, or its charge or spin is missing or
            bad (the message starts ``system K:``), or the model is a spin model (not
            batched).
        """
        return evaluate_many(self, systems, batch_size=batch_size, batch_atoms=batch_atoms,
                             compute_virial=compute_virial, progress=progress)  # fmt: skip
