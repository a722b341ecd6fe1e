"""MACLR Eq. 3 (label regularisation) against a hand-computed value and gradcheck."""

from __future__ import annotations

import math

import pytest
import torch

from xmcbench.losses.common import LossInputError
from xmcbench.losses.label_regularisation import label_regularisation_loss


def test_eq3_golden():
    h = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    h_plus = torch.tensor([[1.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    negs = torch.tensor([[0.5, 0.0], [0.0, -1.0], [1.0, 1.0]], dtype=torch.float64)
    # row 0: pos h·h+ = 1; negatives 0.5, 0, 1 -> -log(e^1 / (e^.5 + e^0 + e^1 + e^1))
    r0 = -math.log(math.e / (math.exp(0.5) + 1 + math.e + math.e))
    # row 1: pos = 2; negatives 0, -2, 2
    r1 = -math.log(math.exp(2) / (1 + math.exp(-2) + math.exp(2) + math.exp(2)))
    assert label_regularisation_loss(h, h_plus, negs, reduction="sum").item() == pytest.approx(r0 + r1, abs=1e-12)
    assert label_regularisation_loss(h, h_plus, negs).item() == pytest.approx((r0 + r1) / 2, abs=1e-12)
    # temperature divides every score
    half = label_regularisation_loss(h * 2, h_plus, negs, temperature=2.0)
    assert half.item() == pytest.approx((r0 + r1) / 2, abs=1e-12)


def test_gradcheck_float64():
    h = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    hp = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    ng = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: label_regularisation_loss(a, b, c, temperature=0.5), (h, hp, ng))


def test_bad_shapes():
    with pytest.raises(LossInputError):
        label_regularisation_loss(torch.randn(3, 4), torch.randn(2, 4), torch.randn(5, 4))
    with pytest.raises(LossInputError):
        label_regularisation_loss(torch.randn(3, 4), torch.randn(3, 4), torch.randn(5, 3))
