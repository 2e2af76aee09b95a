"""``mdband fit`` does not train charge/spin models (each frame would need its charge and
spin): fine-tuning one is refused by name, before any training."""

from pathlib import Path

import pytest

from mdband.fit.config import FitConfig, FitConfigError
from mdband.fit.start import start_model

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"


def test_finetuning_a_charge_spin_model_is_refused():
    cfg = FitConfig(data=["unused.extxyz"], init=str(FIX / "chgspin.pt"))
    with pytest.raises(FitConfigError, match="add_chg_spin_ebd"):
        start_model(cfg, None, [])
