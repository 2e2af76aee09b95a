"""The model ``mdband fit`` starts from, and its energy shift.

The model is a resumed checkpoint's, a fine-tuned model's or a new random SeZM model, with its
per-element energy shift (eV) fitted to the training energies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mdband.errors import ModelFileError
from mdband.fit.config import FitConfig, FitConfigError
from mdband.fit.data import elements_of, fit_energy_shift

#: engine settings of the model being trained: the torch path everywhere, whose backward is
#: differentiable again (the force loss needs ∂²E/∂r∂w); the fused ops' closed-form backward ops
#: are not, and the fused SO(2) layers give no weight gradients; compiled graphs are not either
TRAIN_OPTIONS = {"kernels": "torch", "recompute": "off", "compile": "off"}


@dataclass
class StartModel:
    """The model to train (float64, weights not yet shifted) and where it came from."""

    kind: str
    type_map: list[str]
    config: dict  # the model's configuration (SeZMConfig as a dict)
    model: torch.nn.Module
    init_meta: dict  # metadata of a fine-tuned model (its path and hash); {} otherwise


def start_model(cfg: FitConfig, ck: dict | None, frames) -> StartModel:
    """Return the resumed (``ck``), fine-tuned (``cfg.init``) or new model.

    A new model takes its type map from ``frames`` unless ``cfg.type_map`` is given.
    """
    from mdband.model.factory import build_sezm, initialise_weights  # not at `import mdband`

    if ck is not None:
        kind, type_map, model_cfg = ck["kind"], list(ck["type_map"]), dict(ck["model_config"])
        if kind != "sezm":
            raise FitConfigError(f"cannot resume a model of kind {kind!r}")
        model = build_sezm(model_cfg, None, TRAIN_OPTIONS)
        return StartModel(kind, type_map, model_cfg, model, dict(ck.get("init_meta", {})))
    if cfg.init is not None:
        from mdband.loader import load_model

        pot0 = load_model(cfg.init, device="cpu", dtype="float64", head=cfg.head)
        if pot0.kind != "sezm":
            raise ModelFileError(f"{cfg.init}: only SeZM models can be fine-tuned")
        if pot0.direct_forces:
            raise ModelFileError(
                f"{cfg.init} is a dens model (direct forces, deepmd-kit's denoising heads); "
                "mdband fit fine-tunes energy models, whose forces are the energy's gradient"
            )
        if pot0.spin is not None:
            raise ModelFileError(
                f"{cfg.init}: a {pot0.spin.scheme} spin model; mdband fit does not train spin "
                "models (no magnetic moments or magnetic-force labels)"
            )
        if pot0.charge_spin is not None:  # each frame's charge and spin would be needed
            raise FitConfigError(
                f"{cfg.init} takes a total charge and spin multiplicity (add_chg_spin_ebd); "
                "mdband fit does not train charge/spin models"
            )
        model = build_sezm(pot0.config, pot0.model.state_dict(), TRAIN_OPTIONS)
        init_meta = {"init": str(cfg.init), "init_model_hash": pot0.model_hash}
        return StartModel(pot0.kind, pot0.type_map, pot0.config, model, init_meta)
    type_map = list(cfg.type_map) if cfg.type_map is not None else elements_of(frames)
    model_cfg = cfg.model_config(type_map)
    model = build_sezm(model_cfg, None, TRAIN_OPTIONS)
    seed = cfg.seed if cfg.init_seed is None else cfg.init_seed
    initialise_weights(model, seed, cfg.init_gain)
    zero_output_layer(model)
    return StartModel("sezm", type_map, model_cfg, model, {})


def energy_shift(model, cfg: FitConfig, ck: dict | None, train, n_types: int, dtype, device):
    """Return the per-type energy shift (eV) applied to ``model``.

    The shift is the checkpoint's (whose weights are loaded here), a least-squares fit of the
    training energies left over by the model (new models, or ``refit_shift``), or zero
    (fine-tuning).
    """
    shift = np.zeros(n_types)
    if ck is not None:
        model.load_state_dict(ck["model_state"], strict=True)  # copy_ keeps buffer dtypes
        shift = np.asarray(ck["energy_shift"], dtype=np.float64)
    elif cfg.init is None or cfg.refit_shift:
        if cfg.init is None:
            with torch.no_grad():
                model.out_bias.zero_()
                model.fitting_net.bias_atom_e.zero_()
        counts = np.stack([g.counts for g in train])
        e_ref = np.array([g.energy for g in train])
        e_now = _atom_energy_sums(model, train, dtype, device)
        shift = fit_energy_shift(counts, e_ref - e_now)
        _set_shift(model, shift)
    return shift


def _atom_energy_sums(model, frames, dtype, device) -> np.ndarray:
    out = []
    with torch.no_grad():
        for f in frames:
            e = model(
                f.types.to(device), f.src.to(device), f.dst.to(device), f.edge_vec.to(device, dtype)
            )
            out.append(float(e.to(torch.float64).sum()))
    return np.array(out)


def zero_output_layer(model) -> None:
    """Start a new model at "energy = per-element shift, forces = 0"."""
    out = getattr(getattr(model, "fitting_net", None), "filter_layers", None)
    if out is not None:
        with torch.no_grad():
            out.networks[0].output_layer.matrix.zero_()


def _set_shift(model, shift: np.ndarray) -> None:
    """Add ``shift`` (per type, eV) to the model's ``out_bias``."""
    if not hasattr(model, "out_bias"):
        raise FitConfigError("this model kind has no per-element energy shift (out_bias)")
    with torch.no_grad():
        model.out_bias[0, :, 0] += torch.as_tensor(shift, dtype=model.out_bias.dtype)
