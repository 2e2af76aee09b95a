"""Committee: several potentials evaluated on one frame, sharing one neighbour list.

The first model is the one that drives the dynamics; a committee never changes its numbers.
Models whose cutoff equals the first model's use the first model's neighbour list as it is;
models with another cutoff use one list built once with the largest cutoff, filtered to each
model's cutoff (edge order kept). Type maps may differ: every model maps the chemical symbols
of the frame to its own types and must know all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mdband.batch import BatchSystem
from mdband.committee.deviation import ModelDeviation, model_deviation
from mdband.errors import MdbandError, UnknownElementError
from mdband.graph import EdgeGraph
from mdband.potential import Potential, Result
from mdband.validate import check_frame_input


class CommitteeError(MdbandError, ValueError):
    """A committee cannot be formed (fewer than two models) or cannot evaluate a frame."""


@dataclass
class CommitteeResult:
    """Every model's result on one frame and the models' deviations.

    ``results`` holds every model's :class:`~mdband.potential.Result`, the first model's first.
    """

    results: list[Result]
    deviation: ModelDeviation


def _on_host(graph: EdgeGraph) -> EdgeGraph:
    """``graph`` with numpy arrays (a device list's tensors copied back)."""
    if isinstance(graph.src, np.ndarray):
        return graph
    src, dst, shifts = (t if isinstance(t, np.ndarray) else np.asarray(t.cpu())
                        for t in (graph.src, graph.dst, graph.shifts))  # fmt: skip
    return EdgeGraph(src, dst, shifts, n_atoms=graph.n_atoms)


def filter_graph(graph: EdgeGraph, positions, cell, cutoff: float) -> EdgeGraph:
    """Return the edges of ``graph`` shorter than ``cutoff`` (Å), in their original order."""
    pos = np.asarray(positions, dtype=np.float64)
    vec = pos[graph.src] - pos[graph.dst] + graph.shifts @ np.asarray(cell, dtype=np.float64)
    keep = np.flatnonzero(np.einsum("ij,ij->i", vec, vec) < cutoff * cutoff)
    return EdgeGraph(graph.src[keep], graph.dst[keep], graph.shifts[keep], graph.n_atoms)


def _without_charge_spin(item):
    """Return ``item`` of :meth:`Committee.evaluate_many` without a record's charge and spin.

    Atoms and frames carry theirs as data, which a model that takes none ignores.
    """
    if isinstance(item, BatchSystem):
        return item._replace(charge=None, spin=None)
    if isinstance(item, (tuple, list)) and len(item) == 6:
        return tuple(item[:4])
    return item


class Committee:
    """A committee of at least two :class:`~mdband.potential.Potential` objects.

    Parameters
    ----------
    potentials : sequence of Potential
        The first one drives the dynamics; the others only enter the deviations.
    """

    def __init__(self, potentials: Sequence[Potential]) -> None:
        self.potentials = list(potentials)
        if len(self.potentials) < 2:
            raise CommitteeError(
                f"a committee needs at least two models, got {len(self.potentials)}"
            )
        for k, pot in enumerate(self.potentials):
            if not isinstance(pot, Potential):
                raise CommitteeError(f"committee member {k} is not a Potential: {pot!r}")
            if pot.spin is not None:  # its evaluations would need the moments (not passed)
                raise CommitteeError(
                    f"committee member {k} is a spin model; committees of spin models are "
                    "not supported"
                )
        self.cutoffs = [p.cutoff for p in self.potentials]
        self.max_cutoff = max(self.cutoffs)

    @classmethod
    def load(cls, paths, device="cpu", dtype="float32", head=None) -> Committee:
        """Load every model file with :func:`mdband.load_model` (same device, dtype, head)."""
        from mdband.loader import load_model

        return cls([load_model(p, device=device, dtype=dtype, head=head) for p in paths])

    def __len__(self) -> int:
        """Return the number of models."""
        return len(self.potentials)

    @property
    def shares_cutoff(self) -> bool:
        """True when every model has the first model's cutoff (one neighbour list for all)."""
        return all(c == self.cutoffs[0] for c in self.cutoffs)

    def check_species(self, species) -> None:
        """Raise :class:`UnknownElementError` if a model does not know one of ``species``."""
        for k, pot in enumerate(self.potentials):
            try:
                pot.types_of(species)
            except UnknownElementError as exc:
                err = UnknownElementError(exc.elements, exc.type_map)
                err.args = (f"committee model {k + 1}: {exc}",)
                raise err from None

    def graphs(self, positions, cell, pbc, first_graph: EdgeGraph | None = None):
        """Return the neighbour list of every model.

        Models with the first model's cutoff get the first model's list (``first_graph``, or
        built with its cutoff); the others get the largest-cutoff list filtered to their cutoff.
        """
        c0 = self.cutoffs[0]
        if first_graph is None:  # the list the first model's own evaluate builds (on the GPU
            first_graph = self.potentials[0].edges(positions, cell, pbc)  # for CUDA models)
        g0 = first_graph
        if any(c != c0 for c in self.cutoffs):
            g0 = _on_host(g0)  # filtered with numpy below
        wide = None
        out = []
        for c in self.cutoffs:
            if c == c0:
                out.append(g0)
                continue
            if wide is None:
                from mdband.neighbours import host_edge_graph  # the cell list: not at import

                wide = (
                    g0
                    if self.max_cutoff == c0
                    else host_edge_graph(positions, cell, pbc, self.max_cutoff)
                )
            out.append(filter_graph(wide, positions, cell, c))
        return out

    def evaluate(
        self,
        positions,
        cell=None,
        pbc=False,
        species=None,
        *,
        graph: EdgeGraph | None = None,
        first: Result | None = None,
        charge=None,
        spin=None,
    ) -> CommitteeResult:
        """Evaluate every model on one frame and compute the deviations.

        Parameters
        ----------
        positions, cell, pbc, species
            As :meth:`mdband.potential.Potential.evaluate`.
        graph : EdgeGraph, optional
            The first model's neighbour list of this frame (within its cutoff).
        first : Result, optional
            The first model's result on this frame, if already computed (it is reused as is).
        charge, spin : int, optional
            Total charge and spin multiplicity, given to every model that takes them
            (:mod:`mdband.charge_spin`; the others take none).
        """
        check_frame_input(positions, cell, pbc)  # the checks of Potential.evaluate
        pos = np.asarray(positions, dtype=np.float64)
        cell_np = np.zeros((3, 3)) if cell is None else np.asarray(cell, dtype=np.float64)
        self.check_species(species)
        graphs = self.graphs(pos, cell_np, pbc, graph)
        results = []
        for k, (pot, g) in enumerate(zip(self.potentials, graphs)):
            if k == 0 and first is not None:
                results.append(first)
            else:
                cs = {} if pot.charge_spin is None else {"charge": charge, "spin": spin}
                results.append(pot.evaluate(pos, cell_np, pbc, species, graph=g, **cs))
        devi = model_deviation(
            np.stack([r.forces for r in results]),
            np.stack([r.virial for r in results]),
            np.array([r.energy for r in results]),
        )
        return CommitteeResult(results, devi)

    def evaluate_many(self, systems, **options) -> list[CommitteeResult]:
        """Evaluate every system as :meth:`evaluate` does, each model in batches.

        Each model evaluates all of the systems in batches (:meth:`mdband.Potential.evaluate_many`;
        ``options`` as there, ``progress`` excepted) with its own neighbour lists; results in input
        order. Each system's total charge and spin multiplicity reach the models that take them
        (:mod:`mdband.batch`); the others take none, as in :meth:`evaluate`.
        """
        systems = list(systems)
        plain = [_without_charge_spin(s) for s in systems]
        per_model = []
        for k, pot in enumerate(self.potentials):
            try:
                items = systems if pot.charge_spin is not None else plain
                per_model.append(pot.evaluate_many(items, **options))
            except UnknownElementError as exc:
                err = UnknownElementError(exc.elements, exc.type_map)
                err.args = (f"committee model {k + 1}: {exc}",)
                raise err from None
        out = []
        for results in zip(*per_model):
            devi = model_deviation(
                np.stack([r.forces for r in results]),
                np.stack([r.virial for r in results]),
                np.array([r.energy for r in results]),
            )
            out.append(CommitteeResult(list(results), devi))
        return out

    def __repr__(self) -> str:
        """Show the number of models and their cutoffs."""
        return f"Committee({len(self)} models, cutoffs {self.cutoffs})"
