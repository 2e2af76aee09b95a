"""so2_mix_layer's torch reference: the SO(2) linear map, the gated activation and the layer.

Forward and closed-form backward (the math is the package docstring's).
"""

from __future__ import annotations

import torch

from mdband.kernels.so2_stack import weights


def _gauss(a, b, c, d):
    """(re, im) of (a + i·b)(c + i·d) with three real GEMMs."""
    t1 = torch.bmm(a + b, c)
    return t1 - torch.bmm(b, c + d), t1 + torch.bmm(a, d - c)


def so2_linear(x, w0, wm, L, transpose=False, gauss=True):
    """Compute h = SO2Linear(x) (or x·Wᵀ) for x (F, E, Dm, Ci) with torch GEMMs (differentiable).

    m = 0 rows: one GEMM; |m| = 1 rows: the complex product ``h₋ + i·h₊ = (x₋ + i·x₊)(Wu + i·Wv)``
    with three GEMMs (``gauss``) or four.
    """
    F, E = x.shape[0], x.shape[1]
    W0, Wu, Wv = weights.oriented(w0, wm, F, L, transpose)
    x0, xn, xp = torch.split(x, [L + 1, L, L], dim=2)  # one backward concat, no zero-fill
    x0 = x0.reshape(F, E, W0.shape[1])
    xn, xp = xn.reshape(F, E, Wu.shape[1]), xp.reshape(F, E, Wu.shape[1])
    h0 = torch.bmm(x0, W0)
    if gauss:
        hn, hp = _gauss(xn, xp, Wu, Wv)
    else:
        hn = torch.bmm(xn, Wu) - torch.bmm(xp, Wv)
        hp = torch.bmm(xn, Wv) + torch.bmm(xp, Wu)
    co = Wu.shape[2] // L
    parts = [h0.view(F, E, L + 1, co), hn.view(F, E, L, co), hp.view(F, E, L, co)]
    return torch.cat(parts, dim=2)


def linear_reference(x, w0, wm, L):
    """Compute h = SO2Linear(x) for x (F, E, Dm, C), four GEMMs (differentiable)."""
    return so2_linear(x, w0, wm, L, gauss=False)


def linear_t_reference(g, w0, wm, L):
    """Compute gx = g Wᵀ: the transpose of :func:`linear_reference` (closed form)."""
    return so2_linear(g, w0, wm, L, transpose=True, gauss=False)


def _gate_weights(wg, F, L):
    """Per-focus gate weights Wg (F, C, L·C)."""
    return wg.view(wg.shape[0], F, wg.shape[1] // F).permute(1, 0, 2)


def gate_logits(h, wg, L):
    """h[:, :, 0] @ Wg: (F, E, L·C)."""
    return torch.bmm(h[:, :, 0], _gate_weights(wg, h.shape[0], L))


def _gates(h, wg, L):
    F, E, _, C = h.shape
    return torch.sigmoid(gate_logits(h, wg, L)).view(F, E, L, C)


def activation_reference(h, wg, L):
    """act(h) of a gated layer (differentiable)."""
    g = _gates(h, wg, L)
    F, E, _, C = h.shape
    rows = h[:, :, 1:].reshape(F, E, 3, L, C) * g[:, :, None]
    return torch.cat([torch.nn.functional.silu(h[:, :, :1]), rows.reshape(F, E, 3 * L, C)], 2)


def so2_mix_layer_reference(x, w0, wm, wg, lmax, gated):
    """(y, h): y = x + act(SO2Linear(x)); h = the pre-activation if gated else empty."""
    h = linear_reference(x, w0, wm, lmax)
    if not gated:
        return x + h, x.new_empty(0)
    return x + activation_reference(h, wg, lmax), h


def gate_bwd_reference(gy, h, wg, L):
    """Compute gh = act'(h)ᵀ gy (closed form)."""
    F, E, _, C = h.shape
    g = _gates(h, wg, L)
    hr = h[:, :, 1:].reshape(F, E, 3, L, C)
    gyr = gy[:, :, 1:].reshape(F, E, 3, L, C)
    glogit = (gyr * hr).sum(2) * g * (1 - g)  # (F, E, L, C)
    s0 = torch.sigmoid(h[:, :, 0])
    gh0 = gy[:, :, 0] * (s0 * (1 + h[:, :, 0] * (1 - s0)))
    gh0 = gh0 + torch.bmm(glogit.reshape(F, E, L * C), _gate_weights(wg, F, L).transpose(1, 2))
    rows = (gyr * g[:, :, None]).reshape(F, E, 3 * L, C)
    return torch.cat([gh0[:, :, None], rows], dim=2)


def so2_mix_layer_bwd_reference(gy, h, w0, wm, wg, lmax, gated):
    """Compute gx of the layer for the cotangent gy (closed form)."""
    gh = gate_bwd_reference(gy, h, wg, lmax) if gated else gy
    return gy + linear_t_reference(gh, w0, wm, lmax)
