"""What an evaluation returns, and the small rules every Potential applies.

The results are :class:`Result` and :class:`EdgeResult`; the rules every
:class:`~mdband.potential.Potential` applies are the device and dtype names and the weights
hash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mdband.errors import MdbandError
from mdband.validate import check_device

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """Return the torch dtype of a dtype or its name: float32 or float64 (else MdbandError)."""
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES.values():
            raise MdbandError(f"unsupported dtype {dtype}; use float32 or float64")
        return dtype
    if dtype not in _DTYPES:
        raise MdbandError(f"unsupported dtype {dtype!r}; use 'float32' or 'float64'")
    return _DTYPES[dtype]


def resolve_device(device: str | torch.device | None) -> torch.device:
    """Return the torch device a device name means, by mdband's one device rule.

    ``None`` or ``"auto"`` is CUDA when available, else CPU.
    """
    if device is None or device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = check_device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise MdbandError("device 'cuda' requested but CUDA is not available")
    if dev.type == "cuda" and dev.index is None:  # "cuda" means the current GPU: name it
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


@dataclass
class Result:
    """The result of one evaluation: energy, forces, virial and per-atom energies.

    Energy (eV), forces (N, 3; eV/Å), virial (3, 3; eV) and per-atom energies (N,); for a spin
    model also the magnetic forces ``-∂E/∂s`` (N, 3; eV/μB; None for other models).

    They are numpy arrays (energy a float) for numpy input; torch float64 tensors on the input's
    device (energy a 0-d tensor) for tensor input. ``atom_virial`` (N, 3, 3; eV) is there when the
    evaluation was asked for it (``atom_virial=True``), else None: deepmd-kit's per-atom virial
    (``DeepPot.eval(..., atomic=True)``; ``atom_virial.reshape(N, 9)`` is its layout), half of each
    edge's ``−g ⊗ r`` on each of its atoms, summing to ``virial`` (:mod:`mdband.atom_virial`).
    """

    energy: float
    forces: np.ndarray
    virial: np.ndarray
    atom_energy: np.ndarray
    chunks: int = 1  # chunks of destination atoms the evaluation used (memory budget)
    magnetic_forces: np.ndarray | None = None
    atom_virial: np.ndarray | None = None

    def stress(self, volume: float) -> np.ndarray:
        """Cauchy stress (3, 3; eV/Å³) in ASE's sign convention."""
        return -self.virial / volume


@dataclass
class EdgeResult:
    """Tensor results of :meth:`Potential.evaluate_edges` (all float64).

    ``edge_grad`` is ∂E/∂edge_vec, or for a :class:`~mdband.contract.DirectForceModel` the
    ``forces`` (N, 3) it returns are given instead.
    """

    atom_energy: torch.Tensor
    edge_grad: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    forces: torch.Tensor | None = None


def _result(atom_e, forces, virial, compute_virial: bool, to_numpy: bool, chunks=1,
            magnetic_forces=None, atom_virial=None) -> Result:  # fmt: skip
    if not compute_virial:
        virial = torch.zeros_like(virial)
    if not to_numpy:
        return Result(atom_e.sum(), forces, virial, atom_e, chunks=chunks,
                      magnetic_forces=magnetic_forces, atom_virial=atom_virial)  # fmt: skip
    # one device → host copy (each copy waits for the device): energy, atom energies, forces,
    # virial (and magnetic forces) in one float64 vector
    n = atom_e.shape[0]
    parts = [atom_e.sum().reshape(1), atom_e, forces.reshape(-1), virial.reshape(-1)]
    if magnetic_forces is not None:
        parts.append(magnetic_forces.reshape(-1))
    if atom_virial is not None:
        parts.append(atom_virial.reshape(-1))
    host = torch.cat(parts).cpu().numpy()
    tail = 10 + 4 * n + (0 if magnetic_forces is None else 3 * n)
    return Result(
        energy=float(host[0]),
        forces=host[1 + n : 1 + 4 * n].reshape(n, 3),
        virial=host[1 + 4 * n : 10 + 4 * n].reshape(3, 3),
        atom_energy=host[1 : 1 + n],
        chunks=chunks,
        magnetic_forces=None if magnetic_forces is None else host[10 + 4 * n : tail].reshape(n, 3),
        atom_virial=None if atom_virial is None else host[tail:].reshape(n, 3, 3),
    )


def weights_hash(config: dict, state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 over the canonical config JSON and the raw bytes of every tensor (sorted keys)."""
    h = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for key in sorted(state_dict):
        t = state_dict[key].detach().cpu().contiguous()
        h.update(key.encode())
        h.update(str(t.dtype).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def assemble_forces(edge_grad, edge_vec, src, dst, n_atoms: int, csr_pair=None):
    """Assemble forces (N, 3) and virial (3, 3), float64, from ``g = ∂E/∂edge_vec`` (E, 3).

    ``csr_pair``: the edges' (dst CSR, src CSR) when already built.
    """
    if edge_grad.is_cuda:
        # deterministic CSR reduction with float64 accumulation (no atomics)
        from mdband.kernels.force_assembly import force_assembly

        d_csr, s_csr = csr_pair if csr_pair is not None else (None, None)
        return force_assembly(edge_grad, edge_vec, src, dst, n_atoms, d_csr, s_csr)
    g = edge_grad.to(torch.float64)
    forces = torch.zeros(n_atoms, 3, dtype=torch.float64, device=g.device)
    forces.index_add_(0, dst, g)
    forces.index_add_(0, src, -g)
    return forces, -(g.T @ edge_vec.to(torch.float64))


def verified_hash(
    config: dict,
    state_dict: dict[str, torch.Tensor],
    claimed: str | None,
    parameters: set[str] | frozenset[str] = frozenset(),
) -> str:
    """Return the hash of a model with these weights: the claimed one where the weights give it.

    The hash is ``claimed`` (a model file's recorded hash) where :func:`weights_hash` gives it from
    ``state_dict`` as stored, cast to float64 (how a :class:`Potential` hashes its own weights) or
    cast back to float32 (a float32 source saved in float64: every float64 weight, those that are
    float32 numbers, or the ``parameters`` among them, its buffers kept, as deepmd-kit stores a
    float32 model); otherwise the weights' own hash, so weights changed after the hash was made (a
    flipped bit) change it.
    """
    own = weights_hash(config, state_dict)
    if claimed is None or claimed == own:
        return own
    wide = {k: v.to(torch.float64) if v.is_floating_point() else v for k, v in state_dict.items()}
    if weights_hash(config, wide) == claimed:
        return claimed
    exact = {
        k
        for k, v in state_dict.items()
        if v.dtype == torch.float64 and torch.equal(v.to(torch.float32).to(torch.float64), v)
    }
    for narrowed in (exact, exact & set(parameters)):
        narrow = {k: v.to(torch.float32) if k in narrowed else v for k, v in state_dict.items()}
        if narrowed and weights_hash(config, narrow) == claimed:
            return claimed
    return own
