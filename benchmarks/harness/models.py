"""The models the benchmarks run: deepmd-kit's DPA4 sections, mdband configs, random weights.

Two configs are compared everywhere, both with type map ``["C"]`` (diamond):

* ``default``: deepmd-kit's DPA4 with every descriptor option at its default (channels 64,
  lmax 3, 3 blocks, 4 mixing layers, rcut 6 Å);
* ``mini``: DPA4-Mini, the model section of deepmd-kit's water example
  (``../shared/data/dpa4-water-smoke/input-mini.json``; :data:`DEEPMD_MINI` must equal it);

and ``tiny`` (8 channels, lmax 1, rcut 3 Å) makes a CPU smoke run of a GPU script. Random
weights come from :func:`random_weights` (mdband's initialisation: seed, gain) or, for
checkpoints both engines load, from :func:`write_deepmd_checkpoints` (deepmd-kit's own, run in
an interpreter with deepmd-kit). mdband and deepmd-kit are imported where they are used.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

#: where the shared data lives beside the repository (absent on the device machine)
SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
#: deepmd-kit's water example: DPA4-Mini's input file
MINI_JSON = SHARED_DATA / "dpa4-water-smoke" / "input-mini.json"
#: the trained smoke checkpoint of that example (O, H)
WATER_MODEL = SHARED_DATA / "dpa4-water-smoke" / "pretrained.pt"
#: deepmd-kit's water data (npy systems data_0 …)
WATER_DATA = SHARED_DATA / "deepmd-water"

#: deepmd-kit's default DPA4 model section, type map ["C"]
DEEPMD_DEFAULT = {"type": "dpa4", "type_map": ["C"], "descriptor": {"rcut": 6.0}, "fitting_net": {}}
#: DPA4-Mini: the model section of deepmd-kit's water example (:data:`MINI_JSON`, which does
#: not travel to the device), type map ["C"]
DEEPMD_MINI = {
    "type": "dpa4",
    "type_map": ["C"],
    "descriptor": {
        "rcut": 6.0, "channels": 32, "n_radial": 16, "edge_norm": False, "use_env_seed": True,
        "lmax": 2, "mmax": 1, "n_blocks": 2, "mixing_layers": 3,
        "radial_so2_mode": "degree_channel", "radial_so2_rank": 1, "n_focus": 1, "focus_dim": 0,
        "n_atten_head": 1, "message_node_so3": True, "ffn_neurons": 0, "ffn_so3_grid": True,
        "grid_mlp": False, "grid_branch": [0, 0, 1], "ffn_blocks": 1, "so3_readout": "mlp",
        "use_amp": True, "precision": "float32", "seed": 42,
    },
    "fitting_net": {"neuron": [0], "precision": "float32", "seed": 42},
    "use_compile": False,
    "enable_tf32": True,
}  # fmt: skip
#: DPA4-Neo and DPA4-Plus (the grades of the OMat24 releases) as changes to DPA4-Mini's
#: descriptor, with all 118 element types. No config of them is published: these are inferred
#: from the model card's parameter counts (deepmd-kit 3.2.0 counts Mini 654,988 against the card's
#: 655,504; Neo 1,124,686 against 1,125,372; Plus 8,848,518 against 8.85 M).
PRESETS = {
    "neo": {"lmax": 3, "n_focus": 2},
    "plus": {"channels": 64, "lmax": 4, "n_blocks": 4, "mixing_layers": 4, "radial_so2_rank": 2},
}
#: the configs the comparisons run (``tiny`` is a smoke-test model, not a comparison)
CONFIGS = ("default", "mini")
#: every deepmd-kit section :func:`deepmd_sections` knows
SECTIONS = (*CONFIGS, *PRESETS)
#: the descriptor version deepmd-kit 3.2.0 writes into a checkpoint
DEEPMD_VERSION = 1.2


def deepmd_sections(names=CONFIGS, mini_json: Path | None = MINI_JSON) -> dict[str, dict]:
    """deepmd-kit model sections of ``names`` (copies); when ``mini_json`` exists, DPA4-Mini's
    section must equal its model section (type map aside), or SystemExit."""
    from ase.data import chemical_symbols

    sections = {"default": DEEPMD_DEFAULT, "mini": DEEPMD_MINI}
    for name, changes in PRESETS.items():
        preset = copy.deepcopy(DEEPMD_MINI)
        preset["type_map"] = list(chemical_symbols[1:119])
        preset["descriptor"].update(changes)
        sections[name] = preset
    unknown = set(names) - set(sections)
    if unknown:
        raise ValueError(f"deepmd-kit sections: unknown {sorted(unknown)}; known {SECTIONS}")
    if "mini" in names and mini_json is not None and Path(mini_json).is_file():
        shipped = json.loads(Path(mini_json).read_text())["model"]
        shipped["type_map"] = ["C"]
        shipped.pop("_comment", None)
        if shipped != DEEPMD_MINI:
            raise SystemExit(f"DEEPMD_MINI differs from {mini_json}: update it")
    return {name: copy.deepcopy(sections[name]) for name in names}


def config(name: str) -> dict:
    """mdband's config (``SeZMConfig.to_dict()``) of ``default``, ``mini`` or ``tiny``."""
    from mdband.config import SeZMConfig

    if name == "default":
        return SeZMConfig(type_map=("C",)).to_dict()
    if name == "mini":
        from mdband.io.deepmd_params import config_from_deepmd

        return config_from_deepmd(copy.deepcopy(DEEPMD_MINI), DEEPMD_VERSION).to_dict()
    if name == "tiny":
        return SeZMConfig(
            type_map=("C",), channels=8, n_radial=4, l_schedule=(1,), mixing_layers=1, rcut=3.0
        ).to_dict()
    raise ValueError(f"model config {name!r}: expected default, mini or tiny")


def random_weights(cfg: dict, seed: int = 0, gain: float = 0.5) -> dict:
    """Float64 weights of ``cfg``'s network by mdband's initialisation (``seed``, ``gain``)."""
    from mdband.model.factory import build_sezm, initialise_weights

    model = build_sezm(cfg)
    initialise_weights(model, seed, gain)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def potential(
    cfg: dict,
    weights: dict | None = None,
    *,
    seed: int = 0,
    gain: float = 0.5,
    device="cpu",
    dtype="float32",
    **settings,
):
    """A ``Potential`` of ``cfg`` with ``weights`` (None: :func:`random_weights` of ``seed``
    and ``gain``); ``settings`` are engine settings (``rotation_layout``, ``cuda_graphs`` …)."""
    from mdband.model.factory import build_sezm
    from mdband.testing.sezm import sezm_potential

    weights = random_weights(cfg, seed, gain) if weights is None else weights
    return sezm_potential(cfg, build_sezm(cfg, weights, settings), device, dtype)


def write_deepmd_checkpoints(out: Path, names=CONFIGS, mini_json: Path | None = MINI_JSON):
    """Random-init deepmd-kit training checkpoints ``out/NAME.pt`` of ``names``, written by
    deepmd-kit itself (run this in an interpreter with deepmd-kit): its initialisation, then
    every all-zero parameter filled with N(0, 0.05²) so that forces do not vanish. The paths."""
    import torch
    from deepmd.pt.model.model import get_model
    from deepmd.pt.train.wrapper import ModelWrapper
    from deepmd.utils.argcheck import model_args

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, section in deepmd_sections(names, mini_json).items():
        margs = model_args()
        params = margs.normalize_value(copy.deepcopy(section), trim_pattern="_*")
        margs.check_value(params, strict=True)
        torch.manual_seed(1)
        model = get_model(copy.deepcopy(params))
        gen = torch.Generator().manual_seed(2)
        with torch.no_grad():
            for _, p in model.named_parameters():
                if p.is_floating_point() and p.numel() and float(p.abs().max()) == 0.0:
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.05)
        wrapper = ModelWrapper(model, model_params=params)
        path = out / f"{name}.pt"
        torch.save({"model": wrapper.state_dict()}, path)
        paths.append(path)
    return paths
