"""One frame's inputs as a step of :class:`~mdband.potential.Potential` takes them.

:meth:`Potential.evaluate <mdband.potential.Potential.evaluate>` takes positions, cell, pbc and
species as numpy arrays or torch tensors. This module turns them into what one step evaluates
(:class:`FrameInputs`): the type index of every atom, the neighbour list of the potential's
backend (the torch cell list on its device, or vesin on numpy: ``neighbour_backend``), and
the positions and cell where that list lives. Numpy inputs and CPU tensors (and any tensors of
a vesin potential) take the numpy path, bitwise the same numbers; tensors on the potential's
CUDA device stay there. It also puts an edge list's arrays on the device for an eager step.

It evaluates nothing and reads nothing of the model: the potential runs the step (a replayed
CUDA graph or the eager forward and backward). ``pot`` below is the
:class:`~mdband.potential.Potential`; only its public members are used.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from mdband.errors import MdbandError
from mdband.graph import EdgeGraph, validate_structure
from mdband.neighbours import DeviceNeighbourList, HostNeighbourList
from mdband.result import Result


class FrameInputs(NamedTuple):
    """What one step evaluates of a frame: the arguments of ``Potential._run_graph``.

    ``types`` (N,) type indices, ``graph`` the frame's edges, ``positions`` (N, 3) and ``cell``
    (3, 3) Å, float64: numpy arrays on the vesin path, tensors on the potential's device on the
    cell-list path (types and edges likewise).
    """

    types: np.ndarray | torch.Tensor
    graph: EdgeGraph
    positions: np.ndarray | torch.Tensor
    cell: np.ndarray | torch.Tensor


def takes_host_path(positions: torch.Tensor, device: torch.device, backend: str) -> bool:
    """Tell whether tensor ``positions`` are evaluated as numpy arrays.

    CPU tensors are (bitwise the same numbers), and every tensor of a potential whose
    ``backend`` is vesin; tensors on the potential's CUDA ``device`` stay there. Tensors on
    another device are an :class:`~mdband.errors.MdbandError`.
    """
    if positions.device != device and positions.device.type != "cpu":
        raise MdbandError(f"positions are on {positions.device} but the potential is on {device}")
    return positions.device.type == "cpu" or backend == "vesin"


def host_copies(positions: torch.Tensor, cell) -> tuple[np.ndarray, np.ndarray | None]:
    """Return numpy copies of tensor ``positions`` and ``cell`` (None stays None)."""
    cell_np = None if cell is None else torch.as_tensor(cell).detach().cpu().numpy()
    return positions.detach().cpu().numpy(), cell_np


def tensor_result(res, device):
    """Return numpy :class:`~mdband.result.Result` ``res`` as tensors on ``device`` (energy 0-d)."""
    return Result(
        energy=torch.tensor(res.energy, dtype=torch.float64, device=device),
        forces=torch.from_numpy(res.forces).to(device),
        virial=torch.from_numpy(res.virial).to(device),
        atom_energy=torch.from_numpy(res.atom_energy).to(device),
        chunks=res.chunks,
    )


def _host_arrays(positions, cell) -> tuple[np.ndarray, np.ndarray]:
    """Return float64 numpy positions (N, 3) and cell (3, 3) (zeros for None)."""
    pos = np.asarray(positions, dtype=np.float64)
    cell_np = np.zeros((3, 3)) if cell is None else np.asarray(cell, dtype=np.float64)
    return pos, cell_np.reshape(3, 3)


def _device_arrays(
    positions: torch.Tensor, cell, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Return float64 positions and cell on ``device`` and a host copy of the cell.

    ``positions`` are a tensor on ``device``; ``cell`` None gives zeros.
    """
    pos_t = positions.detach().to(torch.float64)
    if cell is None:
        cell_t = torch.zeros(3, 3, dtype=torch.float64, device=device)
    else:
        cell_t = torch.as_tensor(cell, device=device).detach().to(torch.float64)
    return pos_t, cell_t.reshape(3, 3), cell_t.cpu().numpy().reshape(3, 3)


def frame_inputs(pot, positions, cell, pbc, species, graph, neighbours, types_of) -> FrameInputs:
    """Return what the step of ``pot`` evaluates for one frame.

    ``positions`` and ``cell`` are numpy (array_like) or tensors on the potential's device
    (:func:`takes_host_path` false); ``types_of(species, n_atoms)`` gives the type indices.
    Tensors and the cell-list backend give the device path: ``pbc`` is checked and the edges
    are ``graph``, else those of ``neighbours`` (None: a fresh device list). The vesin backend
    gives the numpy path: ``graph``, else ``pot.edges`` (:func:`frame_edges`).
    """
    if isinstance(positions, torch.Tensor):  # on the potential's CUDA device: it stays there
        pos_t, cell_t, cell_np = _device_arrays(positions, cell, pot.device)
        types = types_of(species, pos_t.shape[0])
        return _device_frame(pot, pos_t, cell_t, pbc, types, graph, neighbours, cell_np)
    pos, cell_np = _host_arrays(positions, cell)
    types = types_of(species, pos.shape[0])
    if pot.neighbour_backend == "cell_list":
        pos_t, cell_t = (torch.as_tensor(a, device=pot.device) for a in (pos, cell_np))
        return _device_frame(pot, pos_t, cell_t, pbc, types, graph, neighbours, cell_np)
    if graph is None:  # vesin's numpy edges
        graph = pot.edges(pos, cell_np, pbc, neighbours)
    return FrameInputs(types, graph, pos, cell_np)


def _device_frame(pot, pos_t, cell_t, pbc, types, graph, neighbours, cell_np) -> FrameInputs:
    """Return the frame of positions and cell on the potential's device (the cell-list path).

    ``pbc`` is checked; the edges are ``graph``, else those of ``neighbours`` (None: a fresh
    device list).
    """
    pbc_np = np.broadcast_to(np.asarray(pbc, dtype=bool), (3,)).copy()
    validate_structure(np.zeros((0, 3)), cell_np, pbc_np)
    if graph is None:
        graph = device_edges(pot, neighbours, pos_t, cell_t, pbc_np, cell_np)
    return FrameInputs(torch.as_tensor(types, device=pot.device), graph, pos_t, cell_t)


def frame_edges(pot, positions, cell, pbc, neighbours=None) -> EdgeGraph:
    """Return the neighbour list ``pot.evaluate`` would use for this frame (numpy inputs).

    On the device (tensor edges) for the cell-list backend, vesin's numpy edges otherwise;
    ``neighbours``: a list that follows a trajectory (None: a fresh one).
    """
    pos, cell_np = _host_arrays(positions, cell)
    if pot.neighbour_backend == "cell_list":
        pos_t, cell_t = (torch.as_tensor(a, device=pot.device) for a in (pos, cell_np))
        return device_edges(pot, neighbours, pos_t, cell_t, pbc, cell_np)
    return (neighbours or HostNeighbourList(pot.cutoff)).edges(pos, cell_np, pbc)


def device_edges(pot, neighbours, pos_t, cell_t, pbc, cell_np) -> EdgeGraph:
    """Return the edges from ``neighbours`` for device positions and cell.

    ``neighbours`` None: a fresh device list (``pot.neighbour_list()``). A DeviceNeighbourList
    also gets the host copy of the cell (no copy back).
    """
    nl = neighbours if neighbours is not None else pot.neighbour_list()
    if isinstance(nl, DeviceNeighbourList):
        return nl.edges(pos_t, cell_t, pbc, host_cell=cell_np)
    return nl.edges(pos_t, cell_t, pbc)


def edge_tensors(
    frame: FrameInputs, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (types, src, dst, edge vectors) of ``frame`` as tensors on ``device``.

    The edge vectors come from the frame's positions and cell (:meth:`EdgeGraph.edge_vectors`);
    its arrays may be numpy or tensors.
    """
    pos_t = torch.as_tensor(frame.positions, device=device)
    cell_t = torch.as_tensor(frame.cell, device=device).reshape(3, 3)
    edge_vec = frame.graph.edge_vectors(pos_t, cell_t)
    src, dst = (torch.as_tensor(a, device=device) for a in (frame.graph.src, frame.graph.dst))
    return torch.as_tensor(frame.types, device=device), src, dst, edge_vec


def device_tensors(device: torch.device, *arrays) -> tuple[torch.Tensor, ...]:
    """Return ``arrays`` (numpy, or tensors on any device) as tensors on ``device``."""
    return tuple(
        a.to(device)
        if isinstance(a, torch.Tensor)
        else torch.as_tensor(np.ascontiguousarray(a), device=device)
        for a in arrays
    )
