"""Zone bridging with the ZBL repulsion (deepmd-kit's ``bridging_method: "zbl"``).

A bridged DPA4 model is the SeZM network on *clamped* geometry plus an analytic pair energy, as
deepmd-kit 3.2.0 builds it (``SeZMModel`` with ``InnerPotential``, the descriptor's
``InnerClamp`` and ``BridgingSwitch``). With the window [r_in, r_out] (Å), Δ = r_out − r_in and
t = clip((r − r_in)/Δ, 0, 1) on every edge (src = neighbour, dst = centre):

* **Inner clamp.** The network sees each edge vector rescaled to the length
  ``r̃ = r_in + Δ·h(t)`` (``r`` itself from r_out on), ``h(t) = 20t⁴ − 45t⁵ + 36t⁶ − 10t⁷``:
  geometry closer than r_in is frozen, C³ across the window.
* **Source gate** (deepmd-kit's "Source Freeze Propagation Gate"). With ``w = s(t̃)`` on the
  *clamped* length, ``s(t) = 35t⁴ − 84t⁵ + 70t⁶ − 20t⁷``, every atom j gets
  ``η_j = Π_{e: src_e = j} w_e`` (0 as soon as one of its edges is inside r_in), and every
  message an edge carries to its centre is multiplied by ``η_src``: the geometric initial
  embedding, the environment seed's outer products and the SO(2) convolution's sums (the plain
  envelope scatter's weight env, the attention's mass env²). The degree normalisation is not.
  The product is a sum of logs plus a count of exact zeros, so that it completes across MPI
  ranks by addition (:meth:`ZBLBridging.source_gate`).
* **ZBL energy.** ``V(r) = k_e Z_i Z_j / r · Σ_k a_k exp(−b_k r / a)``,
  ``a = 0.88534 a₀ / (Z_i^0.23 + Z_j^0.23)``, on the *raw* edge length in float64; each edge within
  the cutoff gives V/2 to its centre atom, so a pair counts once in the total however the
  edges are spread over ranks. It is not switched: the network's energy is not weighted either.

Forces and virials of all three come from the same ∂E/∂edge_vec as the network's.
"""

from __future__ import annotations

import torch
from ase.data import atomic_numbers
from torch import nn

#: deepmd-kit's constants: Coulomb constant (eV·Å), Bohr radius (Å), universal screening
KE_EV_A = 14.3996
BOHR_A = 0.5291772109
ZBL_A = (0.18175, 0.50986, 0.28022, 0.028171)
ZBL_B = (3.1998, 0.94229, 0.4029, 0.20162)
#: deepmd-kit's floor of the ZBL pair distance (Å)
R_FLOOR = 1e-10


def window(r: torch.Tensor, r_in: float, r_out: float) -> torch.Tensor:
    """Return the window coordinate t = clip((r − r_in) / (r_out − r_in), 0, 1)."""
    return ((r - r_in) / (r_out - r_in)).clamp(0.0, 1.0)


def clamp_length(r: torch.Tensor, r_in: float, r_out: float) -> torch.Tensor:
    """Return the clamped length r̃(r) (deepmd-kit's ``InnerClamp``)."""
    t = window(r, r_in, r_out)
    t4 = (t * t) * (t * t)
    h = t4 * (20.0 + t * (-45.0 + t * (36.0 - 10.0 * t)))
    return torch.where(r >= r_out, r, r_in + (r_out - r_in) * h)


def switch(r: torch.Tensor, r_in: float, r_out: float) -> torch.Tensor:
    """Return the gate amplitude w(r) ∈ [0, 1] (deepmd-kit's ``BridgingSwitch``)."""
    t = window(r, r_in, r_out)
    t4 = (t * t) * (t * t)
    return t4 * (35.0 + t * (-84.0 + t * (70.0 - 20.0 * t)))


def zbl_energy(r: torch.Tensor, zi: torch.Tensor, zj: torch.Tensor) -> torch.Tensor:
    """ZBL pair energy (eV) at distances r (Å) of nuclear charges zi, zj (same shape)."""
    x = r / (0.88534 * BOHR_A / (zi.pow(0.23) + zj.pow(0.23)))
    phi: torch.Tensor | float = 0.0
    for a, b in zip(ZBL_A, ZBL_B):  # deepmd-kit's order of the sum
        phi = phi + a * torch.exp(-b * x)
    return KE_EV_A * zi * zj / r * phi


class ZBLBridging(nn.Module):
    """The three parts of ZBL zone bridging for one model (no parameters).

    Parameters
    ----------
    type_map : sequence of str
        Element symbol of each type (the nuclear charges of the ZBL term).
    r_inner, r_outer : float
        The bridging window (Å).
    cutoff : float
        The model's cutoff (Å): edges at or beyond it carry no ZBL energy (padding edges of
        CUDA-graph steps, neighbour-list skins).
    """

    def __init__(self, type_map, r_inner: float, r_outer: float, cutoff: float) -> None:
        super().__init__()
        self.r_inner = float(r_inner)
        self.r_outer = float(r_outer)
        self.cutoff = float(cutoff)
        z = [float(atomic_numbers[s]) for s in type_map]
        self.charges: torch.Tensor
        self.register_buffer("charges", torch.tensor(z, dtype=torch.float64), persistent=False)

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        self.charges.data = self.charges.data.double()  # float64 whatever the network's dtype
        return out

    def clamp_vectors(self, edge_vec: torch.Tensor, eps: float):
        """Rescale edge vectors to their clamped length.

        Return (edge vectors rescaled to the clamped length (E, 3), that length r̃ (E,));
        ``eps`` is the model's safe-norm ε (the length is √(|v|² + ε²)).
        """
        r = torch.sqrt((edge_vec * edge_vec).sum(-1, keepdim=True) + eps * eps)
        r_c = clamp_length(r, self.r_inner, self.r_outer)
        return edge_vec * (r_c / r), r_c[:, 0]

    def source_gate(self, r_clamped: torch.Tensor, src: torch.Tensor, n_nodes: int,
                    exchange=None) -> torch.Tensor:  # fmt: skip
        """Per-edge gate ``η[src]`` (E,) from the clamped lengths r̃ (E,).

        ``η_j`` is ``exp(Σ log w)`` over j's edges with w > 0, or 0 when one has w = 0; both
        sums are per-node partials, completed over the ranks by ``exchange.complete`` (each
        edge lives on one rank) when an exchange is given.
        """
        w = switch(r_clamped, self.r_inner, self.r_outer)
        zero = w <= 0.0
        log_w = torch.log(torch.where(zero, torch.ones_like(w), w))
        parts = w.new_zeros(n_nodes, 2)
        parts = parts.index_add(0, src, torch.stack([log_w, zero.to(w.dtype)], dim=1))
        if exchange is not None:
            parts = exchange.complete(parts)
        eta = torch.where(parts[:, 1] > 0.5, torch.zeros_like(parts[:, 0]), parts[:, 0].exp())
        return eta.index_select(0, src)

    def pair_energy(self, types, src, dst, edge_vec, n_nodes: int) -> torch.Tensor:
        """ZBL atom energies (n_nodes,) float64: V(r)/2 of each edge on its centre ``dst``."""
        v = edge_vec.to(torch.float64)
        r = torch.linalg.vector_norm(v, dim=-1).clamp(min=R_FLOOR)
        z = self.charges.index_select(0, types)
        e = zbl_energy(r, z.index_select(0, src), z.index_select(0, dst))
        e = torch.where(r < self.cutoff, e, torch.zeros_like(e))
        return e.new_zeros(n_nodes).index_add(0, dst, 0.5 * e)
