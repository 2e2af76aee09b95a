"""Per-atom virials, partitioned as deepmd-kit partitions them.

Every edge ``e`` (centre ``dst``, neighbour ``src``, ``r_e = x_src − x_dst``) carries the
virial ``w_e = −g_e ⊗ r_e`` with ``g_e = ∂E/∂r_e``, component ``[a, b] = −g_a r_b``; the
virial of the frame is ``W = Σ_e w_e``. deepmd-kit's ``DeepPot.eval(..., atomic=True)`` (the
SeZM model's ``edge_energy_deriv``, deepmd-kit 3.2) puts **half of each edge's** ``w_e`` **on
each of its two atoms** (a periodic image counts as its owner), so the per-atom virials sum to
``W``. :func:`atom_virials` reproduces that to round-off; its ``(N, 3, 3)`` result reshaped to
``(N, 9)`` is deepmd-kit's ``atom_virial`` layout (row-major ``[a, b]``).

LAMMPS' per-atom virial (``compute stress/atom``, ``compute centroid/stress/atom``) names its
components by the ``r_a f_b`` convention, which is the transpose: LAMMPS ``xy`` is
``[1, 0]`` here. :data:`LAMMPS_CENTROID` orders the nine components as LAMMPS' centroid
virial does (``xx yy zz xy xz yz yx zx zy``), with the same index map as deepmd-kit's
``pair_style deepmd``; its first six are the six-component per-atom virial.
"""

from __future__ import annotations

import torch

#: flattened ``[a, b]`` index of each LAMMPS centroid component xx yy zz xy xz yz yx zx zy
LAMMPS_CENTROID = (0, 4, 8, 3, 6, 7, 1, 2, 5)


def atom_virials(edge_grad, edge_vec, src, dst, n_atoms: int) -> torch.Tensor:
    """Compute per-atom virials (N, 3, 3), float64, eV, with deepmd-kit's partition.

    Half of each edge's ``−g ⊗ r`` goes on ``src``, half on ``dst``; ``Σ_i`` of the result is
    the virial.

    Parameters
    ----------
    edge_grad, edge_vec : (E, 3) tensors
        ``∂E/∂r_e`` and ``r_e = x_src − x_dst`` (Å).
    src, dst : (E,) int64 tensors
        Atom rows (a periodic image given as its owner's row).
    n_atoms : int
    """
    g = edge_grad.detach().to(torch.float64)
    w = -(g.unsqueeze(2) * edge_vec.detach().to(torch.float64).unsqueeze(1)).reshape(-1, 9)
    half = 0.5 * w
    out = torch.zeros((int(n_atoms), 9), dtype=torch.float64, device=g.device)
    out.index_add_(0, src, half)
    out.index_add_(0, dst, half)
    return out.reshape(-1, 3, 3)


def lammps_order(atom_virial: torch.Tensor) -> torch.Tensor:
    """Reorder (N, 3, 3) per-atom virials as LAMMPS' nine centroid columns (N, 9).

    The columns are ``xx yy zz xy xz yz yx zx zy`` (the first six: ``compute stress/atom``'s).
    """
    flat = atom_virial.reshape(-1, 9)
    return flat[:, list(LAMMPS_CENTROID)]


def ase_stresses(atom_virial, volume: float):
    """Convert per-atom virials (N, 3, 3; numpy) to ASE's per-atom stresses.

    The stresses (N, 6; eV/Å³, Voigt ``xx yy zz yz xz xy``) are ``−virial_i / V`` symmetrised,
    so that they sum to ASE's ``stress`` (``Calculator.get_stresses``, as ASE's own pair
    potentials define it).
    """
    import numpy as np

    w = np.asarray(atom_virial, dtype=np.float64)
    sym = 0.5 * (w + np.swapaxes(w, 1, 2))
    s = -sym / float(volume)
    return np.stack(
        [s[:, 0, 0], s[:, 1, 1], s[:, 2, 2], s[:, 1, 2], s[:, 0, 2], s[:, 0, 1]], axis=1
    )


def evaluate_atom_virial(pot, positions, cell, pbc, species, graph=None, neighbours=None,
                         charge_spin=None):  # fmt: skip
    """Compute what :meth:`Potential.evaluate` computes with ``atom_virial=True``.

    The result is float64 tensors (atom energies, forces, virial, per-atom virials (N, 3, 3)),
    from one eager evaluation (no CUDA-graph replay) on the neighbour list ``pot.edges`` gives
    (or ``graph``), on the device of ``positions`` when a tensor, else on the potential's. A
    direct-force model's virials are NaN, as its virial is; spin models are refused.
    ``charge_spin``: a charge/spin model's (:meth:`Potential.charge_spin_of`; None: its
    defaults).
    """
    import numpy as np

    from mdband.errors import MdbandError

    if pot.spin is not None:
        raise MdbandError("per-atom virials of spin models are not implemented (atom_virial)")

    def host(a):
        return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a

    pos = np.asarray(host(positions), dtype=np.float64)
    cell_np = np.zeros((3, 3)) if cell is None else np.asarray(host(cell), dtype=np.float64)
    cell_np = cell_np.reshape(3, 3)
    types = pot.types_of(host(species))
    n = int(pos.shape[0])
    if types.shape[0] != n:
        raise MdbandError(f"{n} positions but {types.shape[0]} species")
    if graph is None:
        graph = pot.edges(pos, cell_np, pbc, neighbours)
    dev = pot.device
    vec = graph.edge_vectors(torch.as_tensor(pos, device=dev), torch.as_tensor(cell_np, device=dev))
    src, dst = (torch.as_tensor(a, device=dev) for a in (graph.src, graph.dst))
    out = pot.evaluate_edges(torch.as_tensor(types, device=dev), src, dst, vec,
                             charge_spin=charge_spin)  # fmt: skip
    if out.forces is not None:  # a direct-force (dens) model: no virial
        forces = out.forces
        virial = torch.full((3, 3), float("nan"), dtype=torch.float64, device=forces.device)
        per_atom = virial.repeat(n, 1, 1)
    else:
        forces, virial = pot.assemble(out.edge_grad, vec.detach(), src, dst, n,
                                      out.extra.get("csr_pair"))  # fmt: skip
        per_atom = atom_virials(out.edge_grad, vec, src, dst, n)
    parts = (out.atom_energy, forces, virial, per_atom)
    if isinstance(positions, torch.Tensor):  # tensors in: tensors out on their device
        parts = tuple(t.to(positions.device) for t in parts)
    return parts
