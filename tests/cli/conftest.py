"""Fixtures of the command-line tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: the runs are tiny, and several test processes share the cores."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
