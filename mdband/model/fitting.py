"""DPA4 fitting nets: the GLU energy head, its case embedding, and the heads of the dens mode.

Module and buffer names mirror deepmd-kit's ``fitting_net`` / ``dens_fitting_net`` state dicts
(``deepmd/pt/model/task/sezm_ener.py``, ``descriptor/sezm_nn/dens.py``), so an imported
checkpoint loads with ``load_state_dict(strict=True)``.

Case embedding (multi-task models, ``dim_case_embd`` K > 0): each head's fitting net stores its
one-hot ``case_embd`` (K,), which deepmd-kit's training sets from the head's rank among the
sorted head names. Without ``case_film_embd`` it is concatenated to every atom's descriptor;
with it, a code ``c = W₂ᵀ silu(W₁ᵀ case_embd)`` (4·C wide) modulates the fitting input and the
output of every hidden layer ``t``: ``x ← x·(1 + e^{a_t} tanh γ_t) + e^{b_t} tanh β_t`` with
``(γ_t, β_t) = c P_t``.
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import nn

from mdband.config import SeZMConfig


class _Linear(nn.Module):
    def __init__(self, n_in: int, n_out: int, bias: bool) -> None:
        super().__init__()
        self.matrix = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out)) if bias else None

    def forward(self, x):
        y = x @ self.matrix
        return y if self.bias is None else y + self.bias


class _GLULayer(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.linear = _Linear(n_in, 2 * n_out, bias=True)

    def forward(self, x):
        v, g = self.linear(x).chunk(2, dim=-1)
        return v * nn.functional.silu(g)


class CaseFiLM(nn.Module):
    """deepmd-kit's ``CaseFiLMConditioner``: the case code and one FiLM per target width."""

    def __init__(self, n_case: int, n_descriptor: int, targets: list[int]) -> None:
        super().__init__()
        hidden = int(32 * math.ceil(4.0 * n_case / 32.0))
        code = 4 * n_descriptor
        self.case_layer1 = _Linear(n_case, hidden, bias=False)
        self.case_layer2 = _Linear(hidden, code, bias=False)
        self.projectors = nn.ParameterList(
            [nn.Parameter(torch.zeros(code, 2 * w)) for w in targets]
        )
        self.adam_case_film_scale_strength_log = nn.Parameter(torch.zeros(len(targets)))
        self.adam_case_film_shift_strength_log = nn.Parameter(torch.zeros(len(targets)))

    def encode(self, case_embd: torch.Tensor) -> torch.Tensor:
        """Return the case code (1, 4·C) of a one-hot (K,)."""
        return self.case_layer2(nn.functional.silu(self.case_layer1(case_embd.reshape(1, -1))))

    def modulate(self, x: torch.Tensor, code: torch.Tensor, target: int) -> torch.Tensor:
        """Modulate ``x`` by the FiLM of target ``target`` under the case code ``code``.

        ``x·(1 + e^{a_t} tanh γ_t) + e^{b_t} tanh β_t`` with ``(γ_t, β_t) = code P_t``.
        """
        gamma, beta = (code @ self.projectors[target]).chunk(2, dim=-1)
        scale = torch.exp(self.adam_case_film_scale_strength_log[target])
        shift = torch.exp(self.adam_case_film_shift_strength_log[target])
        return x * (1.0 + scale * torch.tanh(gamma)) + shift * torch.tanh(beta)


class _GLUNet(nn.Module):
    def __init__(self, n_in: int, widths: list[int], film: CaseFiLM | None = None) -> None:
        super().__init__()
        layers, d = [], n_in
        for w in widths:
            layers.append(_GLULayer(d, w))
            d = w
        self.hidden_layers = nn.ModuleList(layers)
        if film is not None:
            self.case_film = film
        self.output_layer = _Linear(d, 1, bias=False)

    def forward(self, x, case_embd=None):
        if case_embd is None:
            for layer in self.hidden_layers:
                x = layer(x)
            return self.output_layer(x)
        code = self.case_film.encode(case_embd)
        x = self.case_film.modulate(x, code, 0)
        for t, layer in enumerate(self.hidden_layers, start=1):
            x = self.case_film.modulate(layer(x), code, t)
        return self.output_layer(x)


class _Networks(nn.Module):
    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.networks = nn.ModuleList([net])


class FittingNet(nn.Module):
    """``e_i = GLU-MLP(desc_i [, case]) + bias_atom_e[t_i]`` (float64 out)."""

    def __init__(self, cfg: SeZMConfig) -> None:
        super().__init__()
        widths = cfg.fitting_widths
        film: CaseFiLM | None = CaseFiLM(cfg.dim_case_embd, cfg.channels, [cfg.channels, *widths])
        film = film if cfg.case_film_embd else None
        self.filter_layers = _Networks(_GLUNet(cfg.fitting_input, widths, film))
        self.bias_atom_e: torch.Tensor
        self.register_buffer("bias_atom_e", torch.zeros(cfg.ntypes, 1, dtype=torch.float64))
        self.film = film is not None
        self.case_embd: torch.Tensor | None
        if cfg.dim_case_embd > 0:
            self.register_buffer("case_embd", torch.zeros(cfg.dim_case_embd))
        else:
            self.case_embd = None

    def _apply(self, fn, recurse=True):
        # keep the energy offsets in float64 whatever dtype the network runs in
        out = super()._apply(fn, recurse)
        self.bias_atom_e.data = self.bias_atom_e.data.double()
        return out

    def forward(self, desc: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """Return the atom energies (N,) float64 of descriptors ``desc`` and types ``types``."""
        net = self.filter_layers.networks[0]
        if self.case_embd is None:
            e = net(desc)
        elif self.film:
            e = net(desc, self.case_embd)
        else:
            case = self.case_embd.to(desc.dtype).expand(desc.shape[0], -1)
            e = net(torch.cat([desc, case], dim=-1))
        return e[:, 0].to(torch.float64) + self.bias_atom_e[types, 0]


class VectorHead(nn.Module):
    """deepmd-kit's direct-force head: a vector (N, 3) from the l = 1 rows of the last latent.

    The latent is (N, (L+1)², C); the vector comes through the degree-1 weights of an SO(3)
    linear map to one channel.

    The l = 1 rows hold (−y, z, −x) times √(3/4π) of a vector; ``cartesian_scale`` (√(4π/3),
    stored in the checkpoint) and the permutation give (x, y, z).
    """

    def __init__(self, lmax: int, channels: int) -> None:
        super().__init__()
        self.cartesian_scale: torch.Tensor
        self.register_buffer("cartesian_scale", torch.tensor(math.sqrt(4.0 * math.pi / 3.0)))
        self.proj = nn.Module()
        self.proj.weight = nn.Parameter(torch.zeros(lmax + 1, channels, 1))

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        """Return the Cartesian vectors (N, 3) of the latent ``latent`` (N, (L+1)², C)."""
        p = (latent[:, 1:4, :] @ cast(torch.Tensor, self.proj.weight)[1])[..., 0]  # (N, 3)
        return self.cartesian_scale * torch.stack([-p[:, 2], -p[:, 0], p[:, 1]], dim=-1)


class DensFittingNet(nn.Module):
    """The heads deepmd-kit's dens mode evaluates: the energy head and the direct-force head.

    The energy head is a :class:`FittingNet`. The force embedding and the denoising head only act on
    corrupted training inputs (zero for a plain evaluation) and are not loaded.
    """

    def __init__(self, cfg: SeZMConfig) -> None:
        super().__init__()
        self.energy_head = FittingNet(cfg)
        self.direct_force_head = VectorHead(cfg.readout_lmax, cfg.channels)
