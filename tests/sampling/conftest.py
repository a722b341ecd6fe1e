"""Sampling tests run torch on one thread: their tensors are tiny, and on a busy machine the
thread pool's synchronisation costs more than the work (results do not depend on it)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
