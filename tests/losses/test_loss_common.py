"""Shared loss plumbing (xmcbench/losses/common.py): the masked row mean and the input checks."""

from __future__ import annotations

import pytest
import torch

from xmcbench.errors import XmcbenchError
from xmcbench.losses.common import LossInputError, check_scores_targets, mean_over_rows, upcast


def test_mean_over_rows_skips_rows_without_terms():
    row_sum = torch.tensor([3.0, 5.0, 7.0])
    count = torch.tensor([3, 0, 2])
    assert mean_over_rows(row_sum, count).item() == pytest.approx((1.0 + 3.5) / 2)


def test_mean_over_rows_of_nothing_is_a_differentiable_zero():
    row_sum = torch.tensor([1.0, 2.0], requires_grad=True)
    out = mean_over_rows(row_sum, torch.tensor([0, 0]))
    out.backward()
    assert out.item() == 0.0 and torch.all(row_sum.grad == 0)
    assert mean_over_rows(torch.zeros(0), torch.zeros(0, dtype=torch.long)).item() == 0.0


def test_loss_input_error_is_both_kinds():
    assert issubclass(LossInputError, XmcbenchError) and issubclass(LossInputError, ValueError)


def test_checks_name_the_loss_and_the_fix():
    with pytest.raises(LossInputError, match=r"my_loss: targets must be a boolean tensor .*targets.bool\(\)"):
        check_scores_targets(torch.zeros(2, 2), torch.zeros(2, 2), "my_loss")
    with pytest.raises(LossInputError, match=r"my_loss: scores must be a 2-D"):
        check_scores_targets(torch.zeros(2, 2, 2), torch.zeros(2, 2, 2, dtype=torch.bool), "my_loss")


def test_upcast_only_touches_half_precision():
    assert upcast(torch.zeros(1, dtype=torch.bfloat16)).dtype == torch.float32
    assert upcast(torch.zeros(1, dtype=torch.float16)).dtype == torch.float32
    assert upcast(torch.zeros(1, dtype=torch.float64)).dtype == torch.float64
