"""rotate_mix's torch reference: the forward and its closed-form backward (both layouts).

The math is the package docstring's (:mod:`mdband.kernels.rotate_mix`); the Triton kernels
equal these to rounding, and band and dense storages give the same numbers.
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.kernels.rotate_mix.mixer import mixer_matrix, scatter_mixer_grad


def rotate_mix_reference(x, src, rot, layout, rot_lmax, lmax, k=None, basis=None, rad=None):
    """Torch reference of the forward (both layouts; differentiable by autograd)."""
    W = cm.row_matrix(rot, layout, rot_lmax, lmax)
    xl = torch.bmm(W, x.index_select(0, src))
    if k is None:
        return xl * rad
    return torch.einsum("eoiq,eic,qc->eoc", mixer_matrix(k, lmax), xl, basis)


def rotate_mix_bwd_reference(gy, x, src, rot, layout, rot_lmax, lmax, k, basis, rad):
    """Closed-form backward: (gx, grot, gk, gbasis, grad) (absent inputs → empty tensors)."""
    W = cm.row_matrix(rot, layout, rot_lmax, lmax)
    xs = x.index_select(0, src)
    xl = torch.bmm(W, xs)
    if k is None:
        gxl = gy * rad
        grad = gy * xl
        gk, gb = gy.new_zeros(0), gy.new_zeros(0)
    else:
        Km = mixer_matrix(k, lmax)
        gxl = torch.einsum("eoiq,eoc,qc->eic", Km, gy, basis)
        gk = scatter_mixer_grad(torch.einsum("eoc,eic,qc->eoiq", gy, xl, basis), lmax)
        gb = torch.einsum("eoiq,eoc,eic->qc", Km, gy, xl)
        grad = gy.new_zeros(0)
    grot = cm.rot_grad_from_matrix(torch.bmm(gxl, xs.transpose(1, 2)), layout, rot_lmax, lmax)
    gx = torch.zeros_like(x).index_add(0, src, torch.bmm(W.transpose(1, 2), gxl))
    return gx, grot, gk, gb, grad
