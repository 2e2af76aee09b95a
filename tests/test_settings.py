import pytest

from mdband.settings import EngineSettings


def test_resolution_order(monkeypatch):
    monkeypatch.delenv("MDBAND_ROTATION_LAYOUT", raising=False)
    assert EngineSettings.resolve().rotation_layout == "auto"
    monkeypatch.setenv("MDBAND_ROTATION_LAYOUT", "dense")
    monkeypatch.setenv("MDBAND_RECOMPUTE", "1")
    s = EngineSettings.resolve()
    assert s.rotation_layout == "dense" and s.recompute == "all"
    monkeypatch.setenv("MDBAND_RECOMPUTE", "stack")
    assert EngineSettings.resolve().recompute == "stack"
    assert EngineSettings.resolve(recompute=False).recompute == "off"
    assert EngineSettings.resolve(rotation_layout="band").rotation_layout == "band"
    monkeypatch.setenv("MDBAND_KERNELS", "cuda-magic")
    with pytest.raises(ValueError, match="MDBAND_KERNELS"):
        EngineSettings.resolve()
    with pytest.raises(ValueError, match="rotation_layout"):
        EngineSettings(rotation_layout="diagonal")


def test_stack_precision(monkeypatch):
    monkeypatch.delenv("MDBAND_STACK_PRECISION", raising=False)
    assert EngineSettings.resolve().stack_precision == "tf32x3"
    monkeypatch.setenv("MDBAND_STACK_PRECISION", "IEEE")
    assert EngineSettings.resolve().stack_precision == "ieee"
    assert EngineSettings.resolve(stack_precision="tf32x3").stack_precision == "tf32x3"
    monkeypatch.setenv("MDBAND_STACK_PRECISION", "fp16")
    with pytest.raises(ValueError, match="MDBAND_STACK_PRECISION"):
        EngineSettings.resolve()
