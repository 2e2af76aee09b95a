"""Reading a spin model's ``model.spin`` section (config.spin_from_deepmd, the importer) and
keeping it through mdband's own model file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import mdband
from mdband.config import SeZMConfig, SpinConfig
from mdband.errors import UnsupportedModelError
from mdband.io.deepmd_params import spin_from_deepmd

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd_spin"
TYPES = ["Fe", "Ni", "O"]


def params(spin, **extra):
    return {"type": "dpa4", "type_map": list(TYPES), "spin": spin,
            "descriptor": {"sel": [40, 20]}, **extra}  # fmt: skip


@pytest.mark.parametrize(
    "spin,want",
    [
        ({"scheme": "native", "use_spin": [True, False, False]},
         SpinConfig("native", (True, False, False))),
        ({"scheme": "NATIVE", "use_spin": [1], "allow_missing_label": True},
         SpinConfig("native", (False, True, False))),
        ({"use_spin": ["Fe", "Ni"], "virtual_scale": [0.3, 0.2]},  # deepspin is the default
         SpinConfig("deepspin", (True, True, False), (0.3, 0.2, 0.0), 60)),
        ({"scheme": "deepspin", "use_spin": [True, False, True], "virtual_scale": 0.5},
         SpinConfig("deepspin", (True, False, True), (0.5, 0.0, 0.5), 60)),
        ({"scheme": "deepspin", "use_spin": ["Ni"], "virtual_scale": [0.1, 0.2, 0.3],
          "spin_norm": [1.0], "virtual_len": [0.3]},  # TensorFlow-only keys: unread
         SpinConfig("deepspin", (False, True, False), (0.0, 0.2, 0.0), 60)),
    ],
)  # fmt: skip
def test_spin_section_forms(spin, want):
    assert spin_from_deepmd(params(spin)) == want


@pytest.mark.parametrize(
    "spin,extra,option",
    [
        ({"scheme": "virtual", "use_spin": [True, False, False]}, {}, "spin.scheme"),
        ({"scheme": "native", "use_spin": ["Co"]}, {}, "spin.use_spin"),
        ({"scheme": "native", "use_spin": [True, False]}, {}, "spin.use_spin"),
        ({"scheme": "native", "use_spin": [5]}, {}, "spin.use_spin"),
        ({"scheme": "deepspin", "use_spin": ["Fe"]}, {}, "spin.virtual_scale"),
        ({"scheme": "deepspin", "use_spin": ["Fe"], "virtual_scale": [0.1, 0.2]}, {},
         "spin.virtual_scale"),
        ({"scheme": "native", "use_spin": ["Fe"], "moment_scale": 2}, {}, "spin.moment_scale"),
        ({"scheme": "native", "use_spin": ["Fe"]}, {"bridging_method": "zbl"},
         "model.bridging_method"),
        ({"scheme": "deepspin", "use_spin": ["Fe"], "virtual_scale": 1}, {},
         "spin.virtual_scale"),  # deepmd-kit takes a float, not an int, for all types
        ({"scheme": "native", "use_spin": [True, 0, False]}, {}, "spin.use_spin"),
    ],
)  # fmt: skip
def test_spin_options_mdband_cannot_run_are_refused_by_name(spin, extra, option):
    with pytest.raises(UnsupportedModelError) as err:
        spin_from_deepmd(params(spin, **extra))
    assert err.value.option == option


def test_deepspin_doubles_the_network_types_not_the_type_map():
    cfg = SeZMConfig(type_map=tuple(TYPES), spin=SpinConfig("deepspin", (True, True, False),
                                                              (0.3, 0.2, 0.0), 60))  # fmt: skip
    assert cfg.ntypes == 6 and len(cfg.type_map) == 3
    back = SeZMConfig.from_dict(cfg.to_dict())
    assert back == cfg and back.spin.virtual_scale == (0.3, 0.2, 0.0)
    native = SeZMConfig(type_map=tuple(TYPES), spin=SpinConfig("native", (True, True, False)))
    assert native.ntypes == 3


def test_native_1_1_checkpoint_squares_spin_scale():
    from mdband.io.deepmd import import_deepmd_checkpoint

    sd = dict(torch.load(FIX / "spin_native.pt", weights_only=True)["model"])
    version = "model.Default.atomic_model.descriptor.version_tensor"
    sd[version] = torch.tensor(1.1, dtype=torch.float64)

    a = import_deepmd_checkpoint(torch.load(FIX / "spin_native.pt", weights_only=True), "a")
    b = import_deepmd_checkpoint({"model": sd}, "b")
    cfg12, sd12, cfg11, sd11 = a.config, a.state_dict, b.config, b.state_dict
    key = "descriptor.env_seed_embedding.spin_scale"
    assert cfg11["version"] == cfg12["version"] == 1.2
    torch.testing.assert_close(sd11[key], sd12[key] ** 2, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["spin_native", "spin_deepspin"])
def test_model_file_keeps_the_spin_model(name, tmp_path):
    """mdband's own model file (mdband convert) keeps the spin section: same numbers; the
    deepmd-kit exporter refuses spin models by name."""
    pot = mdband.load_model(FIX / f"{name}.pt", device="cpu", dtype="float64")
    pot.save(tmp_path / "m.mdband")
    back = mdband.load_model(tmp_path / "m.mdband", device="cpu", dtype="float64")
    assert back.spin == pot.spin and back.type_map == TYPES
    assert back.model_hash == pot.model_hash
    ref = np.load(FIX / f"{name}.npz")
    sym = [TYPES[t] for t in ref["atype_3"]]
    with pytest.raises(UnsupportedModelError, match="does not write spin models"):
        pot.save_deepmd(tmp_path / "d.pt")
    a = pot.evaluate(ref["coord_3"], None, False, sym, magmoms=ref["spin_3"])
    b = back.evaluate(ref["coord_3"], None, False, sym, magmoms=ref["spin_3"])
    assert a.energy == b.energy
    np.testing.assert_array_equal(a.magnetic_forces, b.magnetic_forces)
