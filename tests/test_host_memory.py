"""The host_memory setting: a CPU model keeps freed host memory in the process (glibc).

Each case runs in a fresh interpreter: the setting is process-wide and one-way."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from mdband.settings import EngineSettings

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
needs_glibc = pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's (this C library is not)")

# Load a model (or not), then allocate, touch and free a 64 MB block eight times: the page
# faults of the last four rounds say whether freed blocks come back from the heap or from fresh
# mmaps (the heap's first rounds may still grow it while small allocations split a free block).
PROBE = r"""
import json, resource, sys
import torch
import mdband
from mdband import host_memory
if sys.argv[1] == "cpu":
    pot = mdband.load_model("builtin:emt-cuni", device="cpu")
    line = pot.host_memory
else:
    line = ""
def touch_and_free():
    t = torch.ones(16 * 2**20)  # 64 MB, every page written
    del t
for _ in range(4):
    touch_and_free()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    touch_and_free()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"kept": host_memory.is_kept(), "line": line, "faults": faults}))
"""


def probe(load: str, setting: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MDBAND_HOST_MEMORY"}
    if setting is not None:
        env["MDBAND_HOST_MEMORY"] = setting
    out = subprocess.run([sys.executable, "-c", PROBE, load], env=env, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


@needs_glibc
def test_a_cpu_model_keeps_freed_memory_by_default():
    # 64 MB is 16,384 pages of 4 kB: a fresh mmap faults them all in again, four times
    plain = probe("none", None)
    assert not plain["kept"] and plain["faults"] > 4 * 8000
    kept = probe("cpu", None)
    assert kept["kept"] and kept["faults"] < 2000, kept
    assert kept["line"].startswith("auto: freed memory kept in the process")


@needs_glibc
@pytest.mark.parametrize("setting", ["system", "0"])
def test_system_leaves_the_allocator_alone(setting):
    got = probe("cpu", setting)
    assert not got["kept"] and got["faults"] > 4 * 8000
    assert got["line"] == "system: the C library's own (as asked)"


@needs_glibc
def test_auto_leaves_cuda_models_alone_and_keep_applies_to_them():
    code = (
        "from mdband import host_memory as h; print(h.apply('auto', 'cuda')); "
        "print(h.is_kept()); print(h.apply('keep', 'cuda:0')); print(h.is_kept()); "
        "print(h.apply('auto', 'cuda'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()  # fmt: skip
    kept = "freed memory kept in the process for the next call (glibc: no mmap per block, no trim)"
    assert out == [
        "auto: the C library's own (a CUDA model)",
        "False",
        f"keep: {kept}",
        "True",
        f"auto: {kept}, set earlier",
    ]


def test_the_setting_is_validated_and_takes_booleans(monkeypatch):
    monkeypatch.delenv("MDBAND_HOST_MEMORY", raising=False)
    assert EngineSettings.resolve().host_memory == "auto"
    assert EngineSettings.resolve(host_memory=False).host_memory == "system"
    monkeypatch.setenv("MDBAND_HOST_MEMORY", "on")
    assert EngineSettings.resolve().host_memory == "keep"
    monkeypatch.setenv("MDBAND_HOST_MEMORY", "lots")
    with pytest.raises(ValueError, match="MDBAND_HOST_MEMORY='lots' is not one of auto, keep"):
        EngineSettings.resolve()
    with pytest.raises(ValueError, match="host_memory='x' is not one of"):
        EngineSettings(host_memory="x")


def test_run_flag_reaches_the_model(monkeypatch):
    from mdband.md.config import RunConfig
    from mdband.md.setup import model_options

    monkeypatch.delenv("MDBAND_HOST_MEMORY", raising=False)
    cfg = RunConfig(structure="s.xyz", model="m.mdband", device="cpu", host_memory="system")
    assert model_options(cfg)["host_memory"] == "system"
    assert "host_memory" not in model_options(RunConfig(structure="s.xyz", model="m.mdband"))
