"""aggregate's torch reference: the forward and its closed-form backward (both layouts).

The math is the package docstring's (:mod:`mdband.kernels.aggregate`); the Triton kernels
equal these to rounding, and band and dense storages give the same numbers.
"""

from __future__ import annotations

import torch

from mdband.kernels import _common as cm


def messages(y, rot, layout, rot_lmax, lmax, rho):
    """Return (W, msg): the storage's row matrix and the rotated-back, rescaled messages.

    W is (E, Dm, D); msg (E, D, C) = rho · Wᵀ y.
    """
    W = cm.row_matrix(rot, layout, rot_lmax, lmax)
    return W, rho[None, :, None] * torch.bmm(W.transpose(1, 2), y)


def softmax_stats(logits, env, z, dst, N):
    """Return the segment max M, the shifted sum S and the edges' weights w of the softmax.

    M (N, H) is detached (α does not depend on it), S (N, H), and the edges' weights
    w (E, H) = env² · exp(logit − M[dst]).
    """
    E, H = logits.shape
    lz = torch.log(z)
    M = lz.expand(N, H).clone()
    M = M.scatter_reduce(0, dst[:, None].expand(E, H), logits.detach(), "amax", include_self=True)
    w = env[:, None] ** 2 * torch.exp(logits - M[dst])
    S = torch.exp(lz - M).index_add(0, dst, w)
    return M, S, w


def aggregate_reference(y, rot, layout, rot_lmax, lmax, rho, dst, N, env, logits, z, s):
    """Torch reference of the forward: (out (N, D, C), stats (N, 2, H) or empty)."""
    _, msg = messages(y, rot, layout, rot_lmax, lmax, rho)
    D, C = msg.shape[1], msg.shape[2]
    out = msg.new_zeros(N, D, C)
    if logits is None:
        out = out.index_add(0, dst, env[:, None, None] * msg)
        return out * s[:, None, None], y.new_zeros(0)
    H = logits.shape[1]
    M, S, w = softmax_stats(logits, env, z, dst, N)
    alpha = w / S[dst]
    ac = alpha.repeat_interleave(C // H, dim=1)
    out = out.index_add(0, dst, ac[:, None, :] * msg)
    return out, torch.stack([M, S], dim=1)


def aggregate_bwd_reference(
    gout, out, stats, y, rot, layout, rot_lmax, lmax, rho, dst, env, logits, z, s
):
    """Closed-form backward: (gy, grot, genv, glogits, gz, gs) (absent → empty tensors)."""
    W, msg = messages(y, rot, layout, rot_lmax, lmax, rho)
    E, D, C = msg.shape
    N = gout.shape[0]
    gsel = gout[dst]
    if logits is None:
        q = (gsel * msg).sum((1, 2))
        gmsg = (s[dst] * env)[:, None, None] * gsel
        genv = s[dst] * q
        gs = gout.new_zeros(N).index_add(0, dst, env * q)
        glog, gz = y.new_zeros(0), y.new_zeros(0)
    else:
        H = logits.shape[1]
        HD = C // H
        M, S = stats[:, 0], stats[:, 1]
        ap = torch.exp(logits - M[dst]) / S[dst]
        alpha = env[:, None] ** 2 * ap
        gmsg = alpha.repeat_interleave(HD, dim=1)[:, None, :] * gsel
        q = (gsel * msg).reshape(E, D, H, HD).sum((1, 3))
        Q = (gout * out).reshape(N, D, H, HD).sum((1, 3))
        d = ap * (q - Q[dst])
        glog = env[:, None] ** 2 * d
        genv = (2.0 * env[:, None] * d).sum(1)
        gz = -(Q * torch.exp(-M) / S).sum(0)
        gs = y.new_zeros(0)
    gmr = rho[None, :, None] * gmsg
    gy = torch.bmm(W, gmr)
    grot = cm.rot_grad_from_matrix(torch.bmm(y, gmr.transpose(1, 2)), layout, rot_lmax, lmax)
    return gy, grot, genv, glog, gz, gs
