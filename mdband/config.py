"""SeZMConfig: every hyperparameter of a SeZM (DPA4) energy model, validated once.

The fields use deepmd-kit's option names (``descriptor`` and ``fitting_net`` sections of a DPA4
``model_params``), so a checkpoint's config maps one-to-one
(:func:`mdband.io.deepmd_params.config_from_deepmd` reads one, strictly). Options mdband does not
implement raise :class:`~mdband.errors.UnsupportedModelError` naming the option and its value.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from ase.data import atomic_numbers

from mdband.errors import UnsupportedModelError

# fields added after model files and run checkpoints recorded config dicts: left out of
# to_dict at their default, so an older model's dict and hash stay what they were
_OMITTED_AT_DEFAULT = {
    "dim_case_embd": 0,
    "case_film_embd": False,
    "active_mode": "ener",
    "sel": 0,
    "add_chg_spin_ebd": False,
    "default_chg_spin": None,
    "bridging": "none",
    "bridging_r_inner": 0.5,
    "bridging_r_outer": 0.8,
}


@dataclass(frozen=True)
class SpinConfig:
    """A spin model's ``model.spin`` section (deepmd-kit's names), per type of the type map.

    ``scheme`` ``"native"``: each atom's magnetic moment enters the descriptor as a feature.
    ``"deepspin"``: each magnetic atom gets a virtual atom at ``r + virtual_scale[t] * m`` of
    type ``t + len(type_map)`` (the network's types are doubled); ``sel`` is the descriptor's
    ``sel`` (deepmd-kit's neighbour list keeps each atom's ``sel`` nearest real neighbours).
    """

    scheme: str
    use_spin: tuple[bool, ...]
    virtual_scale: tuple[float, ...] = ()
    sel: int = 0

    def to_dict(self) -> dict:
        """Return the section as a plain dict (tuples as lists), as model files store it."""
        return {"scheme": self.scheme, "use_spin": list(self.use_spin),
                "virtual_scale": list(self.virtual_scale), "sel": self.sel}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> SpinConfig:
        """Build a SpinConfig from :meth:`to_dict`'s dict (``virtual_scale``, ``sel`` optional)."""
        scale = tuple(float(x) for x in d.get("virtual_scale", ()))
        use = tuple(bool(x) for x in d["use_spin"])
        return cls(str(d["scheme"]), use, scale, int(d.get("sel", 0)))

    def magnetic_types(self, type_map) -> list[str]:
        """Return the types of ``type_map`` whose ``use_spin`` is on."""
        return [t for t, on in zip(type_map, self.use_spin) if on]


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
    #: (radial-basis exponent, edge exponent); 0 for the basis: no envelope on it (deepmd-kit's
    #: integer env_exp, newer than 3.2.0)
    env_exp: tuple[int, int] = (7, 5)
    #: one bool, or deepmd-kit's per-site [radial, film, focus] (newer than 3.2.0)
    edge_norm: bool | tuple[bool, bool, bool] = True
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
    #: deepmd-kit's [so2, ffn] quadrature flags: the ffn entry picks the S2 FFN grid (Lebedev-exact
    #: or e3nn's product grid); the so2 entry only concerns SO(2) S2 grids mdband refuses
    lebedev_quadrature: tuple[bool, bool] = (True, True)
    eps: float = 1e-7
    version: float = 1.2
    fitting_neuron: tuple[int, ...] = (0,)
    dim_case_embd: int = 0
    case_film_embd: bool = False
    active_mode: str = "ener"
    sel: int = 0
    #: deepmd-kit's frame-level charge/spin embedding and its [charge, spin] default
    #: (:mod:`mdband.charge_spin`); left out of :meth:`to_dict` at their defaults
    add_chg_spin_ebd: bool = False
    default_chg_spin: tuple[float, float] | None = None
    spin: SpinConfig | None = None
    #: zone bridging (deepmd-kit's model-level ``bridging_method``): "none" or "zbl", with the
    #: clamp / switching window [bridging_r_inner, bridging_r_outer] in Å (mdband.model.bridging)
    bridging: str = "none"
    bridging_r_inner: float = 0.5
    bridging_r_outer: float = 0.8
    extra: dict = field(default_factory=dict, compare=False)

    # ------------------------------------------------------------------ derived
    @property
    def ntypes(self) -> int:
        """Types of the network: the type map's, doubled by a deepspin model's virtual types."""
        deepspin = self.spin is not None and self.spin.scheme == "deepspin"
        return len(self.type_map) * (2 if deepspin else 1)

    @property
    def lmax(self) -> int:
        """Largest degree: the first block's of ``l_schedule`` (0 without blocks)."""
        return self.l_schedule[0] if self.l_schedule else 0

    @property
    def n_blocks(self) -> int:
        """Number of interaction blocks: the length of ``l_schedule``."""
        return len(self.l_schedule)

    @property
    def readout_lmax(self) -> int:
        """Degree of the last block of ``l_schedule`` (:attr:`lmax` without blocks)."""
        return self.l_schedule[-1] if self.l_schedule else self.lmax

    @property
    def focus_channels(self) -> int:
        """Width of one focus: ``focus_dim``, or ``channels`` when it is 0."""
        return self.channels if self.focus_dim == 0 else self.focus_dim

    @property
    def hidden_channels(self) -> int:
        """Width of all foci together: ``n_focus`` × :attr:`focus_channels`."""
        return self.n_focus * self.focus_channels

    @property
    def radial_hidden(self) -> list[int]:
        """Hidden widths of the radial MLP: ``radial_mlp`` with 0 meaning ``channels``."""
        return [self.channels if x == 0 else int(x) for x in self.radial_mlp]

    @property
    def fitting_widths(self) -> list[int]:
        """Hidden widths of the fitting net: ``fitting_neuron`` with 0 meaning :func:`auto_width`.

        The auto width is that of :attr:`fitting_input`.
        """
        auto = auto_width(self.fitting_input)
        return [auto if w == 0 else int(w) for w in self.fitting_neuron]

    @property
    def fitting_input(self) -> int:
        """Width of the fitting net's input.

        It is the descriptor, plus the case one-hot when it is concatenated (``dim_case_embd``
        without ``case_film_embd``).
        """
        return self.channels + (0 if self.case_film_embd else self.dim_case_embd)

    @property
    def direct_forces(self) -> bool:
        """deepmd-kit's dens mode: forces from the direct-force head, no virial."""
        return self.active_mode == "dens"

    def _edge_norm_site(self, i: int) -> bool:
        return self.edge_norm if isinstance(self.edge_norm, bool) else self.edge_norm[i]

    @property
    def radial_norm(self) -> bool:
        """RMSNorm in the radial MLP's hidden layers (and the post-SO(2) norm's 1e-5 eps)."""
        return self._edge_norm_site(0)

    @property
    def film_norm(self) -> bool:
        """RMSNorms of the environment seed's FiLM logits."""
        return self._edge_norm_site(1)

    @property
    def focus_norm(self) -> bool:
        """RMSNorm of the focus competition's scalars."""
        return self._edge_norm_site(2)

    @property
    def basis_family(self) -> str:
        """Family of the radial basis: ``bessel`` or ``gaussian``.

        A ``/fix`` basis evaluates like its family (it only keeps the frequencies or centres
        out of training).
        """
        return self.basis_type.partition("/")[0]

    @property
    def use_gie(self) -> bool:
        """Whether the environment seed is used: ``use_env_seed`` with :attr:`lmax` > 0."""
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
            "lebedev_quadrature": list(self.lebedev_quadrature),
            "activation_function": "silu",
            "mlp_bias": False,
            "so3_readout": self.so3_readout,
            "readout_layers": 1,
            "message_node_so3": self.message_node_so3,
            "n_focus": self.n_focus,
            "focus_dim": self.focus_dim,
        }

    def to_dict(self) -> dict:
        """Return the config as a plain dict: the one stored in model files and hashed.

        Tuples become lists; ``extra`` is left out; ``spin`` only when set; a
        ``lebedev_quadrature`` whose two entries agree is one bool; the fields added later are
        left out at their defaults, so older models keep their dict and hash.
        """
        d = asdict(self)
        d.pop("extra")
        d.pop("spin")
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
        if self.spin is not None:  # absent otherwise: the dict enters the model hash
            out["spin"] = self.spin.to_dict()
        # one bool when both entries agree, as configs stored it before [so2, ffn] was kept: the
        # dict enters the model hash, which run checkpoints compare on resume
        so2, ffn = self.lebedev_quadrature
        if so2 == ffn:
            out["lebedev_quadrature"] = so2
        for key, default in _OMITTED_AT_DEFAULT.items():
            if out[key] == default:  # likewise: configs without them keep their dict
                out.pop(key)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> SeZMConfig:
        """Build and validate a config from a :meth:`to_dict` dict (older forms accepted)."""
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
            "default_chg_spin",
            "lebedev_quadrature",
            "edge_norm",
        ):
            if k in kw and kw[k] is not None:
                # model files written before [so2, ffn] was kept store one bool
                if k == "lebedev_quadrature" and isinstance(kw[k], bool):
                    kw[k] = (kw[k],) * 2
                elif not isinstance(kw[k], bool):
                    kw[k] = tuple(kw[k])
        if kw.get("spin") is not None:
            kw["spin"] = SpinConfig.from_dict(kw["spin"])
        cfg = cls(**kw)
        cfg.validate()
        return cfg

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Raise :class:`~mdband.errors.UnsupportedModelError` for a value mdband refuses.

        The error names the option and its value.
        """

        def bad(opt, val, why=""):
            raise UnsupportedModelError(opt, val, why)

        if self.ntypes < 1:
            bad("type_map", list(self.type_map), "empty")
        if not self.rcut > 0:
            bad("rcut", self.rcut, "must be positive")
        if self.basis_type not in ("bessel", "gaussian", "bessel/fix", "gaussian/fix"):
            bad("basis_type", self.basis_type)
        if len(self.env_exp) != 2 or self.env_exp[0] < 0 or self.env_exp[1] < 1:
            bad("env_exp", list(self.env_exp), "expected [rbf >= 0, edge >= 1]")
        if not isinstance(self.edge_norm, bool) and len(self.edge_norm) != 3:
            bad("edge_norm", list(self.edge_norm), "expected a bool or [radial, film, focus]")
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
        if len(self.lebedev_quadrature) != 2:
            bad("lebedev_quadrature", list(self.lebedev_quadrature), "expected [so2, ffn]")
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
        if self.dim_case_embd < 0:
            bad("fitting_net.dim_case_embd", self.dim_case_embd)
        if self.case_film_embd and self.dim_case_embd == 0:
            bad("fitting_net.case_film_embd", True, "needs dim_case_embd > 0")
        if self.active_mode not in ("ener", "dens"):
            bad("active_mode", self.active_mode, "known modes are ener and dens")
        if self.sel < 0 or (self.sel > 0) != self.direct_forces:
            bad("sel", self.sel, "a neighbour count > 0 for the dens mode only")
        sp = self.spin
        if sp is not None and (
            sp.scheme not in ("native", "deepspin")
            or len(sp.use_spin) != len(self.type_map)
            or (sp.scheme == "deepspin" and len(sp.virtual_scale) != len(self.type_map))
        ):
            bad("spin", sp.to_dict(), "one use_spin (and deepspin virtual_scale) per type")
        if sp is not None and self.active_mode != "ener":
            bad("spin", sp.to_dict(), f"deepmd-kit's spin models have no {self.active_mode} mode")
        self._validate_bridging()
        self._validate_charge_spin(bad)

    def _validate_bridging(self) -> None:
        def bad(opt, val, why=""):
            raise UnsupportedModelError(opt, val, why)

        if self.bridging not in ("none", "zbl"):
            bad("bridging_method", self.bridging, "mdband implements 'zbl' and 'none'")
        if self.bridging == "none":
            return
        r_in, r_out = self.bridging_r_inner, self.bridging_r_outer
        for key, val in (("bridging_r_inner", r_in), ("bridging_r_outer", r_out)):
            if isinstance(val, bool) or not isinstance(val, (int, float)):
                bad(key, val, "expected a number (Å)")
        if not 0.0 < r_in < r_out:
            bad("bridging_r_inner/bridging_r_outer", [r_in, r_out], "need 0 < r_inner < r_outer")
        unknown = [s for s in self.type_map if s not in atomic_numbers or atomic_numbers[s] < 1]
        if unknown:
            bad("type_map", list(self.type_map), f"ZBL needs element symbols, not {unknown}")
        if self.active_mode != "ener":  # deepmd-kit refuses it too
            bad("bridging_method", self.bridging, f"not with the {self.active_mode} mode")
        if self.spin is not None:
            bad("bridging_method", self.bridging, "ZBL bridging of spin models is not implemented")

    def _validate_charge_spin(self, bad) -> None:
        d = self.default_chg_spin
        if d is None:
            return
        if not self.add_chg_spin_ebd:
            bad("default_chg_spin", list(d), "set without add_chg_spin_ebd")
        ok = len(d) == 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in d
        )
        if not ok:
            bad("default_chg_spin", list(d), "expected [charge, spin], two numbers")
