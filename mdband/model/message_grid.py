"""Message-node cross SO(3) grid net (deepmd-kit ``so2_conv.message_node_grid_product``).

Applied after the SO(2) convolution's aggregation (sezm-architecture.md §2.7 step 9, §2.10)::

    qe = frame_expand(out), ce = frame_expand(x1)       per degree (L+1, Cf, K·Cf), shared
    sp = [out0, x1_0]                                   raw l = 0 rows, (N, F, 2Cf)
    coeff = grid_op(qe, ce)                             default B·(T·qe ⊙ T·ce) on the SO(3) grid
    coeff *= sigmoid(sp @ scalar_gate)  (per focus);    coeff[l=0, k=0] += silu(out0) · x1_0
    y = frame_contract(coeff) · residual_scale          (L+1, K·Cf, Cf), (F, Cf)
    return out + y

Features are (N, D, F·Cf) with focus f outer, channel inner, as the SO(2) convolution holds them.
"""

from __future__ import annotations

import torch
from torch import nn

from mdband.errors import UnsupportedModelError
from mdband.model.ffn import grid_setting
from mdband.model.grids import (
    apply_scalar_path,
    fused_grid_choice,
    grid_product,
    make_grid_op,
    so3_projector,
)
from mdband.model.layers import ChannelLinear, SO3Linear


class MessageNodeSO3(nn.Module):
    """Cross SO(3) grid net of the message and the node feature, with its residual.

    Parameters
    ----------
    lmax : int
        The block's message-passing degree L (D = (L+1)²).
    channels : int
        Descriptor channels C.
    opts : dict
        deepmd-kit descriptor options read: ``kmax`` (1, clipped to lmax), ``n_focus`` (1),
        ``focus_dim`` (0 → C), ``grid_mlp`` / ``grid_branch`` (entry 1 = message_node; False / 0),
        ``mlp_bias`` (False; True is unsupported).

    State dict: ``residual_scale`` (F, Cf), ``frame_expand.weight`` (L+1, Cf, K·Cf),
    ``frame_contract.weight`` (L+1, K·Cf, Cf), ``scalar_gate.weight`` (2Cf, F·Cf), and for the
    mlp / branch ops ``grid_op.{left_proj,right_proj,out_proj}.weight`` (+ ``grid_op.router``).
    """

    def __init__(self, lmax: int, channels: int, opts: dict) -> None:
        super().__init__()
        if bool(opts.get("mlp_bias", False)):
            raise UnsupportedModelError("mlp_bias", opts["mlp_bias"])
        self.lmax = lmax
        self.grid_settings = None  # as SelfGridNet's: set by the descriptor for the fused op
        self.n_focus = int(opts.get("n_focus", 1))
        focus_dim = int(opts.get("focus_dim", 0))
        self.cf = channels if focus_dim == 0 else focus_dim
        kmax = min(int(opts.get("kmax", 1)), lmax)
        self.proj = so3_projector(lmax, kmax)
        n_k = self.proj.n_frames
        n_branches = int(grid_setting(opts, "grid_branch", 1, 0))
        use_mlp = bool(grid_setting(opts, "grid_mlp", 1, False))
        op_type = "branch" if n_branches > 0 else ("mlp" if use_mlp else "glu")
        self.residual_scale = nn.Parameter(torch.zeros(self.n_focus, self.cf))
        self.frame_expand = SO3Linear(lmax, self.cf, n_k * self.cf)
        self.frame_contract = SO3Linear(lmax, n_k * self.cf, self.cf)
        self.scalar_gate = ChannelLinear(2 * self.cf, self.n_focus * self.cf)
        op = make_grid_op(op_type, self.cf, "cross", max(1, n_branches))
        if op is not None:
            self.grid_op = op

    def forward(self, out: torch.Tensor, x1: torch.Tensor) -> torch.Tensor:
        """``out + y`` for the aggregated message ``out`` and node feature ``x1``, (N, D, F·Cf)."""
        n, d, _ = out.shape
        f, cf = self.n_focus, self.cf
        q = out.reshape(n, d, f, cf).transpose(1, 2)  # (N, F, D, Cf)
        c = x1.reshape(n, d, f, cf).transpose(1, 2)
        sp = torch.cat([q[:, :, 0], c[:, :, 0]], dim=-1)  # (N, F, 2Cf)
        qe = self.frame_expand(q)
        ce = self.frame_expand(c)
        fused, exact = fused_grid_choice(self.grid_settings, out)
        if hasattr(self, "grid_op"):
            coeff = self.grid_op(self.proj, qe, ce, sp, fused=fused, exact=exact)
        else:
            coeff = grid_product(self.proj, qe, ce, fused=fused, exact=exact)
        w = self.scalar_gate.weight
        if f == 1:
            logits = sp @ w
        else:
            logits = torch.einsum("nfi,ifo->nfo", sp, w.reshape(2 * cf, f, cf))
        coeff = apply_scalar_path(coeff, sp, logits, self.proj.n_frames)
        y = self.frame_contract(coeff) * self.residual_scale[:, None, :]  # (N, F, D, Cf)
        return out + y.transpose(1, 2).reshape(n, d, f * cf)
