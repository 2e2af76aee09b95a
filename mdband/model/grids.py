"""S2 and SO(3) grid projectors, and the grid operations of SeZM's grid nets.

A projector holds two constant matrices, built once in float64 and cached per degree:

* ``to_grid`` T (G, J): coefficients → values on G grid points;
* ``from_grid`` B (J, G): grid values → coefficients.

**S2** (J = D = (L+1)²), for the S2 SwiGLU FFN (sezm-architecture.md §2.8)::

    T[g, (l,m)] = Y_lm(p_g) / sqrt(L+1),    B[(l,m), g] = (2l+1) · sqrt(L+1) · w_g · Y_lm(p_g)

**SO(3)** (J = D·K, K = 2·kmax+1 frames ordered [0, −1, +1, …, −kmax, +kmax], row ``d·K + k``,
so a coefficient tensor (…, D, K·C) is packed "(l,m) outer, frame k inner"; §2.10)::

    T[g, (l,m,k)] = D(R_g)[(l,k), (l,m)]   (0 if |k| > l),
    B[(l,m,k), g] = (2l+1) · (w_i / n_γ) · D(R_g)[(l,k), (l,m)],
    R_g = R_z(γ_j) · R_edge(p_i),  γ_j = 2πj/n_γ,  n_γ = 3·kmax + 1  (1 if kmax = 0).

deepmd-kit samples the sphere with Lebedev rules (or, with ``lebedev_quadrature`` false, the S2
FFN on e3nn's product grid: :func:`s2_projector` ``grid="e3nn"``); for Lebedev, mdband uses the
Gauss–Legendre × uniform-φ rule of :func:`mdband.so3.quadrature.sphere_rule` at precision 3L.
Every grid net only projects a product of two band-limited fields back to degree ≤ L, an integrand
of degree ≤ 3L (γ-frequency ≤ 3·kmax), which both rules integrate exactly, so the layers agree to
rounding (verified against deepmd-kit module fixtures, tests/model/test_ffn.py). For the same
reason the roll of R_edge is irrelevant.

The grid operations (:class:`GridMLP`, :class:`GridBranch`, :func:`grid_product`) and the scalar
path shared by all grid nets live here too; their parameter names are deepmd-kit's.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn

from mdband.kernels.grid_product import grid_product as fused_grid_product
from mdband.model.layers import ChannelLinear, degree_index
from mdband.so3.harmonics import spherical_harmonics
from mdband.so3.quadrature import sphere_rule
from mdband.so3.s2grid import e3nn_s2_matrices
from mdband.so3.wigner import rotation_matrices


def so3_frames(kmax: int) -> list[int]:
    """Frame orders ``[0, −1, +1, …, −kmax, +kmax]`` (the zero frame is first)."""
    return [0] + [s * k for k in range(1, kmax + 1) for s in (-1, 1)]


def wigner_from_matrix(R: torch.Tensor, lmax: int) -> torch.Tensor:
    """Dense block-diagonal real Wigner-D of rotation matrices, ``Y(R v) = D(R) Y(v)``.

    Built by exact quadrature projection ``D_ij = (2l+1) Σ_g w_g Y_i(R p_g) Y_j(p_g)``.

    Parameters
    ----------
    R : (..., 3, 3) tensor
        Proper rotation matrices.
    lmax : int

    Returns
    -------
    (..., D, D) tensor, D = (lmax+1)², in R's dtype.
    """
    pts, w = sphere_rule(2 * lmax)
    pts = pts.to(dtype=R.dtype, device=R.device)
    w = w.to(dtype=R.dtype, device=R.device)
    y = spherical_harmonics(lmax, pts)  # (G, D)
    yr = spherical_harmonics(lmax, torch.einsum("...ij,gj->...gi", R, pts))  # (..., G, D)
    full = torch.einsum("...gi,gj->...ij", yr * w[:, None], y)
    deg = degree_index(lmax, device=R.device)
    mask = (deg[:, None] == deg[None, :]).to(R.dtype) * (2 * deg + 1).to(R.dtype)[:, None]
    return full * mask


class GridProjector:
    """Constant grid projection matrices (float64 masters, cast per dtype/device on demand).

    Attributes
    ----------
    lmax, kmax : int
        Degree and frame order (kmax = 0 for S2).
    n_frames : int
        K (1 for S2).
    grid_size : int
        G.
    to_grid : (G, J) float64 tensor
    from_grid : (J, G) float64 tensor
    """

    def __init__(self, lmax: int, kmax: int, to_grid: torch.Tensor, from_grid: torch.Tensor):
        self.lmax = lmax
        self.kmax = kmax
        self.n_frames = 2 * kmax + 1
        self.grid_size = int(to_grid.shape[0])
        self.to_grid = to_grid
        self.from_grid = from_grid
        self._cache: dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}

    def mats(self, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(T, B) cast to ``dtype`` on ``device`` (cached)."""
        key = (dtype, torch.device(device))
        hit = self._cache.get(key)
        if hit is None:
            hit = (
                self.to_grid.to(device=device, dtype=dtype).contiguous(),
                self.from_grid.to(device=device, dtype=dtype).contiguous(),
            )
            self._cache[key] = hit
        return hit

    # Both maps are one GEMM over every node's channels at once, (G, J) @ (J, M·C): ``T @ coeff``
    # on (M, J, C) would broadcast T into M tiny GEMMs (a batched GEMM, several times slower
    # on a GPU: BENCHMARKS.md "2026-12-02 (third session)"). Grid values come out
    # grid-point-major, (M, G, C) viewed from (G, M, C), which is what analyse reads without a
    # copy.
    def project(self, coeff: torch.Tensor) -> torch.Tensor:
        """Coefficients (..., D, K·C) → grid values (..., G, C) (a grid-point-major view)."""
        t, _ = self.mats(coeff.dtype, coeff.device)
        *lead, d, kc = coeff.shape
        j, c = d * self.n_frames, kc // self.n_frames
        cols = coeff.reshape(-1, j, c).transpose(0, 1).reshape(j, -1)  # (J, M·C), one copy
        grid = (t @ cols).view(t.shape[0], -1, c).transpose(0, 1)  # (M, G, C)
        return grid.reshape(*lead, t.shape[0], c)

    def analyse(self, grid: torch.Tensor, n_rows: int | None = None) -> torch.Tensor:
        """Grid values (..., G, C) → coefficients (..., D', K·C) (first ``n_rows`` (l,m) rows)."""
        _, b = self.mats(grid.dtype, grid.device)
        if n_rows is not None:
            b = b[: n_rows * self.n_frames]
        *lead, g, c = grid.shape
        rows = grid.reshape(-1, g, c).transpose(0, 1).reshape(g, -1)  # (G, M·C), a view if G-major
        out = (b @ rows).view(b.shape[0], -1, c).transpose(0, 1)  # (M, J', C)
        return out.reshape(*lead, b.shape[0] // self.n_frames, self.n_frames * c)


def build_s2_projector(lmax: int, precision: int | None = None) -> GridProjector:
    """S2 projector of degree ``lmax`` on a sphere rule exact to ``precision`` (default 3·lmax)."""
    pts, w = sphere_rule(3 * lmax if precision is None else precision)
    y = spherical_harmonics(lmax, pts)  # (G, D) float64
    deg = degree_index(lmax)
    s = math.sqrt(lmax + 1.0)
    t = y / s
    b = (y * w[:, None] * s * (2 * deg + 1).double()[None, :]).T
    return GridProjector(lmax, 0, t.contiguous(), b.contiguous())


def build_so3_projector(
    lmax: int, kmax: int, precision: int | None = None, n_gamma: int | None = None
) -> GridProjector:
    """SO(3) projector of degree ``lmax`` with frames |k| ≤ kmax.

    Sphere rule exact to ``precision`` (default 3·lmax) × ``n_gamma`` uniform γ samples
    (default 3·kmax + 1, or 1 for kmax = 0); grid index ``g = i·n_γ + j`` (point-major).
    """
    if kmax < 0 or kmax > lmax:
        raise ValueError(f"kmax={kmax} must lie in [0, lmax={lmax}]")
    pts, w = sphere_rule(3 * lmax if precision is None else precision)
    if n_gamma is None:
        n_gamma = 1 if kmax == 0 else 3 * kmax + 1
    gamma = torch.arange(n_gamma, dtype=torch.float64) * (2.0 * math.pi / n_gamma)
    c, s = torch.cos(gamma), torch.sin(gamma)
    rz = torch.zeros(n_gamma, 3, 3, dtype=torch.float64)
    rz[:, 0, 0], rz[:, 0, 1], rz[:, 1, 0], rz[:, 1, 1], rz[:, 2, 2] = c, -s, s, c, 1.0
    r_edge = rotation_matrices(pts)  # (P, 3, 3), maps p_i to +z
    r_grid = torch.einsum("jab,pbc->pjac", rz, r_edge).reshape(-1, 3, 3)
    dmat = wigner_from_matrix(r_grid, lmax)  # (G, D, D)
    weight = (w / n_gamma).repeat_interleave(n_gamma)  # (G,)
    frames = so3_frames(kmax)
    n_k = len(frames)
    t = torch.zeros(dmat.shape[0], (lmax + 1) ** 2 * n_k, dtype=torch.float64)
    for l in range(lmax + 1):
        for pos, k in enumerate(frames):
            if abs(k) > l:
                continue
            cols = [(l * l + i) * n_k + pos for i in range(2 * l + 1)]
            t[:, cols] = dmat[:, l * l + l + k, l * l : (l + 1) ** 2]  # D[(l,k), (l,m)]
    deg = degree_index(lmax).repeat_interleave(n_k)
    b = (t * weight[:, None] * (2 * deg + 1).double()[None, :]).T
    return GridProjector(lmax, kmax, t.contiguous(), b.contiguous())


#: S2 grids of deepmd-kit's ``lebedev_quadrature``: an exact rule (true) or e3nn's product grid
S2_GRIDS = ("lebedev", "e3nn")


@functools.cache
def s2_projector(lmax: int, grid: str = "lebedev") -> GridProjector:
    """Return the cached S2 projector of degree ``lmax`` on the grid ``grid``.

    ``"lebedev"`` (exact to degree 3·lmax, what deepmd-kit's Lebedev rules give) or ``"e3nn"``
    (deepmd-kit's e3nn product grid, not exact, :mod:`mdband.so3.s2grid`).
    """
    if grid == "e3nn":
        t, b = e3nn_s2_matrices(lmax)
        return GridProjector(lmax, 0, t, b)
    if grid != "lebedev":
        raise ValueError(f"unknown S2 grid {grid!r} (known: {S2_GRIDS})")
    return build_s2_projector(lmax)


@functools.cache
def so3_projector(lmax: int, kmax: int) -> GridProjector:
    """Return the cached default SO(3) projector of degree ``lmax`` and frame order ``kmax``."""
    return build_so3_projector(lmax, kmax)


def frame_linear(coeff: torch.Tensor, weight: torch.Tensor, n_frames: int) -> torch.Tensor:
    """Channel map applied per frame: (..., D, K·Cin) @ W (Cin, Cout) → (..., D, K·Cout)."""
    *lead, d, kc = coeff.shape
    # one (rows, Cin) @ (Cin, Cout) GEMM: a strided view (e.g. one half of a chunk) would make
    # matmul broadcast W into a batched GEMM per (l, m) row, many times slower on a GPU
    # (BENCHMARKS.md "2026-12-01 (afternoon)")
    out = coeff.reshape(-1, kc // n_frames) @ weight
    return out.reshape(*lead, d, -1)


#: the functions of this module torch.compile must not trace (graph breaks under compile=on)
OPAQUE = ("fused_grid_product",)


def fused_grid_choice(settings, like: torch.Tensor) -> tuple[bool, bool]:
    """Choose (fused, exact) for a grid net's product on tensors like ``like``.

    Fused when the net has EngineSettings (kernels not "torch") whose ops run on that device; exact
    FMAs when the products are asked exact (``stack_precision = "ieee"``), else tf32x3 dots.
    """
    if settings is None or not settings.ops_on(like):
        return False, False
    return True, settings.stack_precision == "ieee"


def grid_product(
    proj: GridProjector,
    left: torch.Tensor,
    right: torch.Tensor,
    n_rows: int | None = None,
    fused: bool = False,
    exact: bool = False,
) -> torch.Tensor:
    """Plain quadratic grid product ``B·((T·left) ⊙ (T·right))``, (..., D, K·C) each.

    ``fused``: the one-kernel op :func:`mdband.kernels.grid_product.grid_product` (no grid
    tensors in memory; differentiable once; ``exact``: fp32 FMAs instead of tf32x3 dots), else
    torch GEMMs (differentiable to any order).
    """
    if not fused:
        return proj.analyse(proj.project(left) * proj.project(right), n_rows)
    t, b = proj.mats(left.dtype, left.device)
    if n_rows is not None:
        b = b[: n_rows * proj.n_frames]
    *lead, d, kc = left.shape
    out = fused_grid_product(t, b, left.reshape(-1, d, kc), right.reshape(-1, d, kc), proj.n_frames)
    return out.reshape(*lead, *out.shape[1:])


class GridOp(nn.Module):
    """A ``grid_op`` submodule: two operands' coefficients combined on the grid.

    ``forward(proj, left, right, scalar_pair, n_rows)`` maps the coefficients (..., D, K·C) of two
    operands to (..., D', K·C) in three steps a subclass chooses: :meth:`inputs`
    (default: as given), :meth:`combine` on the grid, :meth:`output` (default: as combined).
    """

    def forward(
        self,
        proj: GridProjector,
        left: torch.Tensor,
        right: torch.Tensor,
        scalar_pair: torch.Tensor,
        n_rows: int | None = None,
        fused: bool = False,
        exact: bool = False,
    ) -> torch.Tensor:
        """Combine ``left`` and ``right`` (..., D, K·C) on the grid into (..., D', K·C).

        The steps are :meth:`inputs`, :meth:`combine` and :meth:`output`; ``fused`` /
        ``exact``: as in :func:`grid_product`.
        """
        k = proj.n_frames
        left, right = self.inputs(left, right, k)
        out = self.combine(proj, left, right, scalar_pair, n_rows, fused, exact)
        return self.output(out, k)

    def inputs(self, left, right, k: int):
        """Prepare the two operands for the grid (default: as given)."""
        return left, right

    def combine(self, proj, left, right, scalar_pair, n_rows, fused=False, exact=False):
        """Apply the op on the grid; ``fused`` / ``exact``: as in :func:`grid_product`."""
        raise NotImplementedError

    def output(self, out, k: int):
        """Finish the combined coefficients (default: as combined)."""
        return out


class _ProjectedGridOp(GridOp):
    """What :class:`GridMLP` and :class:`GridBranch` share: projections around the grid.

    The per-frame input projections ``Lp = left @ left_proj``, ``Rp = right @ right_proj`` before
    the grid combination and ``@ out_proj`` after it.
    """

    left_proj: ChannelLinear
    right_proj: ChannelLinear
    out_proj: ChannelLinear

    def inputs(self, left, right, k: int):
        lp = frame_linear(left, self.left_proj.weight, k)
        return lp, frame_linear(right, self.right_proj.weight, k)

    def output(self, out, k: int):
        return frame_linear(out, self.out_proj.weight, k)


class GridMLP(_ProjectedGridOp):
    """Polynomial grid MLP (deepmd-kit ``GridMLP``), per frame.

    ``self`` mode: ``fused = [left_k, right_k]`` (2C per frame), ``Lp = fused @ left_proj``,
    ``Rp = fused @ right_proj`` (2C → 2C); ``cross`` mode: ``Lp = left @ left_proj``,
    ``Rp = right @ right_proj`` (C → 2C). Then ``(B·(T·Lp ⊙ T·Rp)) @ out_proj`` (2C → C).
    """

    def __init__(self, channels: int, mode: str) -> None:
        super().__init__()
        self.mode = mode
        c_in = 2 * channels if mode == "self" else channels
        self.left_proj = ChannelLinear(c_in, 2 * channels)
        self.right_proj = ChannelLinear(c_in, 2 * channels)
        self.out_proj = ChannelLinear(2 * channels, channels)

    def inputs(self, left, right, k: int):
        """Project the operands (in ``self`` mode their per-frame concatenation)."""
        if self.mode == "self":
            *lead, d, kc = left.shape
            shape = (*lead, d, k, kc // k)
            fused = torch.cat([left.reshape(shape), right.reshape(shape)], dim=-1)
            left = right = fused.reshape(*lead, d, -1)
        return super().inputs(left, right, k)

    def combine(self, proj, lp, rp, scalar_pair, n_rows, fused=False, exact=False):
        """Multiply the projected operands on the grid (:func:`grid_product`)."""
        return grid_product(proj, lp, rp, n_rows, fused, exact)


class GridBranch(_ProjectedGridOp):
    """Scalar-routed grid branches (deepmd-kit ``GridBranch``).

    ``Lp = left @ left_proj``, ``Rp = right @ right_proj`` (per frame, C → b·C);
    ``v = (T·Lp) ⊙ (T·Rp)`` reshaped (…, G, b, C); ``out = Σ_b v_b · softmax(sp @ router)_b``;
    result ``(B·out) @ out_proj`` (per frame, C → C).
    """

    def __init__(self, channels: int, n_branches: int) -> None:
        super().__init__()
        self.channels = channels
        self.n_branches = n_branches
        self.left_proj = ChannelLinear(channels, n_branches * channels)
        self.right_proj = ChannelLinear(channels, n_branches * channels)
        self.router = ChannelLinear(2 * channels, n_branches)
        self.out_proj = ChannelLinear(channels, channels)

    def combine(self, proj, lp, rp, scalar_pair, n_rows, fused=False, exact=False):
        """Multiply the projected operands on the grid and mix the branches by the router."""
        if self.n_branches == 1:  # softmax over one branch is exactly 1: the plain product
            return grid_product(proj, lp, rp, n_rows, fused, exact)
        value = proj.project(lp) * proj.project(rp)  # (..., G, b·C)
        value = value.reshape(*value.shape[:-1], self.n_branches, self.channels)
        route = torch.softmax(scalar_pair @ self.router.weight, dim=-1)  # (..., b)
        out = (value * route[..., None, :, None]).sum(-2)  # (..., G, C)
        return proj.analyse(out, n_rows)


def make_grid_op(op_type: str, channels: int, mode: str, n_branches: int) -> nn.Module | None:
    """Build the ``grid_op`` submodule for ``op_type`` ∈ {glu, mlp, branch} (None for glu)."""
    if op_type == "branch":
        return GridBranch(channels, n_branches)
    if op_type == "mlp":
        return GridMLP(channels, mode)
    return None


def apply_scalar_path(
    coeff: torch.Tensor, scalar_pair: torch.Tensor, gate_logits: torch.Tensor, n_frames: int
) -> torch.Tensor:
    """Shared scalar path of the grid nets.

    ``coeff *= sigmoid(gate_logits)`` on every (l, m, k); ``coeff[l=0, k=0] += silu(a)·b`` where
    ``scalar_pair = [a, b]``.

    Parameters
    ----------
    coeff : (..., D', K·C) tensor
    scalar_pair : (..., 2C) tensor
    gate_logits : (..., C) tensor
    n_frames : int

    Returns
    -------
    (..., D', K·C) tensor
    """
    a, b = scalar_pair.chunk(2, dim=-1)
    gate = torch.sigmoid(gate_logits).repeat(*([1] * (gate_logits.dim() - 1)), n_frames)
    out = coeff * gate[..., None, :]
    c = a.shape[-1]
    head = out[..., :1, :c] + (a * torch.sigmoid(a) * b)[..., None, :]
    return torch.cat([torch.cat([head, out[..., :1, c:]], dim=-1), out[..., 1:, :]], dim=-2)
