"""Linear maps and norms on SO(3) features (N, D, C), D = (L+1)².

Weight layouts are deepmd-kit's ("input-major"), so checkpoints load by name:

* ``SO3Linear.weight`` (L+1, Cin, Cout): one channel matrix per degree, shared by all m;
* ``ChannelLinear.weight`` (Cin, Cout);
* ``EquivariantRMSNorm.adam_scale`` (L+1, 1, C), ``bias`` (1, C);
* ``ScalarRMSNorm.adam_scale`` (1, C).
"""

from __future__ import annotations

import torch
from torch import nn


def degree_index(lmax: int, device=None) -> torch.Tensor:
    """Degree l of each packed index l² + l + m, shape ((L+1)²,)."""
    return torch.tensor(
        [l for l in range(lmax + 1) for _ in range(2 * l + 1)], dtype=torch.long, device=device
    )


class SO3Linear(nn.Module):
    """``y[n, (l,m), o] = Σ_i x[n, (l,m), i] W[l, i, o]``."""

    def __init__(self, lmax: int, c_in: int, c_out: int) -> None:
        super().__init__()
        self.lmax = lmax
        self.weight = nn.Parameter(torch.zeros(lmax + 1, c_in, c_out))
        self._deg: torch.Tensor
        self.register_buffer("_deg", degree_index(lmax), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``x`` (..., D, Cin) to (..., D, Cout), one channel matrix per degree."""
        *lead, d, c_in = x.shape
        if d == 1:  # a 2-d product: mm reads a strided row block (x[:, :1] of a wider x) as is
            return (x[..., 0, :] @ self.weight[0]).unsqueeze(-2)
        # one GEMM per (l, m) row, batched over the rows: bmm reads x's rows in place (strided
        # batch), where `x[..., rows, :] @ W[l]` of a row slice cannot fold its node axis into
        # one matrix and torch broadcasts W into a per-node batched GEMM (many times slower on
        # a GPU: BENCHMARKS.md "2026-12-02 (third session)")
        rows = x.reshape(-1, d, c_in).transpose(0, 1)  # (d, M, Cin)
        y = torch.bmm(rows, self.weight[self._deg[:d]])  # (d, M, Cout)
        return y.transpose(0, 1).contiguous().view(*lead, d, -1)


class ChannelLinear(nn.Module):
    """``y = x @ W`` on the channel axis, W (Cin, Cout)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(c_in, c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``x`` (..., Cin) to ``x @ W`` (..., Cout)."""
        return x @ self.weight


class ScalarRMSNorm(nn.Module):
    """``x · rsqrt(mean_c x² + eps) · scale`` over the last axis (eps 1e-7).

    ``adam_scale`` is (F, C); inputs are (..., C) when F = 1 and (..., F, C) otherwise.
    """

    def __init__(self, channels: int, n_focus: int = 1, eps: float = 1e-7) -> None:
        super().__init__()
        self.eps = eps
        self.adam_scale = nn.Parameter(torch.ones(n_focus, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` over its last axis and scale it."""
        scale = self.adam_scale[0] if self.adam_scale.shape[0] == 1 else self.adam_scale
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * scale


class EquivariantRMSNorm(nn.Module):
    """SeZM's equivariant RMS norm over (N, D, C): centres l = 0 only; one scale per node.

    ``var = Σ_c x0c²/((L+1)C) + Σ_{l≥1,m,c} x²/((2l+1)(L+1)C)``;
    ``y = x̂ · rsqrt(var + eps) · scale[l]``, ``y[:, 0] += bias``.
    """

    def __init__(self, lmax: int, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.lmax = lmax
        self.eps = eps
        self.adam_scale = nn.Parameter(torch.ones(lmax + 1, 1, channels))
        self.bias = nn.Parameter(torch.zeros(1, channels))
        deg = degree_index(lmax)
        self._deg: torch.Tensor
        self._wdeg: torch.Tensor
        self.register_buffer("_deg", deg, persistent=False)
        self.register_buffer("_wdeg", 1.0 / ((2 * deg + 1).double() * (lmax + 1)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` (..., D, C), scale it per degree and add the bias to its l = 0 row."""
        d = x.shape[-2]
        c = x.shape[-1]
        x0 = x[..., :1, :]
        x0 = x0 - x0.mean(-1, keepdim=True)
        xc = torch.cat([x0, x[..., 1:, :]], dim=-2)
        w = self._wdeg[:d].to(x.dtype)
        var = ((xc * xc).sum(-1) * w).sum(-1, keepdim=True)[..., None] / c
        scale = self.adam_scale[:, 0, :][self._deg[:d]]  # (D, C)
        y = xc * torch.rsqrt(var + self.eps) * scale
        return torch.cat([y[..., :1, :] + self.bias, y[..., 1:, :]], dim=-2)
