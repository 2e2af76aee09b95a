"""Fine-tuning the shared deepmd-kit DPA4 water checkpoint on the shared deepmd water data."""

import numpy as np
import pytest
from conftest import WATER_CKPT, WATER_DATA

import mdband
from mdband.fit.data import read_frames

pytestmark = pytest.mark.skipif(
    not (WATER_CKPT.exists() and WATER_DATA.exists()),
    reason="../shared (water checkpoint and deepmd-water data) absent",
)


def _subset(src, dst, frames):
    """A deepmd npy system with the given frames of ``src``."""
    (dst / "set.000").mkdir(parents=True)
    for name in ("type.raw", "type_map.raw"):
        (dst / name).write_bytes((src / name).read_bytes())
    for key in ("coord", "box", "energy", "force"):
        np.save(dst / "set.000" / f"{key}.npy", np.load(src / "set.000" / f"{key}.npy")[frames])


def _force_rmse(pot, frame) -> float:
    r = pot.evaluate(frame.positions, frame.cell, frame.pbc, frame.species)
    return 1e3 * float(np.sqrt(np.mean((r.forces - frame.forces) ** 2)))


def test_finetune_improves_held_out_forces(tmp_path):
    _subset(WATER_DATA / "data_0", tmp_path / "train", [0, 1, 2])
    held_out = read_frames(WATER_DATA / "data_3")[0]  # another system, never trained on
    before = _force_rmse(mdband.load_model(WATER_CKPT, dtype="float64"), held_out)
    out = tmp_path / "water-ft.mdband"
    res = mdband.fit(
        tmp_path / "train",
        out,
        init=WATER_CKPT,
        epochs=8,
        batch_size=1,
        lr=1e-2,
        warmup=0.0,
        ema_decay=0.0,
        val_fraction=0.0,
        dtype="float32",
        energy_weight=1.0,  # the smoke checkpoint's forces are far off; weight them
    )
    assert res.n_train == 3 and res.metrics is None
    pot = mdband.load_model(out, dtype="float64")
    assert pot.type_map == ["O", "H"]
    assert pot.metadata["fit"]["init"] == str(WATER_CKPT)
    after = _force_rmse(pot, held_out)
    assert after < 0.9 * before, (before, after)
    assert res.history[-1]["train_loss"] < 0.8 * res.history[1]["train_loss"]
