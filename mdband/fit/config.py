"""FitConfig: every setting of ``mdband fit``, from a TOML file, a dict and/or flags.

The TOML file has training settings at the top level and the architecture of a model trained
from scratch in a ``[model]`` table, whose keys are :class:`~mdband.config.SeZMConfig` fields
(deepmd-kit option names) plus the shorthands ``lmax`` and ``n_blocks``::

    epochs = 100
    batch_size = 4
    lr = 3e-3
    [model]
    channels = 16
    lmax = 1
    n_blocks = 1
    rcut = 5.0

Keys may be written with ``-`` or ``_``. Relative data/output paths in the file are taken from
the file's directory.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from mdband.config import SeZMConfig
from mdband.errors import MdbandError, UnsupportedModelError


class FitConfigError(MdbandError, ValueError):
    """A ``mdband fit`` setting is unknown, out of range or conflicts with another one."""


# small, fast defaults for a model trained from scratch (SeZMConfig fields)
DEFAULT_MODEL: dict[str, Any] = {
    "rcut": 5.0,
    "channels": 16,
    "n_radial": 8,
    "l_schedule": [1],
    "mixing_layers": 1,
    "radial_so2_mode": "none",
    "edge_norm": False,
    "version": 1.1,
}

_PATH_KEYS = ("data", "output", "init", "checkpoint", "log")


@dataclass
class FitConfig:
    """Settings of one training run (see ``mdband fit --help`` for each)."""

    data: list[str] = field(default_factory=list)
    data_format: str | None = None
    output: str | None = None
    format: str | None = None
    init: str | None = None
    head: str | None = None
    model: dict = field(default_factory=dict)
    type_map: list[str] | None = None
    epochs: int = 50
    batch_size: int = 4
    lr: float = 3e-3
    lr_final_ratio: float = 0.01
    warmup: float = 0.05
    weight_decay: float = 0.0
    grad_clip: float = 10.0
    ema_decay: float = 0.99
    energy_weight: float = 10.0
    force_weight: float = 1.0
    virial_weight: float = 1.0
    val_fraction: float = 0.1
    seed: int = 0
    init_seed: int | None = None
    init_gain: float = 1.0
    refit_shift: bool = False
    max_frames: int | None = None
    energy_key: str | None = None
    forces_key: str | None = None
    virial_key: str | None = None
    checkpoint: str | None = None
    checkpoint_every: int = 5
    resume: bool = False
    overwrite: bool = False
    device: str = "auto"
    dtype: str = "float32"
    threads: int | None = None
    log: str | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_mapping(cls, data: dict, base_dir=None) -> FitConfig:
        """Build a validated config from a dict of settings (relative paths from ``base_dir``)."""
        kw = normalise(data, base_dir)
        cfg = cls(**kw)
        cfg.validate()
        return cfg

    @classmethod
    def from_toml(cls, path, overrides: dict | None = None) -> FitConfig:
        """Build a validated config from a TOML file, with ``overrides`` taking precedence."""
        data = read_toml(path)
        base = Path(path).parent
        data = normalise(data, base)
        data.update(normalise(overrides or {}, None))
        return cls.from_mapping(data)

    def to_dict(self) -> dict:
        """Return every setting as a dict."""
        return asdict(self)

    # ------------------------------------------------------------------ derived
    @property
    def checkpoint_path(self) -> Path:
        """Return the checkpoint file: ``checkpoint`` if set, else ``OUTPUT.ckpt``."""
        if self.checkpoint:
            return Path(self.checkpoint)
        return Path(str(self.output) + ".ckpt")

    def model_config(self, type_map: list[str]) -> dict:
        """Return the SeZMConfig dict of a model trained from scratch (validated)."""
        d = dict(DEFAULT_MODEL)
        m = {k.replace("-", "_"): v for k, v in self.model.items()}
        lmax = m.pop("lmax", None)
        n_blocks = m.pop("n_blocks", None)
        if "l_schedule" not in m and (lmax is not None or n_blocks is not None):
            base = list(d["l_schedule"])
            lmax = base[0] if lmax is None else lmax
            n_blocks = len(base) if n_blocks is None else n_blocks
            if not isinstance(n_blocks, int) or n_blocks < 1:
                raise FitConfigError(f"model.n_blocks must be a positive integer, got {n_blocks}")
            m["l_schedule"] = [lmax] * n_blocks
        d.update(m)
        d["type_map"] = list(type_map)
        known = {f.name for f in fields(SeZMConfig)} - {"extra"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise FitConfigError(f"unknown model option(s) {', '.join(unknown)}")
        try:
            cfg = SeZMConfig.from_dict(d)
        except UnsupportedModelError as exc:
            raise FitConfigError(f"bad model setting: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise FitConfigError(f"bad model setting: {exc}") from None
        return cfg.to_dict()

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Check every setting, raising :class:`FitConfigError` on the first bad one.

        ``data`` is made a list of path strings on the way.
        """

        def bad(msg):
            raise FitConfigError(msg)

        if isinstance(self.data, (str, Path)):
            self.data = [str(self.data)]
        self.data = [str(p) for p in self.data]
        for name in ("epochs", "batch_size", "checkpoint_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                bad(f"{name} must be a positive integer, got {v!r}")
        if self.max_frames is not None and (
            not isinstance(self.max_frames, int) or self.max_frames < 1
        ):
            bad(f"max_frames must be a positive integer, got {self.max_frames!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            bad(f"threads must be a positive integer, got {self.threads!r}")
        for name in ("seed",):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                bad(f"{name} must be an integer, got {v!r}")
        floats = {
            "lr": (0.0, None, False),
            "lr_final_ratio": (0.0, 1.0, True),
            "warmup": (0.0, 1.0, True),
            "weight_decay": (0.0, None, True),
            "grad_clip": (0.0, None, True),
            "ema_decay": (0.0, 1.0, True),
            "energy_weight": (0.0, None, True),
            "force_weight": (0.0, None, True),
            "virial_weight": (0.0, None, True),
            "val_fraction": (0.0, 1.0, True),
            "init_gain": (0.0, None, False),
        }
        for name, (lo, hi, lo_ok) in floats.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                bad(f"{name} must be a number, got {v!r}")
            if v < lo or (v == lo and not lo_ok) or (hi is not None and v > hi):
                rng = f">= {lo}" if lo_ok else f"> {lo}"
                rng += f" and <= {hi}" if hi is not None else ""
                bad(f"{name} must be {rng}, got {v!r}")
        if self.ema_decay >= 1.0:
            bad(f"ema_decay must be < 1, got {self.ema_decay!r}")
        if self.val_fraction >= 1.0:
            bad(f"val_fraction must be < 1, got {self.val_fraction!r}")
        if self.energy_weight + self.force_weight + self.virial_weight <= 0:
            bad("at least one of energy_weight, force_weight, virial_weight must be > 0")
        if self.dtype not in ("float32", "float64"):
            bad(f"dtype must be float32 or float64, got {self.dtype!r}")
        if not isinstance(self.model, dict):
            bad("model must be a table of SeZM options")
        if self.init is not None and self.model:
            bad("model options configure a model trained from scratch; drop them with --init")
        if self.init is not None and self.type_map is not None:
            bad("type_map is taken from the --init model (it also names numbered types); drop it")
        self._check_formats(bad)
        if self.type_map is not None and (not isinstance(self.type_map, list) or not self.type_map):
            bad("type_map must be a non-empty list of element symbols")
        if self.resume and self.overwrite:
            bad("--resume continues the checkpointed run; it cannot be combined with --overwrite")

    def _check_formats(self, bad) -> None:
        from mdband.errors import ModelFileError
        from mdband.io.frames import DatasetError
        from mdband.io.model_output import output_model_format
        from mdband.io.systems import format_name

        try:
            format_name(self.data_format)
        except DatasetError as exc:
            bad(f"data_format: {exc}")
        if self.output is not None:
            try:
                output_model_format(self.output, self.format)
            except ModelFileError as exc:
                bad(str(exc))
        elif self.format not in (None, "mdband", "deepmd"):
            bad(f"format must be mdband or deepmd, got {self.format!r}")


def read_toml(path) -> dict:
    """Read a TOML config file, raising :class:`FitConfigError` if missing or unparsable."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]  # the same API
    p = Path(path)
    if not p.is_file():
        raise FitConfigError(f"config file {p} does not exist")
    try:
        with open(p, "rb") as fh:
            return tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FitConfigError(f"cannot parse config file {p}: {exc}") from None


def normalise(data: dict, base_dir=None) -> dict:
    """Keys with ``_``; relative paths resolved against ``base_dir``; unknown keys refused."""
    known = {f.name for f in fields(FitConfig)}
    out = {}
    for key, value in data.items():
        k = str(key).replace("-", "_")
        if k not in known:
            raise FitConfigError(f"unknown fit setting {key!r}")
        if base_dir is not None and k in _PATH_KEYS and value is not None:
            if k == "data":
                vals = [value] if isinstance(value, str) else list(value)
                value = [_resolve(v, base_dir) for v in vals]
            else:
                value = _resolve(value, base_dir)
        if k == "model" and isinstance(value, dict):
            value = {str(mk).replace("-", "_"): mv for mk, mv in value.items()}
        out[k] = value
    return out


def _resolve(value, base_dir) -> str:
    p = Path(str(value))
    if str(value).startswith("builtin:") or p.is_absolute():
        return str(value)
    return str(Path(base_dir) / p)
