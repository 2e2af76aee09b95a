"""Radial pieces of SeZM: smooth envelopes, radial basis and the radial MLP.

* ``envelope(r; p) = u⁴ Σ_{k<p} C(k+3, 3) x^k`` with ``x = r/rcut``, ``u = 1 − x`` (clamped to
  [0, 1]); value and first three derivatives vanish at rcut.
* Bessel basis ``w_n sinc(w_n r / π) · envelope(r; p_rbf)`` with trainable ``adam_freqs`` (1, n);
  Gaussian basis ``exp(−(r − μ_n)² / (2σ²))`` with μ = ``adam_freqs``, σ = rcut / (n − 1),
  also times ``envelope(r; p_rbf)``; ``p_rbf = 0``: the raw basis (deepmd-kit's integer env_exp).
* Radial MLP (bias-free): hidden layers ``x @ M`` → RMSNorm (if the radial ``edge_norm``) → SiLU;
  the last layer linear. Parameter names follow deepmd-kit (``net.{i}.matrix``,
  ``net.{i}.adam_scale``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mdband.kernels.radial_basis import envelope_reference, raw_basis_reference

#: the envelope ``u⁴ Σ_{k<p} C(k+3, 3) x^k`` (torch; the radial_basis op's reference)
cutoff_envelope = envelope_reference


class RadialBasis(nn.Module):
    """Radial basis (E, n_radial) of edge lengths: Bessel or Gaussian, times the envelope."""

    def __init__(
        self, rcut: float, n_radial: int, basis_type: str, exponent: int, fixed: bool = False
    ) -> None:
        """Build a basis of ``n_radial`` functions on [0, ``rcut``].

        ``basis_type``: ``bessel`` or ``gaussian`` (the family of a ``/fix`` basis);
        ``exponent``: the basis' envelope order, 0 for none; ``fixed`` (a ``/fix`` basis):
        ``adam_freqs`` is a buffer, same state-dict name, so training leaves it alone.
        """
        super().__init__()
        self.rcut = float(rcut)
        self.basis_type = basis_type
        self.exponent = int(exponent)
        if basis_type == "bessel":
            freqs = torch.arange(1, n_radial + 1, dtype=torch.float64) * (math.pi / rcut)
        else:
            freqs = torch.linspace(0.0, rcut, n_radial, dtype=torch.float64)
        if fixed:
            self.register_buffer("adam_freqs", freqs[None, :])
        else:
            self.adam_freqs = nn.Parameter(freqs[None, :])
        width = rcut / max(n_radial - 1, 1)
        self.gauss_coeff = -0.5 / (width * width)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        """Evaluate the basis at the lengths ``r`` (E, 1): (E, n_radial)."""
        raw = raw_basis_reference(r, self.adam_freqs, self.basis_type, self.gauss_coeff)
        return raw * cutoff_envelope(r, self.rcut, self.exponent)


class _Matrix(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.matrix = nn.Parameter(torch.zeros(n_in, n_out))

    def forward(self, x):
        return x @ self.matrix


class RMSNorm(nn.Module):
    """``x · rsqrt(mean(x²) + eps) · adam_scale`` over the last axis."""

    def __init__(self, channels: int, eps: float = 1e-7) -> None:
        super().__init__()
        self.eps = eps
        self.adam_scale = nn.Parameter(torch.ones(channels))

    def forward(self, x):
        """Normalise ``x`` over its last axis and scale it."""
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.adam_scale


class RadialMLP(nn.Module):
    """Bias-free radial MLP through the widths ``layers``.

    Hidden layers ``x @ M`` → RMSNorm (with ``norm``) → SiLU; the last layer linear.
    """

    def __init__(self, layers: list[int], norm: bool) -> None:
        super().__init__()
        mods: list[nn.Module] = []
        for i in range(len(layers) - 1):
            mods.append(_Matrix(layers[i], layers[i + 1]))
            if i < len(layers) - 2:
                if norm:
                    mods.append(RMSNorm(layers[i + 1]))
                mods.append(nn.SiLU())
        self.net = nn.Sequential(*mods)

    def forward(self, x):
        """Map ``x`` (..., layers[0]) to (..., layers[-1])."""
        return self.net(x)

    def one_hidden_layer(self):
        """Return the radial_mlp op's inputs of a net with one hidden layer, else None.

        The inputs are (w1, RMS scale or None, w2, eps).
        """
        mods = list(self.net)
        if len(mods) == 3:
            (first, _, last), norm = mods, None
        elif len(mods) == 4:
            first, norm, _, last = mods
        else:
            return None
        scale, eps = (None, 1e-7) if norm is None else (norm.adam_scale, norm.eps)
        return first.matrix, scale, last.matrix, eps


class MLPLayer(nn.Module):
    """deepmd-kit's ``MLPLayer`` without bias: ``act(x @ matrix)``."""

    def __init__(self, n_in: int, n_out: int, act: bool) -> None:
        super().__init__()
        self.matrix = nn.Parameter(torch.zeros(n_in, n_out))
        self.act = act

    def forward(self, x):
        """Return ``act(x @ matrix)``: SiLU when ``act``, else linear."""
        y = x @ self.matrix
        return nn.functional.silu(y) if self.act else y
