"""SeZM's equivariant FFNs: the per-block FFN and the descriptor readout (deepmd-kit ``ffn.py``).

Structure (sezm-architecture.md §2.8–2.10), x (N, D, C), D = (L+1)²::

    y = so3_linear_1(x)                       (L+1, C, W1)
    y = act(y)                                 grid net or gated activation, → (N, D, K·H)
    out = so3_linear_2(y)                      (L+1, K·H, C)

``act`` is one of

* ``SelfGridNet`` on the S2 grid (K = 1) or the SO(3) grid (K = 2·kmax+1), W1 = 2·K·H, with
  ``grid_op`` ∈ {product (no params), GridMLP, GridBranch} (:mod:`mdband.model.grids`);
* ``GatedActivation`` (no grid): W1 = 2H with GLU, else H.

State-dict names equal deepmd-kit's, minus its persistent integer ``expand_index`` buffers
(``so3_linear_{1,2}.expand_index``, ``act.expand_index``) that the checkpoint loader must drop.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mdband.errors import UnsupportedModelError
from mdband.model.grids import (
    GridProjector,
    apply_scalar_path,
    fused_grid_choice,
    grid_product,
    make_grid_op,
    s2_projector,
    so3_projector,
)
from mdband.model.layers import ChannelLinear, SO3Linear, degree_index


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


_ACTIVATIONS = {
    "silu": F.silu,
    "tanh": torch.tanh,
    "relu": F.relu,
    "relu6": F.relu6,
    "softplus": F.softplus,
    "sigmoid": torch.sigmoid,
    "gelu": _gelu_tanh,
    "gelu_tf": _gelu_tanh,
    "linear": lambda x: x,
    "none": lambda x: x,
}


def activation_fn(name: str):
    """deepmd-kit's ``ActivationFn`` by name (case-insensitive); silut/custom → unsupported."""
    fn = _ACTIVATIONS.get(str(name).lower())
    if fn is None:
        raise UnsupportedModelError("activation_function", name)
    return fn


def resolve_ffn_width(ffn_neurons: int, channels: int, glu: bool) -> int:
    """Hidden width H: ``ffn_neurons`` if > 0, else ``32·ceil((8C/3 if glu else 4C)/32)``."""
    if int(ffn_neurons) > 0:
        return int(ffn_neurons)
    base = 8.0 * channels / 3.0 if glu else 4.0 * channels
    return int(32 * math.ceil(base / 32.0))


def grid_setting(opts: dict, name: str, index: int, default):
    """Entry ``index`` of a ``[node_wise, message_node, ffn]`` option (a scalar broadcasts)."""
    value = opts.get(name, default)
    if isinstance(value, (list, tuple)):
        if len(value) != 3:
            raise UnsupportedModelError(name, value, "expected a scalar or a list of length 3")
        return value[index]
    return value


def _check_common(opts: dict) -> None:
    if bool(opts.get("mlp_bias", False)):
        raise UnsupportedModelError("mlp_bias", opts["mlp_bias"])


class GatedActivation(nn.Module):
    """Gated activation on packed (N, D, H) features (deepmd-kit ``GatedActivation``, ndfc).

    GLU mode (``gate`` given): ``out0 = v0 · act(g0)``, ``out_l = v_l · sigmoid(g0 @ W)[l−1]``.
    Plain mode: ``out0 = act(x0)``, ``out_l = x_l · sigmoid(x0 @ W)[l−1]``.
    ``gate_linear.weight`` (H, L·H), output index (l−1)·H + c; absent when L = 0.
    """

    def __init__(self, lmax: int, channels: int, activation: str) -> None:
        super().__init__()
        self.lmax = lmax
        self.channels = channels
        self.scalar_act = activation_fn(activation)
        if lmax > 0:
            self.gate_linear = ChannelLinear(channels, lmax * channels)
        self._gate_row: torch.Tensor
        self.register_buffer("_gate_row", degree_index(lmax)[1:] - 1, persistent=False)

    def forward(self, x: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        """Gate the features ``x`` (N, D, H), by ``gate`` (GLU mode) or by themselves."""
        src = x if gate is None else gate
        x0 = self.scalar_act(x[:, :1]) if gate is None else x[:, :1] * self.scalar_act(gate[:, :1])
        d = x.shape[1]
        if self.lmax == 0 or d == 1:
            return x0
        g = torch.sigmoid(src[:, 0] @ self.gate_linear.weight)  # (N, L·H)
        g = g.reshape(x.shape[0], self.lmax, self.channels)[:, self._gate_row[: d - 1]]
        return torch.cat([x0, x[:, 1:] * g], dim=1)


class SelfGridNet(nn.Module):
    """Self-mode grid net (deepmd-kit ``S2GridNet`` / ``SO3GridNet`` with ``mode='self'``).

    Input (N, D, 2·K·H) = [left | right]; ``sp = [left0, right0]`` (l = 0, frame 0);
    ``coeff = grid_op(left, right)``; then the scalar path with ``scalar_gate.weight`` (2H, H).
    """

    def __init__(self, proj: GridProjector, channels: int, op_type: str, n_branches: int):
        super().__init__()
        #: EngineSettings whose ``ops_on`` picks the fused grid product (set by the descriptor
        #: when its kernels are not "torch"); None: the torch product
        self.grid_settings = None
        self.proj = proj
        self.channels = channels
        self.scalar_gate = ChannelLinear(2 * channels, channels)
        op = make_grid_op(op_type, channels, "self", n_branches)
        if op is not None:
            self.grid_op = op

    def forward(self, y: torch.Tensor, n_rows: int | None = None) -> torch.Tensor:
        """(N, D, 2·K·H) → (N, n_rows or D, K·H)."""
        h = self.channels
        left, right = y.chunk(2, dim=-1)
        sp = torch.cat([left[:, 0, :h], right[:, 0, :h]], dim=-1)  # (N, 2H)
        fused, exact = fused_grid_choice(self.grid_settings, y)
        if hasattr(self, "grid_op"):
            coeff = self.grid_op(self.proj, left, right, sp, n_rows, fused, exact)
        else:
            coeff = grid_product(self.proj, left, right, n_rows, fused, exact)
        return apply_scalar_path(coeff, sp, sp @ self.scalar_gate.weight, self.proj.n_frames)


class EquivariantFFN(nn.Module):
    """``so3_linear_2(act(so3_linear_1(x)))`` on (N, D, C).

    Parameters
    ----------
    lmax, channels, hidden : int
        Degree L, channels C, hidden width H.
    grid : {"none", "s2", "so3"}
    kmax : int
        Frame order of the SO(3) grid (ignored otherwise).
    op_type : {"glu", "mlp", "branch"}
        Grid operation (grid variants only).
    n_branches : int
        Branch count of the ``branch`` op.
    activation : str
        l = 0 activation of the gated (non-grid) variant.
    glu : bool
        GLU split of the gated variant.
    s2_grid : {"lebedev", "e3nn"}
        Sphere grid of the S2 variant (deepmd-kit's ``lebedev_quadrature``, FFN entry).
    """

    def __init__(
        self,
        lmax: int,
        channels: int,
        hidden: int,
        *,
        grid: str = "none",
        kmax: int = 0,
        op_type: str = "glu",
        n_branches: int = 1,
        activation: str = "silu",
        glu: bool = True,
        s2_grid: str = "lebedev",
    ) -> None:
        super().__init__()
        self.lmax = lmax
        self.grid = grid
        self.glu = glu
        n_k = 2 * kmax + 1 if grid == "so3" else 1
        if grid == "none":
            width1 = 2 * hidden if glu else hidden
        else:
            width1 = 2 * n_k * hidden
        self.so3_linear_1 = SO3Linear(lmax, channels, width1)
        if grid == "none":
            self.act: GatedActivation | SelfGridNet = GatedActivation(lmax, hidden, activation)
        else:
            proj = so3_projector(lmax, kmax) if grid == "so3" else s2_projector(lmax, s2_grid)
            self.act = SelfGridNet(proj, hidden, op_type, n_branches)
        self.so3_linear_2 = SO3Linear(lmax, n_k * hidden, channels)

    def forward(self, x: torch.Tensor, n_rows: int | None = None) -> torch.Tensor:
        """Map ``x`` (N, D, C) to (N, D, C), or to only its first ``n_rows`` (l, m) rows."""
        y = self.so3_linear_1(x)
        if self.grid != "none":
            y = self.act(y, n_rows)
        else:
            if n_rows is not None:
                y = y[:, :n_rows]
            y = self.act(*y.chunk(2, dim=-1)) if self.glu else self.act(y)
        return self.so3_linear_2(y)


class ReadoutFFN(EquivariantFFN):
    """Descriptor readout (deepmd-kit ``output_ffn`` + ``_apply_readout``), returns (N, C).

    ``none``: ``x0 + FFN_{L=0}(x0)``; ``glu`` / ``mlp``: ``(x + FFN_SO3grid(x))[:, 0]`` (only the
    l = 0 row is computed).
    """

    def __init__(self, lmax: int, channels: int, hidden: int, mode: str, **kwargs) -> None:
        super().__init__(lmax, channels, hidden, **kwargs)
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]  # no n_rows
        """Map ``x`` (N, D ≥ (L+1)², C) to the descriptor (N, C)."""
        if self.mode == "none":
            x0 = x[:, :1]
            return (x0 + super().forward(x0))[:, 0]
        x = x[:, : (self.lmax + 1) ** 2]
        return x[:, 0] + super().forward(x, n_rows=1)[:, 0]


def build_block_ffn(lmax: int, channels: int, opts: dict) -> nn.Module:
    """Build the per-block FFN (deepmd-kit ``blocks.i.ffns.j``) from descriptor options.

    Reads ``s2_activation`` ([so2, ffn], default [False, True]), ``ffn_so3_grid`` (False),
    ``grid_mlp`` / ``grid_branch`` (entry 2, defaults False / 0), ``kmax`` (1, clipped to lmax),
    ``ffn_neurons`` (0 = auto), ``glu_activation`` (True), ``activation_function`` ("silu"),
    ``lebedev_quadrature`` (True; bool or [so2, ffn]: the FFN entry picks the S2 grid, Lebedev
    or e3nn's product grid; SO(3) grids are Lebedev either way), ``mlp_bias`` (False).
    """
    _check_common(opts)
    s2 = list(opts.get("s2_activation", [False, True]))
    so3_grid = bool(opts.get("ffn_so3_grid", False))
    s2_ffn = False if so3_grid else bool(s2[1])
    glu = True if (s2_ffn or so3_grid) else bool(opts.get("glu_activation", True))
    activation = "silu" if s2_ffn else str(opts.get("activation_function", "silu"))
    hidden = resolve_ffn_width(int(opts.get("ffn_neurons", 0)), channels, glu)
    if not (s2_ffn or so3_grid):
        return EquivariantFFN(lmax, channels, hidden, grid="none", activation=activation, glu=glu)
    leb = opts.get("lebedev_quadrature", True)
    leb_ffn = leb[1] if isinstance(leb, (list, tuple)) else leb
    if not isinstance(leb_ffn, bool):
        raise UnsupportedModelError("lebedev_quadrature", leb, "a bool or a list of two bools")
    n_branches = int(grid_setting(opts, "grid_branch", 2, 0))
    use_mlp = bool(grid_setting(opts, "grid_mlp", 2, False))
    op_type = "branch" if n_branches > 0 else ("mlp" if use_mlp else "glu")
    return EquivariantFFN(
        lmax,
        channels,
        hidden,
        grid="so3" if so3_grid else "s2",
        kmax=min(int(opts.get("kmax", 1)), lmax),
        op_type=op_type,
        n_branches=max(1, n_branches),
        s2_grid="lebedev" if leb_ffn else "e3nn",
    )


def build_readout(lmax: int, channels: int, opts: dict) -> nn.Module:
    """Build the descriptor readout (deepmd-kit ``output_ffn``); ``module(x)`` returns (N, C).

    ``lmax`` is the node degree after the last block. Reads ``so3_readout`` ("none"),
    ``readout_layers`` (1; only 1 supported), ``ffn_neurons`` (0), ``glu_activation`` (True),
    ``activation_function`` ("silu"), ``kmax`` (1, clipped to lmax), ``mlp_bias`` (False).
    The SO(3) grid of glu/mlp readouts is exact, so ``lebedev_quadrature`` does not matter.
    """
    _check_common(opts)
    mode = str(opts.get("so3_readout", "none")).lower()
    if mode not in ("none", "glu", "mlp"):
        raise UnsupportedModelError("so3_readout", opts.get("so3_readout"))
    layers = int(opts.get("readout_layers", 1))
    if layers != 1:
        raise UnsupportedModelError("readout_layers", layers)
    glu = bool(opts.get("glu_activation", True))
    hidden = resolve_ffn_width(int(opts.get("ffn_neurons", 0)), channels, glu)
    if mode == "none":
        activation = str(opts.get("activation_function", "silu"))
        return ReadoutFFN(0, channels, hidden, mode, activation=activation, glu=glu)
    return ReadoutFFN(
        lmax,
        channels,
        hidden,
        mode,
        grid="so3",
        kmax=min(int(opts.get("kmax", 1)), lmax),
        op_type="mlp" if mode == "mlp" else "glu",
    )
