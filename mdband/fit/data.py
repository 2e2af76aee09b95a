"""Training data for ``mdband fit``: batches of labelled frames.

Frames are read by :func:`mdband.io.systems.read_systems` (every format it knows: deepmd-kit
systems, LAMMPS, VASP, extxyz and other ASE files, ASE databases); the names a fit needs are
re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mdband.io.ase_frames import (  # noqa: F401  (re-exported: the fit API reads frames here)
    ENERGY_KEYS,
    FORCES_KEYS,
    STRESS_KEYS,
    VIRIAL_KEYS,
    frame_from_atoms,
)
from mdband.io.frames import DatasetError, Frame, elements_of  # noqa: F401
from mdband.io.systems import read_dataset, read_frames  # noqa: F401


def split_indices(n: int, val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Split ``range(n)`` at random into train and validation indices.

    Each part gets at least one frame when ``n >= 2`` and ``val_fraction > 0``.
    """
    order = np.random.default_rng(seed).permutation(n)
    n_val = int(round(val_fraction * n))
    if val_fraction > 0 and n >= 2:
        n_val = min(max(n_val, 1), n - 1)
    else:
        n_val = 0
    return sorted(order[n_val:].tolist()), sorted(order[:n_val].tolist())


# ---------------------------------------------------------------------------- tensors
@dataclass
class GraphFrame:
    """A frame as fixed tensors: its edge vectors do not change during training."""

    types: torch.Tensor  # (N,) int64
    src: torch.Tensor  # (E,)
    dst: torch.Tensor  # (E,)
    edge_vec: torch.Tensor  # (E, 3) float64
    energy: float
    forces: torch.Tensor  # (N, 3) float64
    virial: torch.Tensor | None  # (3, 3) float64
    counts: np.ndarray  # (ntypes,) atoms of each type

    @property
    def n_atoms(self) -> int:
        """Return the number of atoms."""
        return int(self.types.shape[0])


def to_graph(frame: Frame, type_index: dict[str, int], cutoff: float) -> GraphFrame:
    """Convert ``frame`` to a :class:`GraphFrame` with its neighbour list within ``cutoff``."""
    unknown = sorted({s for s in frame.species if s not in type_index})
    if unknown:
        from mdband.errors import UnknownElementError

        raise UnknownElementError(unknown, list(type_index))
    types = np.array([type_index[s] for s in frame.species], dtype=np.int64)
    from mdband.neighbours import host_edge_graph  # the cell list: not at import

    assert frame.energy is not None, "to_graph needs a labelled frame"  # read_dataset checks
    g = host_edge_graph(frame.positions, frame.cell, frame.pbc, cutoff)
    pos = torch.as_tensor(frame.positions, dtype=torch.float64)
    cell = torch.as_tensor(frame.cell, dtype=torch.float64)
    ev = g.edge_vectors(pos, cell)
    return GraphFrame(
        types=torch.as_tensor(types),
        src=torch.as_tensor(g.src),
        dst=torch.as_tensor(g.dst),
        edge_vec=ev,
        energy=frame.energy,
        forces=torch.as_tensor(frame.forces, dtype=torch.float64),
        virial=None if frame.virial is None else torch.as_tensor(frame.virial),
        counts=np.bincount(types, minlength=len(type_index)),
    )


@dataclass
class Batch:
    """Several frames as one disjoint graph."""

    types: torch.Tensor
    src: torch.Tensor
    dst: torch.Tensor
    edge_vec: torch.Tensor
    atom_frame: torch.Tensor  # (N,) frame of each atom
    edge_frame: torch.Tensor  # (E,) frame of each edge
    n_atoms: torch.Tensor  # (B,) float64
    energy: torch.Tensor  # (B,)
    forces: torch.Tensor  # (N, 3)
    virial: torch.Tensor  # (B, 3, 3), zeros where unknown
    has_virial: torch.Tensor  # (B,) bool
    n_frames: int

    def to(self, device) -> Batch:
        """Return a copy of the batch with its tensors on ``device``."""
        kw = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k, v in kw.items():
            if isinstance(v, torch.Tensor):
                kw[k] = v.to(device)
        return Batch(**kw)


def collate(frames: list[GraphFrame]) -> Batch:
    """Join ``frames`` into one :class:`Batch` (atom and edge indices offset per frame)."""
    off_n, off_e = 0, 0
    src, dst, afr, efr = [], [], [], []
    for i, f in enumerate(frames):
        src.append(f.src + off_n)
        dst.append(f.dst + off_n)
        afr.append(torch.full((f.n_atoms,), i, dtype=torch.int64))
        efr.append(torch.full((f.src.shape[0],), i, dtype=torch.int64))
        off_n += f.n_atoms
        off_e += f.src.shape[0]
    vir = torch.stack([f.virial if f.virial is not None else torch.zeros(3, 3) for f in frames])
    return Batch(
        types=torch.cat([f.types for f in frames]),
        src=torch.cat(src),
        dst=torch.cat(dst),
        edge_vec=torch.cat([f.edge_vec for f in frames]),
        atom_frame=torch.cat(afr),
        edge_frame=torch.cat(efr),
        n_atoms=torch.tensor([float(f.n_atoms) for f in frames], dtype=torch.float64),
        energy=torch.tensor([f.energy for f in frames], dtype=torch.float64),
        forces=torch.cat([f.forces for f in frames]),
        virial=vir.to(torch.float64),
        has_virial=torch.tensor([f.virial is not None for f in frames]),
        n_frames=len(frames),
    )


def fit_energy_shift(
    counts: np.ndarray, energies: np.ndarray, rcond: float | None = None
) -> np.ndarray:
    """Per-type energies ``s`` minimising ``|counts @ s - energies|²`` (least squares).

    Types that never occur get 0; with a rank-deficient ``counts`` (e.g. every frame has the
    same composition) ``lstsq`` returns the minimum-norm solution, which still reproduces the
    mean energy.
    """
    counts = np.asarray(counts, dtype=np.float64)
    energies = np.asarray(energies, dtype=np.float64)
    present = counts.sum(axis=0) > 0
    shift = np.zeros(counts.shape[1])
    if present.any():
        sol, *_ = np.linalg.lstsq(counts[:, present], energies, rcond=rcond)
        shift[present] = sol
    return shift
