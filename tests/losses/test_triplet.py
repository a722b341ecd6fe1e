"""Fixed-margin triplet loss (NGAME, LMTX Eq. 1): explicit triplets and the pool form, against loops."""

from __future__ import annotations

import pytest
import torch

from xmcbench.errors import XmcbenchError
from xmcbench.losses import gather_positives, triplet_margin_loss, triplet_pool_loss


def reference_pool(scores: torch.Tensor, targets: torch.Tensor, margin: float) -> float:
    """Per row: mean over (p, n) pairs of max(0, s_n - s_p + margin); then mean over rows with pairs."""
    rows = []
    for i in range(scores.shape[0]):
        pos = [float(scores[i, j]) for j in range(scores.shape[1]) if targets[i, j]]
        neg = [float(scores[i, j]) for j in range(scores.shape[1]) if not targets[i, j]]
        pairs = [max(0.0, n - p + margin) for p in pos for n in neg]
        if pairs:
            rows.append(sum(pairs) / len(pairs))
    return sum(rows) / len(rows) if rows else 0.0


def random_batch(seed: int, b: int = 6, p: int = 10):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(b, p, generator=g, dtype=torch.float64) * 2 - 1  # cosine-like
    targets = torch.rand(b, p, generator=g) < 0.3
    targets[0] = False
    targets[1] = True
    targets[2, :3] = True
    return scores, targets


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("margin", [0.0, 0.3, 1.0])
def test_pool_matches_loop_reference(seed, margin):
    scores, targets = random_batch(seed)
    got = triplet_pool_loss(scores, targets, margin=margin).item()
    assert got == pytest.approx(reference_pool(scores, targets, margin), rel=1e-12, abs=1e-15)


def test_explicit_triplets_and_broadcasting():
    s_pos = torch.tensor([0.9, 0.5, 0.1], dtype=torch.float64)
    s_neg = torch.tensor([0.2, 0.4, 0.3], dtype=torch.float64)
    expected = (max(0, 0.2 - 0.9 + 0.3) + max(0, 0.4 - 0.5 + 0.3) + max(0, 0.3 - 0.1 + 0.3)) / 3
    assert triplet_margin_loss(s_pos, s_neg, 0.3).item() == pytest.approx(expected)
    # (B, 1) positive against (B, N) negatives: the mean over all B * N triplets.
    s_pos2 = torch.tensor([[0.8], [0.1]], dtype=torch.float64)
    s_neg2 = torch.tensor([[0.7, 0.0], [0.5, 0.2]], dtype=torch.float64)
    pairs = [max(0, n - p + 0.3) for p, row in zip([0.8, 0.1], [[0.7, 0.0], [0.5, 0.2]]) for n in row]
    assert triplet_margin_loss(s_pos2, s_neg2, 0.3).item() == pytest.approx(sum(pairs) / 4)


def test_gradient_is_minus_one_plus_one_on_violators_and_zero_otherwise():
    s_pos = torch.tensor([0.9, 0.5], dtype=torch.float64, requires_grad=True)
    s_neg = torch.tensor([0.2, 0.4], dtype=torch.float64, requires_grad=True)  # satisfied, violating
    triplet_margin_loss(s_pos, s_neg, 0.3).backward()
    assert s_pos.grad.tolist() == [0.0, -0.5]
    assert s_neg.grad.tolist() == [0.0, 0.5]


def test_pool_gradcheck_away_from_kinks():
    _, targets = random_batch(5, b=4, p=6)
    # Scores on a 0.1 grid with margin 0.25: every s_n - s_p + m is >= 0.05 from the kink, so the
    # finite differences stay on one linear piece of the hinge.
    g = torch.Generator().manual_seed(5)
    scores = (torch.randint(-10, 11, (4, 6), generator=g) * 0.1).double().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda s: triplet_pool_loss(s, targets, 0.25), (scores,))


def test_edge_cases():
    s = torch.rand(3, 4, dtype=torch.float64, requires_grad=True)
    for targets in (torch.zeros(3, 4, dtype=torch.bool), torch.ones(3, 4, dtype=torch.bool)):
        loss = triplet_pool_loss(s, targets)  # no positives / no negatives: no triplets
        loss.backward()
        assert loss.item() == 0.0 and torch.all(s.grad == 0)
        s.grad = None
    assert triplet_margin_loss(torch.empty(0), torch.empty(0)).item() == 0.0


def test_padding_columns_change_nothing():
    """A -inf column is padding: no triplet, so the value and the gradient are those without it. Row 1
    (every label a positive) gets no pairs from the padding either, so it stays out of the mean."""
    scores, targets = random_batch(6)
    plain = scores.clone().requires_grad_(True)
    base = triplet_pool_loss(plain, targets)
    base.backward()
    wild = torch.cat([scores, torch.full((6, 2), float("-inf"), dtype=scores.dtype)], dim=1)
    wild_t = torch.cat([targets, torch.zeros(6, 2, dtype=torch.bool)], dim=1)
    wild.requires_grad_(True)
    loss = triplet_pool_loss(wild, wild_t)
    loss.backward()
    assert loss.item() == pytest.approx(base.item(), rel=1e-12)
    assert loss.item() == pytest.approx(reference_pool(scores, targets, 0.3), rel=1e-12)
    assert torch.isfinite(wild.grad).all() and torch.all(wild.grad[:, -2:] == 0)
    torch.testing.assert_close(wild.grad[:, :-2], plain.grad, rtol=1e-12, atol=1e-15)


def test_permutation_invariance():
    scores, targets = random_batch(7)
    base = triplet_pool_loss(scores, targets).item()
    g = torch.Generator().manual_seed(0)
    rows, cols = torch.randperm(6, generator=g), torch.randperm(10, generator=g)
    permuted = triplet_pool_loss(scores[rows][:, cols], targets[rows][:, cols])
    doubled = triplet_pool_loss(torch.cat([scores] * 2), torch.cat([targets] * 2))
    assert permuted.item() == pytest.approx(base, rel=1e-12)
    assert doubled.item() == pytest.approx(base, rel=1e-12)


def test_gather_positives_left_packs_rows():
    scores = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    targets = torch.tensor([[False, True, True], [True, False, False]])
    pos, valid = gather_positives(scores, targets)
    assert pos.tolist() == [[2.0, 3.0], [4.0, 0.0]]
    assert valid.tolist() == [[True, True], [True, False]]


def test_negative_margin_is_rejected():
    with pytest.raises(XmcbenchError, match="margin"):
        triplet_margin_loss(torch.zeros(2), torch.zeros(2), margin=-0.1)
