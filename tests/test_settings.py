import pytest
import torch

from mdband.settings import EngineSettings, parse_memory_size


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
    for mode in ("fp16x3", "FP16"):
        monkeypatch.setenv("MDBAND_STACK_PRECISION", mode)
        assert EngineSettings.resolve().stack_precision == mode.lower()
    monkeypatch.setenv("MDBAND_STACK_PRECISION", "bf16")
    with pytest.raises(ValueError, match="MDBAND_STACK_PRECISION"):
        EngineSettings.resolve()


@pytest.mark.parametrize(
    "text,nbytes",
    [("8GB", 8 * 10**9), ("512MiB", 512 * 2**20), ("1.5 GiB", 3 * 2**29), ("2e9", 2 * 10**9),
     (4096, 4096), ("4096", 4096), ("100 kB", 10**5), ("3tb", 3 * 10**12), ("7B", 7)],
)  # fmt: skip
def test_memory_sizes(text, nbytes):
    assert parse_memory_size(text) == nbytes
    assert EngineSettings(memory_budget=text).memory_budget_bytes == nbytes


@pytest.mark.parametrize("text", ["8 GBs", "-1GB", "lots", "0", "0.5B", "8G B", ""])
def test_bad_memory_sizes(text):
    with pytest.raises(ValueError):
        parse_memory_size(text)
    with pytest.raises(ValueError, match="memory_budget"):
        EngineSettings(memory_budget=text)


def test_memory_budget_resolution(monkeypatch):
    monkeypatch.delenv("MDBAND_MEMORY_BUDGET", raising=False)
    s = EngineSettings.resolve()
    assert s.memory_budget == "auto" and s.memory_budget_bytes is None
    assert EngineSettings.resolve(memory_budget="OFF").memory_budget == "off"
    monkeypatch.setenv("MDBAND_MEMORY_BUDGET", " 16GiB ")
    assert EngineSettings.resolve().memory_budget_bytes == 16 * 2**30
    assert EngineSettings.resolve(memory_budget=1000).memory_budget == "1000"
    monkeypatch.setenv("MDBAND_MEMORY_BUDGET", "sixteen")
    with pytest.raises(ValueError, match="^MDBAND_MEMORY_BUDGET: 'sixteen' is not a memory size"):
        EngineSettings.resolve()


def test_memory_budget_description(monkeypatch):
    from mdband.model.chunking import describe_budget, resolve_budget

    assert resolve_budget("auto", "cpu") is None and resolve_budget("off", "cpu") is None
    assert resolve_budget("2gb", "cpu") == 2 * 10**9
    assert describe_budget("auto", "cpu").startswith("auto: no limit on CPU")
    assert describe_budget("off", "cpu").startswith("off")
    assert describe_budget("512mib", "cpu") == "537 MB (512mib)"
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev: (10 * 10**9, 80 * 10**9))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda dev: 3 * 10**9)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev: 1 * 10**9)
    assert resolve_budget("auto", "cuda:0") == int(0.9 * 12 * 10**9)
    assert describe_budget("auto", "cuda:0") == "auto: 10.8 GB (90% of the free memory of cuda:0)"
