"""Spin models at run time: the magnetic moments in, magnetic forces out (deepmd-kit's two schemes).

A spin model (``config["spin"]``, :class:`~mdband.config.SpinConfig`) takes each atom's magnetic
moment ``s`` (``magmoms`` (N, 3), μB, global frame; moments of non-magnetic types are ignored)
and gives, besides the energy, forces ``-∂E/∂r`` and per-atom energies:

* magnetic forces ``-∂E/∂s`` (N, 3; eV/μB; zero on non-magnetic atoms);
* the virial of a strain that leaves the moments unchanged (deepmd-kit's definition).

``native``: the moments are features of the network (:mod:`mdband.model.spin`); one backward
gives ``∂E/∂edge_vec`` and ``∂E/∂s``.

``deepspin``: each magnetic atom i gets a virtual atom at ``r_i + d_i``, ``d_i = virtual_scale[t_i]
s_i``, of type ``t_i + len(type_map)``, and the network sees both. Its edges are deepmd-kit's
(``SpinModel.extend_nlist`` then ``_format_nlist``): from the real neighbour list, each centre
(real or virtual) takes its own partner and the real and virtual atoms of its real neighbours,
those within the cutoff of the centre; the real neighbour list keeps each atom's ``sel``
nearest (the descriptor's ``sel``: deepmd-kit's list is truncated there). deepmd-kit also puts
placeholder sites at the non-magnetic atoms and excludes their edges; mdband leaves them out.
Then ``F_i = F_real(i) + F_virtual(i)``, ``-∂E/∂s_i =
virtual_scale[t_i] F_virtual(i)`` and ``W = -Σ_e g_e ⊗ v_e - Σ_i F_virtual(i) ⊗ d_i``.
"""

from __future__ import annotations

import numpy as np
import torch

from mdband.errors import MdbandError, SpinInputError
from mdband.graph import COINCIDENT_R2


def check_magmoms(magmoms, n_atoms: int, spin) -> torch.Tensor | np.ndarray | None:
    """Return the moments as given, checked against the model.

    ``spin``: the model's SpinConfig or None.
    """
    if spin is None:
        if magmoms is None:
            return None
        raise MdbandError("magmoms given, but this model is not a spin model")
    if magmoms is None:
        raise SpinInputError(
            f"this is a {spin.scheme} spin model: give every atom's magnetic moment, "
            "magmoms=(N, 3) vectors in μB (ASE: atoms.set_initial_magnetic_moments)"
        )
    shape = tuple(magmoms.shape)
    if shape == (n_atoms,):
        raise SpinInputError(
            "collinear moments (one number per atom) do not say the moments' direction, which "
            "a spin model needs: give (N, 3) vectors, e.g. m[:, None] * [0, 0, 1]"
        )
    if shape != (n_atoms, 3):
        raise SpinInputError(f"magmoms must have shape ({n_atoms}, 3), got {shape}")
    finite = torch.isfinite(magmoms).all() if isinstance(magmoms, torch.Tensor) else (
        np.isfinite(magmoms).all())  # fmt: skip
    if not bool(finite):
        raise SpinInputError("magmoms contain NaN or inf")
    return magmoms


def leaf_gradients(energy, edge_vec, magmoms, extra: dict) -> torch.Tensor:
    """Return ``∂E/∂edge_vec`` (zeros where E does not depend on it).

    With ``magmoms`` (a native spin model's moments, an autograd leaf) also set
    ``extra["magmom_grad"] = ∂E/∂magmoms`` (float64).
    """
    leaves = [edge_vec] if magmoms is None else [edge_vec, magmoms]
    grads = torch.autograd.grad(energy, leaves, allow_unused=True)
    g, *gm = (torch.zeros_like(x) if gx is None else gx for gx, x in zip(grads, leaves))
    if gm:
        extra["magmom_grad"] = gm[0].detach().to(torch.float64)
    return g


def evaluate_spin(pot, positions, cell, pbc, species, graph, neighbours, magmoms,
                  charge_spin=None):  # fmt: skip
    """Compute what :meth:`Potential.evaluate` returns for a spin model (``pot.spin``).

    The result is float64 tensors: (atom energies, forces, virial, magnetic forces), on the device
    of ``positions`` when a tensor, else on the potential's. ``charge_spin``: a charge/spin model's
    (:meth:`Potential.charge_spin_of`; None: its defaults), one row for the real and virtual atoms
    alike (deepmd-kit's spin model conditions the whole extended frame).
    """

    def host(a):
        return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a

    pos = np.asarray(host(positions), dtype=np.float64)
    cell_np = np.zeros((3, 3)) if cell is None else np.asarray(host(cell), dtype=np.float64)
    cell_np = cell_np.reshape(3, 3)
    if isinstance(species, torch.Tensor):
        species = species.detach().cpu().numpy()
    types = pot.types_of(species)
    if types.shape[0] != pos.shape[0]:
        raise MdbandError(f"{pos.shape[0]} positions but {types.shape[0]} species")
    check_magmoms(magmoms, pos.shape[0], pot.spin)
    if graph is None:
        graph = pot.edges(pos, cell_np, pbc, neighbours)
    dev = pot.device
    pos_t = torch.as_tensor(pos, device=dev)
    vec = graph.edge_vectors(pos_t, torch.as_tensor(cell_np, device=dev))
    src = torch.as_tensor(graph.src, device=dev)
    dst = torch.as_tensor(graph.dst, device=dev)
    types_t = torch.as_tensor(types, device=dev)
    m = torch.as_tensor(host(magmoms), dtype=torch.float64, device=dev)
    scheme = _native if pot.spin.scheme == "native" else _deepspin
    out = scheme(pot, types_t, src, dst, vec, m, charge_spin)
    if isinstance(positions, torch.Tensor):  # tensors in: tensors out on their device
        out = tuple(t.to(positions.device) for t in out)
    return out


def _native(pot, types, src, dst, vec, m, cs=None):
    out = pot.evaluate_edges(types, src, dst, vec, magmoms=m, charge_spin=cs)
    forces, virial = pot.assemble(out.edge_grad, vec, src, dst, int(types.shape[0]),
                                  out.extra.get("csr_pair"))  # fmt: skip
    return out.atom_energy, forces, virial, -out.extra["magmom_grad"]


def _deepspin(pot, types, src, dst, vec, m, cs=None):
    spin = pot.spin
    n = int(types.shape[0])
    scale = torch.tensor(spin.virtual_scale, dtype=torch.float64, device=types.device)[types]
    mag = scale != 0.0
    owner = torch.nonzero(mag).reshape(-1)  # the magnetic atoms, in order
    d = m * scale[:, None]  # (N, 3)
    types2, src2, dst2, vec2, disp = deepspin_edges(types, src, dst, vec, d, mag, spin.sel,
                                                    len(spin.use_spin), pot.cutoff)  # fmt: skip
    out = pot.evaluate_edges(types2, src2, dst2, vec2, n_local=n, charge_spin=cs)
    f2, w2 = pot.assemble(out.edge_grad, vec2, src2, dst2, int(types2.shape[0]),
                          out.extra.get("csr_pair"))  # fmt: skip
    f_virtual = f2[n:]
    virial = w2 - f_virtual.T @ disp
    forces = f2[:n].index_add(0, owner, f_virtual)
    fm = torch.zeros_like(forces).index_add(0, owner, f_virtual * scale[owner, None])
    return out.atom_energy[:n], forces, virial, fm


def deepspin_edges(types, src, dst, vec, d, mag, sel: int, ntypes_real: int, rcut: float):
    """Build the deepspin scheme's nodes and edges from the real atoms' edges within ``rcut``.

    Returns ``(types2, src2, dst2, vec2, disp)``: the N real atoms then one virtual atom per
    magnetic atom (in atom order; type ``t + ntypes_real``), their edges, and each virtual
    atom's displacement ``d`` (M, 3) from its atom.
    """
    n = int(types.shape[0])
    if src.numel() and int(torch.bincount(dst, minlength=n).max()) > sel:
        near = _nearest(dst, torch.linalg.vector_norm(vec, dim=-1), sel, n)
        src, dst, vec = src[near], dst[near], vec[near]
    owner = torch.nonzero(mag).reshape(-1)
    node = torch.full((n,), -1, dtype=torch.long, device=types.device)
    node[owner] = n + torch.arange(owner.shape[0], device=types.device)
    v_src, v_dst = node[src], node[dst]  # virtual atoms of each edge's ends (-1: none)
    ds, dd = d[src], d[dst]
    own = torch.arange(n, device=types.device)
    parts = [
        (src, dst, vec),  # real <- real
        (v_src, dst, vec + ds),  # real <- virtual of the neighbour
        (src, v_dst, vec - dd),  # virtual <- real neighbour
        (v_src, v_dst, vec + ds - dd),  # virtual <- virtual
        (node, own, d),  # real <- its own virtual
        (own, node, -d),  # virtual <- its real atom
    ]
    # no edge from or to the placeholder of a non-magnetic atom (deepmd-kit excludes them)
    s2, t2, v2 = (torch.cat([p[k][(p[0] >= 0) & (p[1] >= 0)] for p in parts]) for k in range(3))
    r2 = (v2 * v2).sum(-1)
    inside = (r2 <= rcut * rcut) & (r2 > COINCIDENT_R2)  # a zero moment: no own-partner edge
    types2 = torch.cat([types, types[owner] + ntypes_real])
    return types2, s2[inside], t2[inside], v2[inside], d[owner]


def _nearest(centre, r, k: int, n: int) -> torch.Tensor:
    """Return the mask of the ``k`` nearest neighbours of each centre.

    deepmd-kit's neighbour list keeps the ``sel`` nearest real neighbours.
    """
    order = torch.argsort(r, stable=True)
    order = order[torch.argsort(centre[order], stable=True)]
    counts = torch.bincount(centre, minlength=n)
    start = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.shape[0], device=order.device) - start[centre[order]]
    return rank < k
