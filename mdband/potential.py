"""Potential: the one entry point every front end (ASE, LAMMPS, CLI) calls.

A :class:`Potential` wraps an energy module ``model(types, src, dst, edge_vec, exchange=None)``
that returns per-atom energies. Forces and the virial come from one autograd pass over the edge
vectors: with ``g = ∂E/∂edge_vec``, ``F_k = Σ_{dst=k} g − Σ_{src=k} g`` and
``W = −Σ_e g_e ⊗ edge_vec_e`` (eV; ASE stress = −W / V); many frames: :mod:`mdband.batch`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mdband import charge_spin as _cs
from mdband import host_memory as _host_memory
from mdband.atom_virial import evaluate_atom_virial
from mdband.batch import BatchEvaluation
from mdband.contract import check_model
from mdband.frame_inputs import (
    FrameInputs,
    device_tensors,
    edge_tensors,
    frame_edges,
    frame_inputs,
    host_copies,
    takes_host_path,
    tensor_result,
)
from mdband.graph import EdgeGraph
from mdband.neighbours import HostNeighbourList
from mdband.result import (  # noqa: F401  (re-exported: front ends import them from here)
    EdgeResult,
    Result,
    _result,
    assemble_forces,
    resolve_device,
    resolve_dtype,
    weights_hash,
)
from mdband.settings import EngineSettings
from mdband.species import TypeLookup
from mdband.spin import evaluate_spin, leaf_gradients
from mdband.validate import check_frame_input

#: runs again in smaller chunks after an out-of-memory error, per evaluation
OOM_RETRIES = 3


class Potential(BatchEvaluation):
    """A loaded model, ready to evaluate frames.

    Parameters
    ----------
    model : torch.nn.Module
        ``model(types, src, dst, edge_vec, exchange=None) -> (N,) float64 atom energies``,
        declaring :class:`mdband.contract.ModelContract` (else ModelContractError).
    kind : str
        Model family stored in the model file (``"sezm"``; ``"lj"`` for the test potential).
    type_map : list of str
        Element symbol of each type index.
    cutoff : float
        Neighbour cutoff in Å.
    config : dict
        JSON-serialisable configuration from which ``model`` is rebuilt.
    neighbour_list : {"auto", "cell_list", "vesin"}, optional
        Neighbour-list backend for models without engine settings (the model's
        ``settings.neighbour_list`` wins; see :class:`mdband.settings.EngineSettings`).
    host_memory : {"auto", "keep", "system"}, optional
        The ``host_memory`` setting for models without engine settings (likewise).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        kind: str,
        type_map: list[str],
        cutoff: float,
        config: dict,
        metadata: dict | None = None,
        device: str | torch.device | None = "auto",
        dtype: str | torch.dtype = "float32",
        neighbour_list: str | None = None,
        host_memory: str | bool | None = None,
    ) -> None:
        self.kind = kind
        self.type_map = list(type_map)
        self.cutoff = float(cutoff)
        self.config = config
        self.metadata = dict(metadata or {})
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype)
        # a torch.nn.Module declaring ModelContract (else ModelContractError): typed Any, as
        # Python has no intersection type of the two
        network: Any = check_model(model, kind)
        self.model = network.to(device=self.device, dtype=self.dtype).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        #: forces from the network, no virial (deepmd-kit's dens mode: mdband.contract)
        self.direct_forces = bool(self.model.direct_forces)
        self._types = TypeLookup(self.type_map)
        self.spin = self.model.spin  #: a spin model's SpinConfig (else None): mdband.spin
        self._hash: str | None = self.metadata.get("model_hash")
        #: dtype of the edge vectors handed to the model: float64 if it declares float64_edges
        self.edge_dtype = torch.float64 if self.model.float64_edges else self.dtype
        #: what the model takes of a system's charge and spin (None: nothing; charge_spin_of)
        self.charge_spin = self.model.charge_spin_inputs
        #: the network's engine settings (None: a kind without them, e.g. the test potentials)
        self.settings: EngineSettings | None = self.model.settings
        #: doubles per atom moved by one LAMMPS call of a per-layer ghost exchange (lammps/)
        self.exchange_width = int(self.model.exchange_width)
        self._steps = None  # StepGraphs
        self._step_chunks: int | None = None  # chunks of its last call
        settings = self.settings or EngineSettings.resolve(
            neighbour_list=neighbour_list, host_memory=host_memory
        )
        #: "cell_list" (torch, on the device) or "vesin" (numpy): see :meth:`neighbour_list`
        self.neighbour_backend = settings.neighbour_backend(self.device)
        #: what the ``host_memory`` setting did for this process, one line (mdband.host_memory)
        self.host_memory = _host_memory.apply(settings.host_memory, self.device)
        if self.model.zero_beyond_cutoff and self.device.type == "cuda":
            if settings.cuda_graphs == "auto":
                from mdband.step_graph import StepGraphs

                self._steps = StepGraphs(self)

    # ------------------------------------------------------------------ identity
    @property
    def model_hash(self) -> str:
        """sha256 of the config and the weights as loaded (stable across save/load)."""
        if self._hash is None:
            sd = {k: v.to(torch.float64) for k, v in self.model.state_dict().items()}
            self._hash = weights_hash(self.config, sd)
        return self._hash

    @property
    def rotation_layout(self) -> str:
        """Rotation storage the model uses (``"band"`` or ``"dense"``), ``"n/a"`` if none."""
        layout = self.model.rotation_layout
        return "n/a" if layout is None else str(layout.value)

    @property
    def rotation_layout_reason(self) -> str:
        """Why the model uses its rotation storage, one line ("" if none)."""
        return str(self.model.rotation_layout_reason)

    @property
    def cuda_graphs(self) -> str:
        """``"on"`` when evaluations replay CUDA graphs, else ``"off (reason)"``."""
        if self._steps is None:
            if self.device.type != "cuda":
                return "off (not on CUDA)"
            if not self.model.zero_beyond_cutoff:
                return f"off (model kind {self.kind!r} cannot pad its edge list)"
            return "off (cuda_graphs=off)"
        if self._steps.disabled_reason:
            return f"off (capture failed: {self._steps.disabled_reason})"
        return "on"

    @property
    def last_chunks(self) -> int:
        """Chunks of destination atoms the last evaluation used (1: unchunked, or a replay).

        A replayed CUDA graph runs no forward: 1 too.
        """
        if self._step_chunks is not None:
            return self._step_chunks
        chunking = self.model.chunking
        return 1 if chunking is None else int(chunking.last_chunks)

    def would_chunk(self, n_atoms: int, n_edges: int) -> bool:
        """Whether an evaluation of this size runs in chunks under the memory budget."""
        if self.model.chunking is None:
            return False
        like = torch.empty(0, dtype=self.dtype, device=self.device)
        return bool(self.model.chunking.would_chunk(int(n_atoms), int(n_edges), like))

    @property
    def memory_budget(self) -> str:
        """The resolved memory budget of an evaluation (``memory_budget`` setting), one line."""
        if self.model.chunking is None:
            return "n/a (this model is never chunked)"
        return self.model.chunking.memory_budget_text(self.device)

    def n_parameters(self) -> int:
        """Return the number of the model's parameters (elements of all its parameter tensors)."""
        return sum(p.numel() for p in self.model.parameters())

    # ------------------------------------------------------------------ species
    def types_of(self, species) -> np.ndarray:
        """Return the type indices of ``species`` (chemical symbols or atomic numbers).

        Vectorised; :class:`~mdband.errors.UnknownElementError` for elements the type map lacks.
        """
        return self._types(species)

    # ------------------------------------------------------------------ evaluation
    def charge_spin_of(self, charge=None, spin=None) -> torch.Tensor | None:
        """Return a system's ``charge_spin`` (:func:`mdband.charge_spin.charge_spin_tensor`)."""
        return _cs.charge_spin_tensor(self.charge_spin, charge, spin, self.device)

    def evaluate_edges(
        self,
        types: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        edge_vec: torch.Tensor,
        *,
        grad: bool = True,
        exchange=None,
        n_local: int | None = None,
        plan=None,
        magmoms: torch.Tensor | None = None,
        charge_spin: torch.Tensor | None = None,
        systems: torch.Tensor | None = None,
    ) -> EdgeResult:
        """Compute atom energies and ``∂E/∂edge_vec`` of a prepared edge list on ``device``.

        ``E`` sums the first ``n_local`` atom energies (all atoms when None); ghost atoms beyond
        ``n_local`` only provide features, as in LAMMPS. ``plan``, a ChunkPlan of a model that
        chunks (SeZM), fixes the chunks instead of the memory budget. An evaluation the
        budget planned that runs out of GPU memory is run again in chunks of half the edges
        (up to :data:`OOM_RETRIES` times) before the error is raised. ``magmoms``: mdband.spin.
        ``charge_spin``: from :meth:`charge_spin_of` (None: the model's defaults), or (S, 2)
        rows of S systems with ``systems`` the row of each atom (mdband.batch).
        """
        retries = 0
        while True:
            try:
                return self._evaluate_edges(types, src, dst, edge_vec, grad, exchange, n_local,
                                            plan, magmoms, charge_spin, systems)  # fmt: skip
            except torch.OutOfMemoryError:
                if not self._retry_in_chunks(plan, exchange, retries, int(types.shape[0])):
                    raise
            # outside the handler: the failed call's tensors went with its traceback
            retries += 1
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def _retry_in_chunks(self, plan, exchange, retries: int, n_atoms: int) -> bool:
        """Tell whether to run an evaluation again in smaller chunks after running out of memory.

        This follows an out-of-memory error of an evaluation the memory budget planned; the smaller
        chunks have half the edges of the failed call's largest chunk, for this call and the next
        ones (:meth:`SeZMDescriptor.shrink_chunks`). Not for fixed plans, multi-rank exchanges
        (every rank would have to repeat its exchanges) or CUDA-graph captures (:class:`StepGraphs`
        handles those), at most :data:`OOM_RETRIES` times per call.
        """
        chunking = self.model.chunking
        if chunking is None or plan is not None or exchange is not None or retries >= OOM_RETRIES:
            return False
        if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return False
        return bool(chunking.shrink_chunks(self.device, n_atoms))

    def _evaluate_edges(self, types, src, dst, edge_vec, grad, exchange, n_local, plan,
                        magmoms=None, cs=None, systems=None):  # fmt: skip
        grad = grad and not self.direct_forces
        self._step_chunks = None  # the model's own count from here on
        ev = edge_vec.detach().to(self.edge_dtype).requires_grad_(grad)
        model_kw = {} if plan is None else {"plan": plan}
        model_kw.update(_cs.model_kwargs(self.charge_spin, cs, self.device, systems))
        if magmoms is not None:  # a native spin model's moments: a second autograd leaf
            model_kw["magmoms"] = magmoms.detach().to(self.dtype).requires_grad_(grad)
        if n_local is not None and self.model.accepts_energy_rows:
            model_kw["energy_rows"] = int(n_local)
        csr_pair = None
        if self.model.accepts_edge_csr and self.settings.ops_on(ev):
            # both CSRs once per call where the fused ops run: the model's node sums and
            # by-source kernels and the force assembly read the same two (each sorts the edges)
            from mdband.kernels._common import csr

            n = int(types.shape[0])
            csr_pair = (csr(dst, n), csr(src, n))
            model_kw["csr_pair"] = csr_pair
        extra = {} if csr_pair is None else {"csr_pair": csr_pair}
        if self.direct_forces:
            model_kw.pop("energy_rows", None)
            with torch.no_grad():
                atom_e, forces = self.model.energies_and_forces(
                    types, src, dst, ev, exchange=exchange, **model_kw
                )
            extra["chunks"] = self.last_chunks
            return EdgeResult(atom_energy=atom_e.to(torch.float64), extra=extra, forces=forces)
        with torch.set_grad_enabled(grad):
            atom_e = self.model(types, src, dst, ev, exchange=exchange, **model_kw)
            atom_e = atom_e.to(torch.float64)
            e_local = atom_e if n_local is None else atom_e[:n_local]
            g = None
            if grad:
                g = leaf_gradients(e_local.sum(), ev, model_kw.get("magmoms"), extra)
        extra["chunks"] = self.last_chunks
        return EdgeResult(atom_energy=atom_e.detach(), edge_grad=None if g is None else g.detach(),
                          extra=extra)  # fmt: skip

    def neighbour_list(self, skin: float = 0.0):
        """Return a neighbour list for repeated :meth:`evaluate` calls (``neighbours=``).

        It is the torch cell list on this potential's device (default for CUDA potentials) or
        vesin on numpy (default on the CPU), as :attr:`neighbour_backend` says (setting
        ``neighbour_list``; see :mod:`mdband.neighbours`). ``skin`` (Å) > 0 reuses it while no
        atom moved more than ``skin / 2``.
        """
        from mdband.neighbours import DeviceNeighbourList

        if self.neighbour_backend == "cell_list":
            return DeviceNeighbourList(self.cutoff, skin, device=self.device)
        return HostNeighbourList(self.cutoff, skin)

    def evaluate(
        self,
        positions,
        cell=None,
        pbc=False,
        species=None,
        *,
        graph: EdgeGraph | None = None,
        neighbours=None,
        compute_virial: bool = True,
        magmoms=None,
        atom_virial: bool = False,
        charge=None,
        spin=None,
    ) -> Result:
        """Compute energy, forces, virial and per-atom energies of one frame.

        Parameters
        ----------
        positions : (N, 3) array_like or torch.Tensor, Å
            A tensor on this potential's device gives a :class:`Result` of tensors on that
            device (energy a 0-d tensor); numpy in gives numpy out. On CUDA the neighbour list
            is built on the GPU either way.
        cell : (3, 3) array_like or tensor, or None
            Rows are the cell vectors (Å); ignored for open boundaries.
        pbc : bool or sequence of 3 bools
        species : sequence of chemical symbols or atomic numbers (none: energy 0, no forces)
        graph : EdgeGraph, optional
            A neighbour list to reuse (must be within this model's cutoff for these positions).
        neighbours : optional
            A list from :meth:`neighbour_list` that follows a trajectory (Verlet skin).
        magmoms : (N, 3) array_like or tensor, μB
            Every atom's magnetic moment: needed by spin models (:attr:`spin`, mdband.spin).
        atom_virial : bool
            Also ``Result.atom_virial``: deepmd-kit's per-atom virials (mdband.atom_virial).
        charge, spin : int, optional
            Total charge (e), spin multiplicity (2S+1) of a charge/spin model (``add_chg_spin_ebd``,
            :mod:`mdband.charge_spin`); other models refuse them.
        """
        check_frame_input(positions, cell, pbc)
        tensors = isinstance(positions, torch.Tensor)
        cs = self.charge_spin_of(charge, spin)
        if atom_virial:
            e, f, v, av = evaluate_atom_virial(self, positions, cell, pbc, species, graph,
                                               neighbours, cs)  # fmt: skip
            return _result(e, f, v, True, not tensors, self.last_chunks, atom_virial=av)
        if self.spin is not None or magmoms is not None:
            e, f, v, mf = evaluate_spin(self, positions, cell, pbc, species, graph, neighbours,
                                        magmoms, cs)  # fmt: skip
            return _result(e, f, v, compute_virial, not tensors, self.last_chunks, mf)
        if tensors and takes_host_path(positions, self.device, self.neighbour_backend):
            res = self.evaluate(*host_copies(positions, cell), pbc, species, graph=graph,
                                neighbours=neighbours, compute_virial=compute_virial,
                                charge=charge, spin=spin)  # fmt: skip
            return tensor_result(res, positions.device)
        frame = frame_inputs(self, positions, cell, pbc, species, graph, neighbours,
                             self._types.of_frame)  # fmt: skip
        e, f, v = self._run_graph(frame, cs)
        return _result(e, f, v, compute_virial, not tensors, self.last_chunks)

    def _run_graph(self, frame: FrameInputs, cs=None):
        """Return (atom energies, forces, virial), float64 device tensors, of one frame.

        Edges: numpy arrays or tensors. Replayed step graphs when available, else eager.
        """
        graph = frame.graph
        if self._steps is not None and graph.n_edges > 0:
            out = self._steps.run(frame.types, graph.src, graph.dst, graph.shifts,
                                  frame.positions, frame.cell, cs)  # fmt: skip
            self._step_chunks = out.chunks
            return out
        dev = self.device
        if graph.n_atoms == 0:  # no atoms: no energy, no forces, no virial
            zero = torch.zeros(0, dtype=torch.float64, device=dev)
            return zero, zero.reshape(0, 3), torch.zeros(3, 3, dtype=torch.float64, device=dev)
        return self.forces_from_vectors(*edge_tensors(frame, dev), cs)

    def edges(self, positions, cell, pbc, neighbours=None) -> EdgeGraph:
        """Return the neighbour list :meth:`evaluate` would use for this frame (numpy inputs).

        On the device (tensor edges) for the cell-list backend, vesin's numpy edges otherwise
        (:func:`mdband.frame_inputs.frame_edges`).
        """
        return frame_edges(self, positions, cell, pbc, neighbours)

    def evaluate_vectors(self, types, src, dst, vectors, charge_spin=None):
        """Return atom energies (N,), forces (N, 3), virial (3, 3), float64 on ``device``.

        From edge arrays (numpy, or tensors on any device) whose atoms are all local (N =
        len(types); ``vectors`` (E, 3) Å); ``charge_spin`` from :meth:`charge_spin_of`. On CUDA
        the step replays from a CUDA graph (see :mod:`mdband.step_graph`).
        """
        if self._steps is not None and len(src) > 0:
            out = self._steps.run_vectors(types, src, dst, vectors, charge_spin)
            self._step_chunks = out.chunks
            return out
        types, src, dst, vectors = device_tensors(self.device, types, src, dst, vectors)
        return self.forces_from_vectors(types, src, dst, vectors, charge_spin)

    def graph_step(self, types, src, dst, edge_vec, charge_spin=None):
        """Run :meth:`forces_from_vectors`; also return the chunks its forward used.

        This is the step that :class:`~mdband.step_graph.StepGraphs` runs eagerly or captures.
        """
        out = self.forces_from_vectors(types, src, dst, edge_vec, charge_spin)
        return (*out, self.last_chunks)

    def forces_from_vectors(self, types, src, dst, edge_vec, charge_spin=None):
        """Return (atom energies, forces, virial), float64, of one evaluation of device tensors.

        The virial is NaN for a direct-force model, as deepmd-kit gives it; ``charge_spin``.
        """
        out = self.evaluate_edges(types, src, dst, edge_vec, charge_spin=charge_spin)
        if out.forces is not None:
            nan = torch.full((3, 3), float("nan"), dtype=torch.float64, device=out.forces.device)
            return out.atom_energy, out.forces, nan
        forces, virial = self.assemble(out.edge_grad, edge_vec.detach(), src, dst,
                                       int(types.shape[0]), out.extra.get("csr_pair"))  # fmt: skip
        return out.atom_energy, forces, virial

    #: forces and virial from ``∂E/∂edge_vec`` (:func:`mdband.result.assemble_forces`)
    assemble = staticmethod(assemble_forces)

    # ------------------------------------------------------------------ persistence
    def save(self, path) -> None:
        """Write mdband's own versioned model file (see :mod:`mdband.io.modelfile`).

        Its name ends in ``.mdband`` by convention, never in deepmd-kit's ``.pt``/``.pth``/``.pt2``
        (:class:`~mdband.errors.ModelFileError`).
        """
        from mdband.io.model_output import check_mdband_name
        from mdband.io.modelfile import save_model_file

        check_mdband_name(path)
        save_model_file(self, path)

    def save_deepmd(self, path, precision: str | None = None) -> None:
        """Write a deepmd-kit 3.2 training checkpoint (``.pt``) of this SeZM model.

        deepmd-kit's ``DeepPot``, ``dp --pt test`` and ``dp --pt freeze`` read with the same
        numbers (see :mod:`mdband.io.deepmd_export`); ``precision`` defaults to the weights'.
        """
        from mdband.io.deepmd_export import save_deepmd_checkpoint

        save_deepmd_checkpoint(self, path, precision)

    def __repr__(self) -> str:
        """Show kind, type map, cutoff, device, dtype and rotation layout."""
        return (
            f"Potential(kind={self.kind!r}, type_map={self.type_map}, cutoff={self.cutoff}, "
            f"device={self.device}, dtype={self.dtype}, layout={self.rotation_layout})"
        )
