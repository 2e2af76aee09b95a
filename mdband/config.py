"""SeZMConfig: every hyperparameter of a SeZM (DPA4) energy model, validated once.

The fields use deepmd-kit's option names (``descriptor`` and ``fitting_net`` sections of a DPA4
``model_params``), so a checkpoint's config maps one-to-one. Options mdband does not implement
raise :class:`~mdband.errors.UnsupportedModelError` naming the option and its value.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from mdband.errors import UnsupportedModelError

# descriptor option -> the only value mdband implements (anything else is rejected)
_FIXED = {
    "so2_norm": False,
    "so2_attn_res": "none",
    "atten_f_mix": False,
    "atten_v_proj": False,
    "atten_o_proj": False,
    "mlp_bias": False,
    "layer_scale": False,
    "full_attn_res": "none",
    "block_attn_res": "none",
    "node_wise_s2": False,
    "node_wise_so3": False,
    "message_node_s2": False,
    "readout_layers": 1,
    "activation_function": "silu",
    "edge_cartesian": False,
    "node_cartesian": "none",
    "add_chg_spin_ebd": False,
    "extra_node_l": 0,
}


def _broadcast3(value, name: str) -> list:
    vals = list(value) if isinstance(value, (list, tuple)) else [value] * 3
    if len(vals) != 3:
        raise UnsupportedModelError(name, value, "expected a scalar or a list of 3")
    return vals


def auto_width(dim_in: int, glu: bool = True) -> int:
    """deepmd-kit's auto width: 32·ceil((8/3)·dim/32) with GLU, else 32·ceil(4·dim/32)."""
    base = 8.0 * dim_in / 3.0 if glu else 4.0 * dim_in
    return int(32 * math.ceil(base / 32.0))


@dataclass(frozen=True)
class SeZMConfig:
    """Validated SeZM descriptor + DPA4 energy-head configuration."""

    type_map: tuple[str, ...]
    rcut: float = 6.0
    channels: int = 64
    n_radial: int = 16
    basis_type: str = "bessel"
    radial_mlp: tuple[int, ...] = (0,)
    env_exp: tuple[int, int] = (7, 5)
    edge_norm: bool = True
    use_env_seed: bool = True
    l_schedule: tuple[int, ...] = (3, 3, 3)
    kmax: int = 1
    mixing_layers: int = 4
    radial_so2_mode: str = "degree_channel"
    radial_so2_rank: int = 1
    n_focus: int = 1
    focus_dim: int = 0
    n_atten_head: int = 1
    ffn_neurons: int = 0
    ffn_blocks: int = 1
    sandwich_norm: tuple[bool, bool, bool, bool] = (False, True, True, False)
    s2_activation: tuple[bool, bool] = (False, True)
    ffn_so3_grid: bool = False
    grid_mlp: tuple[bool, bool, bool] = (False, False, False)
    grid_branch: tuple[int, int, int] = (0, 0, 0)
    message_node_so3: bool = False
    so3_readout: str = "none"
    glu_activation: bool = True
    lebedev_quadrature: bool = True
    eps: float = 1e-7
    version: float = 1.2
    fitting_neuron: tuple[int, ...] = (0,)
    extra: dict = field(default_factory=dict, compare=False)

    # ------------------------------------------------------------------ derived
    @property
    def ntypes(self) -> int:
        return len(self.type_map)

    @property
    def lmax(self) -> int:
        return self.l_schedule[0] if self.l_schedule else 0

    @property
    def n_blocks(self) -> int:
        return len(self.l_schedule)

    @property
    def readout_lmax(self) -> int:
        return self.l_schedule[-1] if self.l_schedule else self.lmax

    @property
    def focus_channels(self) -> int:
        return self.channels if self.focus_dim == 0 else self.focus_dim

    @property
    def hidden_channels(self) -> int:
        return self.n_focus * self.focus_channels

    @property
    def radial_hidden(self) -> list[int]:
        return [self.channels if x == 0 else int(x) for x in self.radial_mlp]

    @property
    def fitting_widths(self) -> list[int]:
        return [auto_width(self.channels) if w == 0 else int(w) for w in self.fitting_neuron]

    @property
    def use_gie(self) -> bool:
        return self.use_env_seed and self.lmax > 0

    def ffn_opts(self) -> dict:
        """Options read by :mod:`mdband.model.ffn` (deepmd-kit names)."""
        return {
            "ffn_neurons": self.ffn_neurons,
            "s2_activation": list(self.s2_activation),
            "ffn_so3_grid": self.ffn_so3_grid,
            "grid_mlp": list(self.grid_mlp),
            "grid_branch": list(self.grid_branch),
            "kmax": self.kmax,
            "glu_activation": self.glu_activation,
            "lebedev_quadrature": self.lebedev_quadrature,
            "activation_function": "silu",
            "mlp_bias": False,
            "so3_readout": self.so3_readout,
            "readout_layers": 1,
            "message_node_so3": self.message_node_so3,
            "n_focus": self.n_focus,
            "focus_dim": self.focus_dim,
        }

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("extra")
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict) -> SeZMConfig:
        kw = dict(d)
        for k in (
            "type_map",
            "radial_mlp",
            "env_exp",
            "l_schedule",
            "sandwich_norm",
            "s2_activation",
            "grid_mlp",
            "grid_branch",
            "fitting_neuron",
        ):
            if k in kw and kw[k] is not None:
                kw[k] = tuple(kw[k])
        cfg = cls(**kw)
        cfg.validate()
        return cfg

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        def bad(opt, val, why=""):
            raise UnsupportedModelError(opt, val, why)

        if self.ntypes < 1:
            bad("type_map", list(self.type_map), "empty")
        if not self.rcut > 0:
            bad("rcut", self.rcut, "must be positive")
        if self.basis_type not in ("bessel", "gaussian"):
            bad("basis_type", self.basis_type)
        if any(l < 1 for l in self.l_schedule):
            bad("l_schedule", list(self.l_schedule), "every block needs lmax >= 1")
        if any(self.l_schedule[i] < self.l_schedule[i + 1] for i in range(self.n_blocks - 1)):
            bad("l_schedule", list(self.l_schedule), "must be non-increasing")
        if self.radial_so2_mode not in ("none", "degree", "degree_channel"):
            bad("radial_so2_mode", self.radial_so2_mode)
        if self.radial_so2_rank < 0:
            bad("radial_so2_rank", self.radial_so2_rank)
        if self.n_focus < 1 or self.focus_dim < 0:
            bad("n_focus/focus_dim", (self.n_focus, self.focus_dim))
        if self.n_atten_head < 0 or (
            self.n_atten_head > 0 and self.focus_channels % self.n_atten_head
        ):
            bad("n_atten_head", self.n_atten_head, "must divide the focus width")
        if self.s2_activation[0]:
            bad("s2_activation", list(self.s2_activation), "S2 activation inside SO(2) layers")
        if not self.lebedev_quadrature:
            bad("lebedev_quadrature", False, "only Lebedev-exact grids are implemented")
        if self.so3_readout not in ("none", "glu", "mlp"):
            bad("so3_readout", self.so3_readout)
        if self.kmax < 0:
            bad("kmax", self.kmax)
        if self.mixing_layers < 0 or self.ffn_blocks < 0:
            bad("mixing_layers/ffn_blocks", (self.mixing_layers, self.ffn_blocks))
        if self.version not in (1.0, 1.1, 1.2):
            bad("version", self.version, "known descriptor versions are 1.0, 1.1 and 1.2")
        if any(w < 0 for w in self.fitting_neuron):
            bad("fitting_net.neuron", list(self.fitting_neuron))


def config_from_deepmd(model_params: dict, version: float) -> SeZMConfig:
    """Map a deepmd-kit DPA4 ``model_params`` dict to :class:`SeZMConfig` (strict)."""
    mtype = str(model_params.get("type", "")).lower()
    if mtype not in ("dpa4", "sezm"):
        raise UnsupportedModelError("model.type", model_params.get("type"), "not a SeZM/DPA4 model")
    desc = dict(model_params.get("descriptor") or {})
    fit = dict(model_params.get("fitting_net") or {})
    if str(desc.get("type", "dpa4")).lower() not in ("dpa4", "sezm"):
        raise UnsupportedModelError("descriptor.type", desc.get("type"))
    if str(fit.get("type", "dpa4_ener")).lower() not in ("dpa4_ener", "sezm_ener"):
        raise UnsupportedModelError("fitting_net.type", fit.get("type"))
    for key, want in _FIXED.items():
        if key in desc and desc[key] != want and not (want is False and not desc[key]):
            raise UnsupportedModelError(key, desc[key])
    if desc.get("use_spin") not in (None, [], False):
        raise UnsupportedModelError("use_spin", desc.get("use_spin"))
    if desc.get("exclude_types") or model_params.get("pair_exclude_types"):
        raise UnsupportedModelError("exclude_types", desc.get("exclude_types"))
    if model_params.get("atom_exclude_types"):
        raise UnsupportedModelError("atom_exclude_types", model_params.get("atom_exclude_types"))
    if str(model_params.get("bridging_method", "None")) not in ("None", "none"):
        raise UnsupportedModelError("bridging_method", model_params.get("bridging_method"))
    if model_params.get("spin"):
        raise UnsupportedModelError("spin", model_params.get("spin"))
    for key in ("numb_fparam", "numb_aparam", "dim_case_embd"):
        if int(fit.get(key, 0) or 0):
            raise UnsupportedModelError(f"fitting_net.{key}", fit[key])
    if fit.get("activation_function", "silu") != "silu":
        raise UnsupportedModelError("fitting_net.activation_function", fit["activation_function"])
    if fit.get("atom_ener"):
        raise UnsupportedModelError("fitting_net.atom_ener", fit["atom_ener"])

    lmax = int(desc.get("lmax", 3))
    n_blocks = int(desc.get("n_blocks", 3))
    l_sched = desc.get("l_schedule")
    l_sched = [lmax] * n_blocks if l_sched is None else [int(x) for x in l_sched]
    mmax = int(desc.get("mmax", 1) if desc.get("mmax") is not None else 1)
    m_sched = desc.get("m_schedule")
    m_eff = [min(mmax, l) for l in l_sched] if m_sched is None else [int(m) for m in m_sched]
    if any(m != 1 for m in m_eff):
        raise UnsupportedModelError("mmax/m_schedule", m_sched if m_sched else mmax, "only mmax=1")
    leb = desc.get("lebedev_quadrature", True)
    leb_ok = all(bool(x) for x in leb) if isinstance(leb, (list, tuple)) else bool(leb)
    mixing = desc.get("so2_layers")
    mixing = desc.get("mixing_layers", 4) if mixing is None else mixing
    cfg = SeZMConfig(
        type_map=tuple(model_params["type_map"]),
        rcut=float(desc.get("rcut", 6.0)),
        channels=int(desc.get("channels", 64)),
        n_radial=int(desc.get("n_radial", 16)),
        basis_type=str(desc.get("basis_type", "bessel")).lower(),
        radial_mlp=tuple(int(x) for x in (desc.get("radial_mlp") or [0])),
        env_exp=tuple(int(x) for x in (desc.get("env_exp") or [7, 5])),
        edge_norm=bool(desc.get("edge_norm", True)),
        use_env_seed=bool(desc.get("use_env_seed", True)),
        l_schedule=tuple(l_sched),
        kmax=int(desc.get("kmax", 1)),
        mixing_layers=int(mixing),
        radial_so2_mode=str(desc.get("radial_so2_mode", "degree_channel")).lower(),
        radial_so2_rank=int(desc.get("radial_so2_rank", 1)),
        n_focus=int(desc.get("n_focus", 1)),
        focus_dim=int(desc.get("focus_dim", 0)),
        n_atten_head=int(desc.get("n_atten_head", 1)),
        ffn_neurons=int(desc.get("ffn_neurons", 0)),
        ffn_blocks=int(desc.get("ffn_blocks", 1)),
        sandwich_norm=tuple(bool(x) for x in desc.get("sandwich_norm", [False, True, True, False])),
        s2_activation=tuple(bool(x) for x in desc.get("s2_activation", [False, True])),
        ffn_so3_grid=bool(desc.get("ffn_so3_grid", False)),
        grid_mlp=tuple(bool(x) for x in _broadcast3(desc.get("grid_mlp", False), "grid_mlp")),
        grid_branch=tuple(int(x) for x in _broadcast3(desc.get("grid_branch", 0), "grid_branch")),
        message_node_so3=bool(desc.get("message_node_so3", False)),
        so3_readout=str(desc.get("so3_readout", "none")).lower(),
        glu_activation=bool(desc.get("glu_activation", True)),
        lebedev_quadrature=leb_ok,
        eps=float(desc.get("eps", 1e-7)),
        version=float(version),
        fitting_neuron=tuple(
            int(x) for x in (fit.get("neuron") if fit.get("neuron") is not None else [0])
        ),
    )
    cfg.validate()
    return cfg
