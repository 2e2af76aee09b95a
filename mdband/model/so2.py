"""SO(2) layers of SeZM in the edge frame (mmax = 1, m-major reduced layout).

Reduced layout of a degree-L edge feature: rows ``[(l,0) l=0..L] + [(l,−1) l=1..L] +
[(l,+1) l=1..L]`` (Dm = 3L + 1). Focus streams are the leading axis of the mixing stack,
(F, E, Dm, Cf). Weight layouts follow deepmd-kit (sezm-architecture.md §2.7).
"""

from __future__ import annotations

import torch
from torch import nn

from mdband.kernels.rotate_mix import mixer_matrix
from mdband.kernels.so2_stack import so2_linear
from mdband.so3 import storage as st


def leading_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """Return ``t[:, :n]``, or t itself when it has n rows.

    A full slice still records a backward that writes a zero tensor of t's size and copies the
    cotangent into it (two passes over an (E, L+1, C) tensor per use; BENCHMARKS.md "2026-12-03").
    """
    return t if t.shape[1] == n else t[:, :n]


def reduced_degree_index(lmax: int) -> list[int]:
    """Degree of each reduced row: [0..L, 1..L, 1..L]."""
    return list(range(lmax + 1)) + list(range(1, lmax + 1)) * 2


class FocusLinear(nn.Module):
    """``y[b, f, o] = Σ_i x[b, f, i] W[i, f, o]``, W stored as (Cin, F·Cout)."""

    def __init__(self, c_in: int, c_out: int, n_focus: int) -> None:
        super().__init__()
        self.shape = (c_in, n_focus, c_out)
        self.weight = nn.Parameter(torch.zeros(c_in, n_focus * c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``x`` (B, F, Cin) to (B, F, Cout), one matrix per focus."""
        return torch.einsum("bfi,ifo->bfo", x, self.weight.view(self.shape))


class SO2Linear(nn.Module):
    """SO(2)-equivariant linear map on (F, E, Dm, Cin) → (F, E, Dm, Cout).

    m = 0 block: one ((L+1)Cin × (L+1)Cout) matrix per focus. |m| = 1 block: W = [Wu | Wv] with
    ``y₋ = x₋Wu − x₊Wv``, ``y₊ = x₋Wv + x₊Wu`` (rotation-commuting complex multiply).
    """

    def __init__(self, lmax: int, c_in: int, c_out: int, n_focus: int) -> None:
        super().__init__()
        self.lmax, self.c_in, self.c_out, self.n_focus = lmax, c_in, c_out, n_focus
        L = lmax
        self.weight_m0 = nn.Parameter(torch.zeros((L + 1) * c_in, n_focus * (L + 1) * c_out))
        self.weight_m = nn.ParameterList(
            [nn.Parameter(torch.zeros(L * c_in, n_focus * 2 * L * c_out))]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``x`` (F, E, Dm, Cin) to (F, E, Dm, Cout)."""
        return so2_linear(x, self.weight_m0, self.weight_m[0], self.lmax)


class GatedActivation(nn.Module):
    """``out[0] = silu(x[0])``, ``out[r] = x[r] · sigmoid(x[0] @ W)[l(r) − 1]`` for r ≥ 1."""

    def __init__(self, lmax: int, channels: int, n_focus: int) -> None:
        super().__init__()
        self.lmax, self.channels = lmax, channels
        self.gate_linear = FocusLinear(channels, lmax * channels, n_focus)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (F, E, Dm, C)
        """Apply SiLU to row 0 of ``x`` and gate the other rows per degree."""
        F, E = x.shape[0], x.shape[1]
        L, C = self.lmax, self.channels
        x0, xr = torch.split(x, [1, 3 * L], dim=2)
        logits = self.gate_linear(x0[:, :, 0].transpose(0, 1)).transpose(0, 1)  # (F, E, L*C)
        gates = torch.sigmoid(logits).reshape(F, E, 1, L, C)
        # rows 1.. are (l,0), (l,−1), (l,+1) for l = 1..L: one gate per degree, broadcast over m
        gated = (xr.reshape(F, E, 3, L, C) * gates).reshape(F, E, 3 * L, C)
        return torch.cat([nn.functional.silu(x0), gated], dim=2)


class RadialDegreeMixer(nn.Module):
    """Edge-dependent mixing across degrees within each |m| block.

    It is deepmd's ``DynamicRadialDegreeMixer``: the kernel is a linear map of the l ≤ L radial
    features.
    """

    def __init__(self, lmax: int, channels: int, mode: str, rank: int) -> None:
        super().__init__()
        L = lmax
        self.lmax, self.channels, self.mode, self.rank = L, channels, mode, rank
        self.k0 = (L + 1) ** 2
        self.ksize = (L + 1) ** 2 + L * L
        out = self.ksize if mode == "degree" else self.ksize * (rank if rank > 0 else channels)
        self.weight = nn.Parameter(torch.zeros((L + 1) * channels, out))
        if mode == "degree_channel" and rank > 0:
            self.channel_basis: nn.Parameter | None = nn.Parameter(torch.zeros(rank, channels))
        else:
            self.channel_basis = None

    def kernel(self, rad: torch.Tensor) -> torch.Tensor:
        """Compute the compact kernel (E, K, R') from the radial features rad (E, ≥ L+1, C).

        The first L+1 rows of rad are degrees 0..L (the per-degree rows, or the reduced-row layout,
        which starts so).
        """
        E = rad.shape[0]
        rows = leading_rows(rad, self.lmax + 1)
        flat = rows.reshape(E, (self.lmax + 1) * rad.shape[-1]) @ self.weight
        return flat.view(E, self.ksize, flat.shape[-1] // self.ksize)

    def forward(self, xl: torch.Tensor, rad: torch.Tensor) -> torch.Tensor:
        """Mix the edge rows ``xl`` (E, Dm, C) across degrees with the kernel of ``rad``."""
        L = self.lmax
        E = xl.shape[0]
        k = self.kernel(rad)
        r = k.shape[-1]
        if xl.device.type in st.ONE_PRODUCT_DEVICES and (self.mode == "degree" or self.rank > 0):
            return self._one_product(k, xl)
        k0 = k[:, : self.k0].reshape(E, L + 1, L + 1, r)  # (E, l_in, l_out, R')
        k1 = k[:, self.k0 :].reshape(E, L, L, r)
        parts = [(k0, xl[:, : L + 1]), (k1, xl[:, L + 1 : 2 * L + 1]), (k1, xl[:, 2 * L + 1 :])]
        outs = []
        for kk, xx in parts:
            if self.mode == "degree":
                outs.append(torch.einsum("eio,eic->eoc", kk[..., 0], xx))
            elif self.channel_basis is None:
                outs.append(torch.einsum("eioc,eic->eoc", kk, xx))
            else:
                t = torch.einsum("eior,eic->eorc", kk, xx)
                outs.append((t * self.channel_basis).sum(2))
        return torch.cat(outs, dim=1)

    def _one_product(self, k: torch.Tensor, xl: torch.Tensor) -> torch.Tensor:
        """Apply the three |m| blocks as one block-diagonal (E, Dm·R', Dm) product.

        R' = 1 for "degree", the rank for "degree_channel"; rows (l_out, r), the matrix of
        :func:`mdband.kernels.rotate_mix.mixer.mixer_matrix`), then the channel basis (see
        :data:`mdband.so3.storage.ONE_PRODUCT_DEVICES`; measured in BENCHMARKS.md "2026-12-05").
        """
        E, dm = xl.shape[0], xl.shape[1]
        r = 1 if self.mode == "degree" else k.shape[-1]
        a = mixer_matrix(k[..., :r], self.lmax)  # (E, out, in, r)
        if r > 1:
            a = a.transpose(2, 3).contiguous()
        y = torch.bmm(a.view(E, dm * r, dm), xl)
        if self.mode == "degree":
            return y
        assert self.channel_basis is not None  # degree_channel mode (rank > 0)
        if r == 1:
            return y * self.channel_basis[0]
        return (y.view(E, dm, r, -1) * self.channel_basis).sum(2)
