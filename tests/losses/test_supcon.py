"""MACLR Eq. 1 (ICT contrastive) and Eq. 2 (cluster SupCon) against hand-computed values and gradcheck."""

from __future__ import annotations

import math

import pytest
import torch

from xmcbench.losses.common import LossInputError
from xmcbench.losses.supcon import cluster_targets, ict_contrastive_loss, supcon_loss, supcon_loss_from_targets


def test_eq1_golden_2x2():
    # s = [[2, 0], [1, 3]]: row 0 -log(e^2/(e^2+1)), row 1 -log(e^3/(e^1+e^3))
    s = torch.tensor([[2.0, 0.0], [1.0, 3.0]], dtype=torch.float64)
    row0 = -math.log(math.exp(2) / (math.exp(2) + 1))
    row1 = -math.log(math.exp(3) / (math.exp(1) + math.exp(3)))
    assert ict_contrastive_loss(s, reduction="sum").item() == pytest.approx(row0 + row1, abs=1e-12)
    assert ict_contrastive_loss(s).item() == pytest.approx((row0 + row1) / 2, abs=1e-12)


def test_eq2_golden_3x3_one_cluster_pair():
    # clusters [0, 0, 1]: rows 0 and 1 have P = {0, 1}; row 2 has P = {2}
    s = torch.tensor([[1.0, 2.0, 0.0], [0.5, 0.0, 1.0], [2.0, 1.0, 3.0]], dtype=torch.float64)

    def lse(r):
        return math.log(sum(math.exp(v) for v in r))

    rows = s.tolist()
    r0 = -((rows[0][0] - lse(rows[0])) + (rows[0][1] - lse(rows[0]))) / 2
    r1 = -((rows[1][0] - lse(rows[1])) + (rows[1][1] - lse(rows[1]))) / 2
    r2 = -(rows[2][2] - lse(rows[2]))
    got = supcon_loss(s, torch.tensor([0, 0, 1]), reduction="sum").item()
    assert got == pytest.approx(r0 + r1 + r2, abs=1e-12)


def test_eq2_with_singleton_clusters_is_eq1():
    s = torch.randn(6, 6, dtype=torch.float64)
    assert torch.allclose(supcon_loss(s, torch.arange(6)), ict_contrastive_loss(s))


def test_targets_form_matches_cluster_form():
    s = torch.randn(5, 5, dtype=torch.float64)
    c = torch.tensor([2, 0, 2, 1, 0])
    assert torch.allclose(supcon_loss(s, c), supcon_loss_from_targets(s, cluster_targets(c)))


def test_gradcheck_float64():
    s = torch.randn(5, 5, dtype=torch.float64, requires_grad=True)
    c = torch.tensor([0, 1, 0, 2, 1])
    assert torch.autograd.gradcheck(lambda x: supcon_loss(x, c), (s,))
    assert torch.autograd.gradcheck(lambda x: ict_contrastive_loss(x, reduction="sum"), (s,))


def test_bad_inputs():
    with pytest.raises(LossInputError, match="square"):
        supcon_loss(torch.randn(3, 4), torch.arange(3))
    with pytest.raises(LossInputError, match="cluster ids"):
        supcon_loss(torch.randn(3, 3), torch.arange(4))
    with pytest.raises(LossInputError, match="reduction"):
        supcon_loss(torch.randn(3, 3), torch.arange(3), reduction="max")
