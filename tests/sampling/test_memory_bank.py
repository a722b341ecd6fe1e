"""The memory bank of detached query embeddings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xmcbench.errors import XmcbenchError
from xmcbench.sampling.memory_bank import MemoryBank


def test_update_stores_detached_rows_and_state_round_trips(tmp_path):
    bank = MemoryBank(6, 3)
    emb = torch.arange(6.0, requires_grad=True).reshape(2, 3) * 2
    bank.update(torch.tensor([4, 1]), emb)
    np.testing.assert_array_equal(bank.embeddings[[4, 1]], emb.detach().numpy())
    assert bank.coverage == pytest.approx(2 / 6)
    other = MemoryBank(6, 3)
    torch.save(bank.state_dict(), tmp_path / "bank.pt")
    other.load_state_dict(torch.load(tmp_path / "bank.pt", weights_only=True))
    np.testing.assert_array_equal(other.embeddings, bank.embeddings)
    with pytest.raises(XmcbenchError, match="shape"):
        MemoryBank(5, 3).load_state_dict(bank.state_dict())


def test_initial_embeddings_are_copied():
    init = np.ones((3, 2), dtype=np.float32)
    bank = MemoryBank(3, 2, initial=init)
    bank.update(np.array([0]), np.zeros((1, 2), dtype=np.float32))
    assert init[0, 0] == 1.0 and bank.embeddings[0, 0] == 0.0 and bank.coverage == pytest.approx(1 / 3)
