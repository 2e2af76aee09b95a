"""zonal_embed's torch reference: the forward and its closed-form backward (both layouts)."""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm
from mdband.so3 import storage as st


def zonal_index(layout_code, rot_lmax, lmax, device):
    """(positions in an edge's flat storage row, degrees) of the m = 0 entries up to lmax."""
    t = st.entry_table(cm.layout_of(layout_code), rot_lmax, lmax, device)
    keep = t["m"] == 0  # band order: m = 0 entries come first, in column order
    return t["pos"][keep], t["deg"][keep]


def zonal_embed_reference(rot, layout, rot_lmax, lmax, radial, dst, s, N):
    """Torch reference of the forward (both layouts, differentiable by autograd)."""
    pos, deg = zonal_index(layout, rot_lmax, lmax, rot.device)
    E, C = radial.shape[0], radial.shape[2]
    Y = rot.reshape(E, -1)[:, pos]
    keep = (deg > 0).to(radial.dtype)
    contrib = (Y * keep)[:, :, None] * radial[:, deg, :]
    out = radial.new_zeros(N, deg.shape[0], C).index_add(0, dst, contrib)
    return out * s[:, None, None]


def zonal_embed_bwd_reference(gout, rot, layout, rot_lmax, lmax, radial, dst, s):
    """Closed-form backward: (grot, gradial, gs)."""
    pos, deg = zonal_index(layout, rot_lmax, lmax, rot.device)
    E = radial.shape[0]
    N = gout.shape[0]
    Y = rot.reshape(E, -1)[:, pos]
    keep = (deg > 0).to(radial.dtype)
    rd = radial[:, deg, :]
    g = gout[dst]
    gsc = g * s[dst][:, None, None]
    gY = (gsc * rd).sum(2) * keep
    grad = torch.zeros_like(radial).index_add(1, deg, gsc * (Y * keep)[:, :, None])
    gs = gout.new_zeros(N).index_add(0, dst, (g * rd * (Y * keep)[:, :, None]).sum((1, 2)))
    layout_e = cm.layout_of(layout)
    grot = rot.new_zeros(E, st.per_edge_size(layout_e, rot_lmax))
    grot[:, pos] = gY
    return grot.view(rot.shape), grad, gs
