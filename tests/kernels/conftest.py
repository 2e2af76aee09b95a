"""Kernel-test fixtures: the device of the Triton path (CUDA, or the CPU interpreter)."""

from __future__ import annotations

import pytest
import torch

from mdband.kernels import _common as cm


@pytest.fixture
def kdev() -> torch.device:
    """Device for the Triton path: CUDA if present, else the CPU under TRITON_INTERPRET=1."""
    if not cm.TRITON_AVAILABLE:
        pytest.skip("triton is not installed")
    if torch.cuda.is_available() and not cm.interpret_mode():
        return torch.device("cuda")
    if cm.interpret_mode():
        return torch.device("cpu")
    pytest.skip("no CUDA device and TRITON_INTERPRET is not 1")
