"""SO2Convolution: one SeZM message-passing step (sezm-architecture.md §2.7).

x (N, D, C) → pre_focus_mix → rotate to the edge frame (band rows) → radial degree mixer →
SO(2) mixing stack (residual, gated) → focus competition → rotate back with ρ_l →
envelope-gated softmax attention (or the plain envelope scatter) → optional message-node SO(3)
grid → post_focus_mix. Rotations are read only through :mod:`mdband.so3.storage`.
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from mdband.kernels.aggregate import aggregate
from mdband.kernels.edge_dot import edge_dot as fused_edge_dot
from mdband.kernels.rotate_mix import rotate_mix
from mdband.kernels.segments import segment_sum
from mdband.kernels.so2_stack import kernel_supports as stack_kernel_supports
from mdband.kernels.so2_stack import so2_mix_layer
from mdband.model.layers import ChannelLinear, ScalarRMSNorm, SO3Linear
from mdband.model.so2 import (
    FocusLinear,
    GatedActivation,
    RadialDegreeMixer,
    SO2Linear,
    leading_rows,
    reduced_degree_index,
)
from mdband.so3 import storage as st

#: what compile=on turns into graph breaks (see mdband.model.compiling)
OPAQUE = ("aggregate", "rotate_mix", "so2_mix_layer", "edge_dot")


class _EdgeDot(torch.autograd.Function):
    """Per-edge dot products of node rows that save only the node tensors.

    out[e, k] = Σ_d q[dst[e], k, d] · k[src[e], k, d]; the per-edge gathers are rebuilt in the
    backward (2·E·K·d floats less kept per block). The backward sums per node in CSR order (no
    atomics).
    """

    @staticmethod
    def forward(ctx, q, k, dst, src, dst_csr, src_csr):
        ctx.save_for_backward(q, k, dst, src, *dst_csr, *src_csr)
        return (q.index_select(0, dst) * k.index_select(0, src)).sum(-1)

    @staticmethod
    def backward(ctx, g):
        q, k, dst, src, dp, dr, sp, sr = ctx.saved_tensors
        gq = gk = None
        if ctx.needs_input_grad[0]:
            gq = segment_sum(g[..., None] * k.index_select(0, src), dst, (dp, dr))
        if ctx.needs_input_grad[1]:
            gk = segment_sum(g[..., None] * q.index_select(0, dst), src, (sp, sr))
        return gq, gk, None, None, None, None


def edge_dot(q, k, ec, fused: bool = False):
    """Per-edge dot products of destination rows of q and source rows of k: (E, K).

    ``fused``: the Triton op (differentiable once: force evaluation); otherwise the torch
    function, differentiable to any order (training).
    """
    if fused:
        return fused_edge_dot(q, k, ec.dst, ec.src, ec.dst_csr(), ec.src_csr())
    return _EdgeDot.apply(q, k, ec.dst, ec.src, ec.dst_csr(), ec.src_csr())


def segment_softmax_weights(
    logits: torch.Tensor,
    env: torch.Tensor,
    dst: torch.Tensor,
    n_nodes: int,
    null: torch.Tensor,
    src_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """α (E, K) = m / (null + Σ_{e'→dst} m), m = env²·exp(logit), max-shifted per node.

    logits (E, K); env (E,); null (K,) > 0. Edges with env = 0 get α = 0. ``src_weight`` (E,)
    ≥ 0 (the bridging source gate) multiplies m, in the log domain as deepmd-kit does: its
    value through log of a detached copy, its derivative through the ratio to that copy.
    """
    E, K = logits.shape
    pos = env > 0
    logw = 2.0 * torch.log(torch.where(pos, env, torch.ones_like(env)))
    ratio = None
    if src_weight is not None:
        on = src_weight > 0
        scale = torch.where(on, src_weight, torch.ones_like(src_weight)).detach()
        logw = logw + torch.log(scale)
        ratio = torch.where(on, src_weight / scale, torch.zeros_like(src_weight))
        pos = pos & on
    eff = torch.where(pos[:, None], logits + logw[:, None], torch.full_like(logits, -math.inf))
    null_logit = torch.log(null).reshape(1, K)
    idx = dst[:, None].expand(E, K)
    gmax = null_logit.expand(n_nodes, K).clone()
    gmax = gmax.scatter_reduce(0, idx, eff, reduce="amax", include_self=True)
    ex = torch.exp(eff - gmax.index_select(0, dst))
    if ratio is not None:
        ex = ex * ratio[:, None]
    denom = torch.zeros(n_nodes, K, dtype=logits.dtype, device=logits.device)
    denom = denom.scatter_add(0, idx, ex) + torch.exp(null_logit - gmax)
    return ex / denom.index_select(0, dst)


def _safe_sqrt(x: torch.Tensor) -> torch.Tensor:
    """√x with a zero derivative (not an infinite one) where x = 0."""
    on = x > 0
    return torch.where(on, torch.sqrt(torch.where(on, x, torch.ones_like(x))), torch.zeros_like(x))


class SO2Convolution(nn.Module):
    """SO(2) convolution of an interaction block: node features (N, D, C) in and out.

    The node features are mixed to ``hidden_channels`` (Cw). Each edge carries its source's
    row scaled by its radial features; with a local frame the row is rotated into the edge
    frame, mixed by the residual SO(2) layers of each focus and rotated back. The messages are
    summed per destination (weighted by the envelope, or by attention when ``n_atten_head`` >
    0, then gated per head), optionally passed through the message-node grid product, and
    mixed back to ``channels`` (C).
    """

    def __init__(self, cfg, lmax: int, settings=None) -> None:
        super().__init__()
        from mdband.model.gate import op_applies
        from mdband.settings import EngineSettings

        self.settings = settings or EngineSettings()
        self.rotate_mix_op = op_applies("rotate_mix", cfg, lmax, self.settings)
        self.aggregate_op = op_applies("aggregate", cfg, lmax, self.settings)
        self.stack_op = op_applies("so2_mix_layer", cfg, lmax, self.settings)
        C, F, Cf = cfg.channels, cfg.n_focus, cfg.focus_channels
        Cw = cfg.hidden_channels
        self.lmax, self.C, self.F, self.Cf, self.Cw = lmax, C, F, Cf, Cw
        self.H = cfg.n_atten_head
        self.eps = cfg.eps
        self.mixing_layers = cfg.mixing_layers
        self.radial_mode = cfg.radial_so2_mode
        self.pre_focus_mix = SO3Linear(lmax, C, Cw)
        self.post_focus_mix = SO3Linear(lmax, Cw, C)
        self.radial_hidden_proj = ChannelLinear(C, Cw) if Cw != C else None
        self.radial_degree_mixer = (
            RadialDegreeMixer(lmax, Cw, cfg.radial_so2_mode, cfg.radial_so2_rank)
            if cfg.radial_so2_mode != "none"
            else None
        )
        n = cfg.mixing_layers
        self.so2_linears = nn.ModuleList([SO2Linear(lmax, Cf, Cf, F) for _ in range(n)])
        self.non_linearities = nn.ModuleList(
            [GatedActivation(lmax, Cf, F) if i < n - 1 else nn.Identity() for i in range(n)]
        )
        self.focus_compete = F > 1
        if self.focus_compete:
            self.focus_compete_norm = ScalarRMSNorm(Cf, F) if cfg.focus_norm else nn.Identity()
            self.adamw_focus_compete_w = nn.Parameter(torch.zeros(Cf, F))
        if self.H > 0:
            H = self.H
            self.head_dim = Cf // H
            self.attn_qk_norm = ScalarRMSNorm(Cf, F)
            self.attn_q_proj = FocusLinear(Cf, Cf, F)
            self.attn_k_proj = FocusLinear(Cf, Cf, F)
            self.adamw_attn_logit_w = nn.Parameter(torch.zeros(Cf, F, H))
            self.adamw_attn_z_bias_raw = nn.Parameter(torch.zeros(F, H))
            self.attn_output_gate_norm = ScalarRMSNorm(Cf, F)
            self.adamw_attn_gate_w = nn.Parameter(torch.zeros(Cf, F, H))
        if cfg.message_node_so3:
            from mdband.model.message_grid import MessageNodeSO3

            opts = cfg.ffn_opts()
            opts["kmax"] = min(cfg.kmax, lmax)
            self.message_node_grid_product: MessageNodeSO3 | None = MessageNodeSO3(lmax, C, opts)
        else:
            self.message_node_grid_product = None
        self.needs_local_frame = n > 0 or cfg.radial_so2_mode != "none"
        deg_m = torch.tensor(reduced_degree_index(lmax))
        self._deg_m: torch.Tensor
        self._deg: torch.Tensor
        self._rho: torch.Tensor
        self.register_buffer("_deg_m", deg_m, persistent=False)
        self.register_buffer("_deg", st.tables(lmax, "cpu")["deg"].clone(), persistent=False)
        self.register_buffer("_rho", st.rotate_inv_rescale(lmax), persistent=False)

    # ------------------------------------------------------------------ capability
    def rotation_reads(self) -> list[str]:
        """Names of the rotation reads this module makes (empty if it needs no edge frame)."""
        return ["rotate_to_local", "rotate_back"] if self.needs_local_frame else []

    # ------------------------------------------------------------------ pieces
    def _mixing_stack(self, xl: torch.Tensor) -> torch.Tensor:
        """Apply the residual SO(2) layers on (F, E, Dm, Cf): the fused op or the torch modules."""
        fused = self._stack_fused(xl)
        for lin, act in zip(self.so2_linears, self.non_linearities):
            lin = cast(SO2Linear, lin)  # so2_linears holds SO2Linear modules
            if fused:
                wg = act.gate_linear.weight if isinstance(act, GatedActivation) else None
                xl = so2_mix_layer(xl, lin.weight_m0, lin.weight_m[0], wg, self.lmax,
                                   self.settings.stack_precision)  # fmt: skip
            else:
                xl = xl + act(lin(xl))
        return xl

    def _stack_fused(self, xl: torch.Tensor) -> bool:
        """Tell whether the mixing layers run as the fused op.

        They do when the op is selected, the fused ops are on for this device, the dtype and
        width are ones its kernel is built for, and the weights are frozen (the op gives no
        weight gradients, so training keeps the torch path).
        """
        if not (self.stack_op and self.mixing_layers > 0 and self.settings.ops_on(xl)):
            return False
        if not stack_kernel_supports(xl.dtype, self.Cf):
            return False
        params = (*self.so2_linears.parameters(), *self.non_linearities.parameters())
        return not any(p.requires_grad for p in params)

    def _focus_alpha(self, s: torch.Tensor) -> torch.Tensor:  # s (E, F, Cf)
        logits = torch.einsum("efi,if->ef", self.focus_compete_norm(s), self.adamw_focus_compete_w)
        return torch.softmax(logits, dim=1) * 0.98 + 0.02 / self.F

    def _edge_messages(self, x1, ec, radf, recompute: bool = False):
        """Compute the edges' messages and the radial term of their attention logits.

        Return (E, D, Cw) rotated-back messages (the local-frame rows for the fused
        aggregation) and the radial term of the attention logits (E, F, H), None without
        attention.
        """
        E = ec.src.shape[0]
        L, F, Cf = self.lmax, self.F, self.Cf
        if not self.needs_local_frame:
            rad = radf if self.radial_hidden_proj is None else self.radial_hidden_proj(radf)
            xs = x1.index_select(0, ec.src)
            msg = xs * rad[:, self._deg]
            if self.focus_compete:
                a = self._focus_alpha((xs[:, 0] * rad[:, 0]).reshape(E, F, Cf))
                D = msg.shape[1]
                msg = (msg.reshape(E, D, F, Cf) * a[:, None, :, None]).reshape(E, D, self.Cw)
            return msg, self._radial_logits(rad[:, 0]) if self.H > 0 else None
        # per-degree radial rows (E, L+1, Cw); the mixer reads only these, so the per-row gather
        # (E, Dm, Cw) is built only for the plain radial product
        radl = radf if self.radial_hidden_proj is None else self.radial_hidden_proj(radf)
        mixer = self.radial_degree_mixer
        rad_logits = None
        if self.rotate_mix_op and self.settings.ops_on(x1):
            if mixer is None:
                xl = rotate_mix(x1, ec.src, ec.rotations, L, rad=radl[:, self._deg_m],
                                csr=ec.src_csr())  # fmt: skip
            else:
                k, rad_logits = self._mixer_and_logit_terms(radl)
                xl = rotate_mix(x1, ec.src, ec.rotations, L, k=k, basis=mixer.channel_basis,
                                csr=ec.src_csr())  # fmt: skip
        else:
            xl = st.rotate_to_local(ec.rotations, x1.index_select(0, ec.src), L)  # (E, Dm, Cw)
            xl = xl * radl[:, self._deg_m] if mixer is None else mixer(xl, radl)
        xl = xl.reshape(E, 3 * L + 1, F, Cf).permute(2, 0, 1, 3)  # (F, E, Dm, Cf)
        gate_src = xl[:, :, 0, :].transpose(0, 1) if self.focus_compete else None
        if recompute and torch.is_grad_enabled():
            # keep only the stack's input: its layers are rebuilt in the backward
            xl = checkpoint(self._mixing_stack, xl, use_reentrant=False)
        else:
            xl = self._mixing_stack(xl)
        if gate_src is not None:
            a = self._focus_alpha(gate_src)  # (E, F)
            xl = xl * a.transpose(0, 1)[:, :, None, None]
        xl = xl.permute(1, 2, 0, 3).reshape(E, 3 * L + 1, self.Cw)
        if rad_logits is None and self.H > 0:
            rad_logits = self._radial_logits(radl[:, 0])
        if self.aggregate_op and self.settings.ops_on(xl):
            return xl, rad_logits  # local frame: the fused aggregation rotates back
        msg = st.rotate_back(ec.rotations, xl, L, scale=self._rho.to(xl.dtype))
        return msg, rad_logits

    def _radial_logits(self, rad0: torch.Tensor) -> torch.Tensor:
        """Compute the radial term of the attention logits (E, F, H).

        It comes from the l = 0 radial row (E, Cw).
        """
        E, F, Cf = rad0.shape[0], self.F, self.Cf
        return torch.einsum("efi,ifh->efh", rad0.reshape(E, F, Cf), self.adamw_attn_logit_w)

    def _mixer_and_logit_terms(self, radl: torch.Tensor):
        """Compute the degree-mixer kernel and the radial attention-logit term in one GEMM.

        Return (degree-mixer kernel (E, K, R'), radial attention-logit term (E, F, H) or None) of
        the per-degree radial rows radl (E, L+1, Cw). With attention the logit weights sit
        block-diagonally in the rows of l = 0 beside the mixer's weights (zero rows elsewhere:
        exact), so autograd meets radl once (a second use through radl[:, 0] cost a zero-filled copy
        of radl and an accumulation in the backward).
        """
        mixer = self.radial_degree_mixer
        assert mixer is not None  # called only with a radial SO(2) mode
        if self.H == 0:
            return mixer.kernel(radl), None
        E, L, F, H, Cw = radl.shape[0], self.lmax, self.F, self.H, self.Cw
        w = self.adamw_attn_logit_w  # (Cf, F, H)
        logit_w = torch.block_diag(*[w[:, f, :] for f in range(F)])  # (F·Cf = Cw, F·H)
        logit_w = torch.cat([logit_w, logit_w.new_zeros(L * Cw, F * H)], dim=0)
        flat = leading_rows(radl, L + 1).reshape(E, (L + 1) * Cw)
        flat = flat @ torch.cat([mixer.weight, logit_w], dim=1)
        n_k = mixer.weight.shape[1]
        k = flat[:, :n_k].reshape(E, mixer.ksize, n_k // mixer.ksize)
        return k, flat[:, n_k:].reshape(E, F, H)

    def forward(self, x: torch.Tensor, ec, radf: torch.Tensor, recompute: bool = False):
        """Convolve the node features ``x`` (N, D, C) over the edges ``ec``.

        ``radf``: the edge features (E, L+1, C); ``recompute``: with gradients on, keep only
        the mixing stack's input and rebuild its layers in the backward.
        """
        x1 = self.pre_focus_mix(x)
        out, nodes = self.aggregate_edges(x1, None, ec, radf, recompute)
        return self.finish(out, x1, nodes)

    # ------------------------------------------------------------------ stages (also per chunk)
    def node_terms(self, x1):
        """Return the per-node attention inputs of x1 (N, D, Cw).

        They are (q, k (N, F·H, hd), s0 (N, F, Cf)), or None without attention.
        """
        if self.H == 0:
            return None
        N, F, H, hd, Cf = x1.shape[0], self.F, self.H, self.head_dim, self.Cf
        s0 = x1[:, 0].reshape(N, F, Cf)
        qk = self.attn_qk_norm(s0)
        q = self.attn_q_proj(qk).reshape(N, F * H, hd)
        k = self.attn_k_proj(qk).reshape(N, F * H, hd)
        return q, k, s0

    def aggregate_edges(self, x1, nodes, ec, radf, recompute: bool = False):
        """Sum the messages of ``ec``'s edges per destination row, before the output gate.

        Return ((ec.n_nodes, D, Cw), node terms).

        Sources read the whole x1 and node terms; destinations are the rows ``ec.rows`` (all
        rows unchunked, one chunk's atoms otherwise). ``nodes`` None: the node terms are made
        here, after the messages (the unchunked order, which fixes how autograd sums x1's
        cotangents); chunks pass the shared ones.
        """
        N = ec.n_nodes
        msg, rad_logits = self._edge_messages(x1, ec, radf, recompute)
        if nodes is None:
            nodes = self.node_terms(x1)
        if self.needs_local_frame and self.aggregate_op and self.settings.ops_on(x1):
            return self._fused_aggregate(msg, nodes, ec, rad_logits), nodes
        E, D = msg.shape[0], msg.shape[1]
        if self.H == 0:
            w = ec.env if ec.gate is None else ec.env * ec.gate[:, None]
            out = x1.new_zeros(N, D, self.Cw)
            return out.index_add_(0, ec.dst, msg * w[:, :, None]) * ec.inv_sqrt_deg, nodes
        FH, hd = self.F * self.H, self.head_dim
        logits, null = self._attention_logits(nodes, ec, rad_logits)
        alpha = segment_softmax_weights(logits, ec.env.reshape(E), ec.dst, N, null, ec.gate)
        wmsg = msg.reshape(E, D, FH, hd) * alpha[:, None, :, None]
        pre = msg.new_zeros(N, D, FH, hd).index_add_(0, ec.dst, wmsg)
        return pre.reshape(N, D, self.Cw), nodes

    def finish(self, out, x1, nodes):
        """Apply the output gate, message-node grid and post_focus_mix to aggregated rows ``out``.

        ``x1`` and ``nodes`` are the same rows of x1 and of the node terms.
        """
        if self.H > 0:
            N, D = out.shape[0], out.shape[1]
            FH = self.F * self.H
            gate = self._output_gate(nodes[2]).reshape(N, 1, FH, 1)
            out = (out.reshape(N, D, FH, self.head_dim) * gate).reshape(N, D, self.Cw)
        if self.message_node_grid_product is not None:
            out = self.message_node_grid_product(out, x1)
        return self.post_focus_mix(out)

    def _attention_logits(self, nodes, ec, rad_logits):
        """Compute the attention logits (E, F·H) of ec's edges and the null weights (F·H,).

        ``rad_logits`` (E, F, H): their radial term.
        """
        E = ec.src.shape[0]
        F, H, hd = self.F, self.H, self.head_dim
        q, k, _ = nodes
        fused = self.settings.ops_on(q)
        logits = edge_dot(q[ec.rows], k, ec, fused).reshape(E, F, H) * hd**-0.5
        logits = logits + rad_logits
        null = nn.functional.softplus(self.adamw_attn_z_bias_raw) + self.eps
        return logits.reshape(E, F * H), null.reshape(F * H)

    def _output_gate(self, s0):
        """Per-head output gate sigmoid(ScalarRMSNorm(s0) @ W): (N, F, H)."""
        g = torch.einsum("nfi,ifh->nfh", self.attn_output_gate_norm(s0), self.adamw_attn_gate_w)
        return torch.sigmoid(g)

    def _fused_aggregate(self, xl, nodes, ec, rad_logits):
        """Rotate back + ρ + attention (or envelope scatter) + segment sum in one op."""
        N, L = ec.n_nodes, self.lmax
        rho = self._rho
        env = ec.env.reshape(-1)
        if ec.gate is not None:  # bridging: the op's weight is env (plain) or its mass env²
            env = env * (ec.gate if self.H == 0 else _safe_sqrt(ec.gate))
        if self.H == 0:
            s = ec.inv_sqrt_deg.reshape(N)
            return aggregate(xl, ec.rotations, L, rho, ec.dst, N, env, s=s, csr=ec.dst_csr())
        logits, null = self._attention_logits(nodes, ec, rad_logits)
        return aggregate(xl, ec.rotations, L, rho, ec.dst, N, env, logits=logits, z=null,
                         csr=ec.dst_csr())  # fmt: skip
