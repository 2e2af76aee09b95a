"""aggregate's softmax statistics: the pass that writes them and the helper that reads them.

With attention, a first pass runs one program per destination node over its CSR segment,
BLOCK_EDGES edges at a time, and writes stats (N, 2, H): the running max M of the node's
logits per head (started at log z, so the null weight z enters as exp(log z − M)) and the
shifted sum S = exp(log z − M) + Σ env²·exp(logit − M). The walk and dot kernels read them per
channel lane through :func:`head_stats`. Accuracy: exp/log are Triton's (≤ 2 ulp in fp32); the
division is IEEE-rounded. Bytes per edge: perm 8, env and the H logits.
"""

from __future__ import annotations

from mdband.kernels import _common as cm

if cm.TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    SUM = cm.SUM
    MAX = tl.standard._elementwise_max  # combine of tl.max (no nested jit call, see cm.SUM)

    @triton.jit
    def aggregate_stats_kernel(
        # pointers: the CSR by destination, the edges' envelopes and logits, z, the output
        perm_ptr,
        offsets_ptr,
        env_ptr,
        logits_ptr,
        null_weight_ptr,
        stats_ptr,
        # sizes and strides
        n_heads,
        stride_logits_edge,
        stride_logits_head,
        stride_stats_node,
        stride_stats_kind,
        stride_stats_head,
        # meta-parameters
        BLOCK_EDGES: tl.constexpr,
        BLOCK_HEADS: tl.constexpr,
    ):
        """Compute the per-head softmax statistics of node n = program_id(0).

        Walks BLOCK_EDGES edges of the node's segment at a time and writes the max M and the shifted
        sum S of each head into stats (N, 2, H).
        """
        n = tl.program_id(0).to(tl.int64)
        beg = tl.load(offsets_ptr + n).to(tl.int64)
        end = tl.load(offsets_ptr + n + 1).to(tl.int64)
        hh = tl.arange(0, BLOCK_HEADS)
        hm = hh < n_heads
        mx = tl.log(tl.load(null_weight_ptr + hh, mask=hm, other=1.0))
        sm = tl.full((BLOCK_HEADS,), 1.0, stats_ptr.dtype.element_ty)  # z · exp(-log z)
        for i0 in range(beg, end, BLOCK_EDGES):
            ii = i0 + tl.arange(0, BLOCK_EDGES)
            im = ii < end
            e = tl.load(perm_ptr + ii, mask=im, other=0).to(tl.int64)
            ev = tl.load(env_ptr + e, mask=im, other=0.0)
            t = tl.load(
                logits_ptr + e[:, None] * stride_logits_edge + hh[None, :] * stride_logits_head,
                mask=im[:, None] & hm[None, :],
                other=-float("inf"),
            )
            mnew = tl.maximum(mx, tl.reduce(t, 0, MAX))
            w = (ev * ev)[:, None] * tl.exp(t - mnew[None, :])
            sm = sm * tl.exp(mx - mnew) + tl.reduce(w, 0, SUM)
            mx = mnew
        tl.store(stats_ptr + n * stride_stats_node + hh * stride_stats_head, mx, mask=hm)
        tl.store(
            stats_ptr + n * stride_stats_node + stride_stats_kind + hh * stride_stats_head,
            sm,
            mask=hm,
        )

    @triton.jit
    def head_stats(
        stats_ptr,
        node,
        cc,
        cmask,
        head_dim,
        stride_stats_node,
        stride_stats_kind,
        stride_stats_head,
        BLOCK_CHANNELS: tl.constexpr,
    ):
        """Load the head and softmax statistics of each channel lane cc.

        Its head hc = cc // head_dim and the node's softmax statistics of that head (max M, and 1/S)
        from the statistics pass (stats have the features' dtype).
        """
        hc = cc // head_dim
        mx = tl.load(
            stats_ptr + node * stride_stats_node + hc * stride_stats_head, mask=cmask, other=0.0
        )
        sm = tl.load(
            stats_ptr + node * stride_stats_node + stride_stats_kind + hc * stride_stats_head,
            mask=cmask,
            other=1.0,
        )
        inv = cm.div_ieee(tl.full((BLOCK_CHANNELS,), 1.0, stats_ptr.dtype.element_ty), sm)
        return hc, mx, inv
