"""DecoupledSoftmax (DEXML Eq. 5) against a loop over the equation, plus edge cases and sharding."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from xmcbench.errors import XmcbenchError
from xmcbench.losses import (
    decoupled_softmax_loss,
    decoupled_softmax_terms,
    mean_over_rows,
    negative_logsumexp,
    sample_one_positive,
)


def reference_terms(scores: torch.Tensor, targets: torch.Tensor) -> dict[tuple[int, int], float]:
    """l_ip = -log(e^{s_ip} / (e^{s_ip} + sum_{n not in P_i} e^{s_in})) for every positive, by loops."""
    out = {}
    for i in range(scores.shape[0]):
        for p in range(scores.shape[1]):
            if not targets[i, p]:
                continue
            s_p = float(scores[i, p])
            negatives = [float(scores[i, n]) for n in range(scores.shape[1]) if not targets[i, n]]
            top = max([s_p] + negatives)  # shift for a stable direct sum
            denom = math.exp(s_p - top) + sum(math.exp(v - top) for v in negatives)
            out[(i, p)] = -((s_p - top) - math.log(denom))
    return out


def reference_loss(scores: torch.Tensor, targets: torch.Tensor) -> float:
    terms = reference_terms(scores, targets)
    rows = []
    for i in range(scores.shape[0]):
        row = [v for (r, _), v in terms.items() if r == i]
        if row:
            rows.append(sum(row) / len(row))
    return sum(rows) / len(rows) if rows else 0.0


def random_batch(seed: int, b: int = 6, p: int = 9, density: float = 0.3):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(b, p, generator=g, dtype=torch.float64) * 3
    targets = torch.rand(b, p, generator=g) < density
    targets[0] = False  # a row without positives
    targets[1] = True  # a row without negatives
    targets[2, :2] = True  # at least two positives in one row
    return scores, targets


@pytest.mark.parametrize("seed", range(5))
def test_matches_loop_reference(seed):
    scores, targets = random_batch(seed)
    loss = decoupled_softmax_loss(scores, targets)
    assert loss.item() == pytest.approx(reference_loss(scores, targets), rel=1e-10, abs=1e-12)
    terms = decoupled_softmax_terms(scores, targets)
    ref = reference_terms(scores, targets)
    for (i, p), v in ref.items():
        assert terms[i, p].item() == pytest.approx(v, rel=1e-10, abs=1e-12)
    assert torch.all(terms[~targets] == 0)


def test_other_positives_are_not_in_the_denominator():
    # Row with two positives: raising the other positive's score must not change l_i0.
    s = torch.tensor([[1.0, 0.0, -1.0, 0.5]], dtype=torch.float64)
    y = torch.tensor([[True, True, False, False]])
    before = decoupled_softmax_terms(s, y)[0, 0]
    s2 = s.clone()
    s2[0, 1] = 50.0
    after = decoupled_softmax_terms(s2, y)[0, 0]
    assert after.item() == pytest.approx(before.item(), rel=1e-12)


def test_gradcheck():
    scores, targets = random_batch(7, b=5, p=7)
    scores.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda s: decoupled_softmax_loss(s, targets), (scores,))


def test_rows_without_positives_or_negatives():
    s = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    y = torch.zeros(3, 5, dtype=torch.bool)
    loss = decoupled_softmax_loss(s, y)  # nothing to learn from
    loss.backward()
    assert loss.item() == 0.0 and torch.all(s.grad == 0)
    s.grad = None
    loss = decoupled_softmax_loss(s, torch.ones(3, 5, dtype=torch.bool))  # all positive: l_ip = 0
    loss.backward()
    assert loss.item() == 0.0 and torch.all(s.grad == 0)
    assert torch.all(torch.isneginf(negative_logsumexp(s.detach(), torch.ones(3, 5, dtype=torch.bool))))


def test_masked_rows_are_inert_even_with_extreme_scores():
    scores, targets = random_batch(3)
    base = decoupled_softmax_loss(scores, targets)
    wild = scores.clone()
    wild[0] = torch.tensor([1e4, -1e4, float("-inf")] * 3, dtype=torch.float64)  # row 0 has no positive
    wild.requires_grad_(True)
    loss = decoupled_softmax_loss(wild, targets)
    loss.backward()
    assert loss.item() == pytest.approx(base.item(), rel=1e-12)
    assert torch.all(wild.grad[0] == 0) and torch.isfinite(wild.grad).all()


def test_minus_inf_padding_columns_drop_out():
    scores, targets = random_batch(4)
    padded = torch.cat([scores, torch.full((scores.shape[0], 3), float("-inf"), dtype=scores.dtype)], dim=1)
    padded_t = torch.cat([targets, torch.zeros(targets.shape[0], 3, dtype=torch.bool)], dim=1)
    padded.requires_grad_(True)
    loss = decoupled_softmax_loss(padded, padded_t)
    loss.backward()
    assert loss.item() == pytest.approx(decoupled_softmax_loss(scores, targets).item(), rel=1e-12)
    assert torch.isfinite(padded.grad).all() and torch.all(padded.grad[:, -3:] == 0)


def test_permutation_and_duplication_invariance():
    scores, targets = random_batch(5)
    base = decoupled_softmax_loss(scores, targets).item()
    g = torch.Generator().manual_seed(0)
    rows = torch.randperm(scores.shape[0], generator=g)
    cols = torch.randperm(scores.shape[1], generator=g)
    permuted = decoupled_softmax_loss(scores[rows][:, cols], targets[rows][:, cols])
    assert permuted.item() == pytest.approx(base, rel=1e-12)
    doubled = decoupled_softmax_loss(torch.cat([scores, scores]), torch.cat([targets, targets]))
    assert doubled.item() == pytest.approx(base, rel=1e-12)


def test_duplicate_negative_column_counts_twice():
    # Same label twice in the pool as a negative: the equation sums it twice; so does the loss.
    scores, targets = random_batch(6)
    neg_col = int((~targets[2]).nonzero()[0])
    dup_s = torch.cat([scores, scores[:, neg_col : neg_col + 1]], dim=1)
    dup_t = torch.cat([targets, targets[:, neg_col : neg_col + 1]], dim=1)
    assert decoupled_softmax_loss(dup_s, dup_t).item() == pytest.approx(reference_loss(dup_s, dup_t), rel=1e-10)


def test_sample_one_positive_is_deterministic_and_valid():
    _, targets = random_batch(8, b=20, p=12, density=0.4)
    a = sample_one_positive(targets, torch.Generator().manual_seed(3))
    b = sample_one_positive(targets, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    assert torch.all(a <= targets)
    assert torch.equal(a.sum(dim=1), targets.any(dim=1).long())
    draws = [sample_one_positive(targets, torch.Generator().manual_seed(s)) for s in range(10)]
    assert any(not torch.equal(draws[0], d) for d in draws[1:])


def test_sample_one_positive_is_uniform():
    targets = torch.tensor([[True, False, True, True, False]])
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(5)
    n = 3000
    for _ in range(n):
        counts += sample_one_positive(targets, g)[0].float()
    assert counts[1] == 0 and counts[4] == 0
    assert torch.all((counts[[0, 2, 3]] / n - 1 / 3).abs() < 0.03)


def test_one_positive_is_deterministic_by_generator():
    scores, targets = random_batch(9)
    a = decoupled_softmax_loss(scores, targets, one_positive=True, generator=torch.Generator().manual_seed(1))
    b = decoupled_softmax_loss(scores, targets, one_positive=True, generator=torch.Generator().manual_seed(1))
    assert a.item() == b.item()


def test_one_positive_average_over_all_choices_equals_full_loss():
    """Each draw is mean_i l_{i,c_i}; averaged over every choice (c_i) it is the averaged loss exactly."""
    scores, targets = random_batch(10, b=4, p=6, density=0.5)
    targets[3, :3] = True
    terms = reference_terms(scores, targets)
    rows = [i for i in range(scores.shape[0]) if targets[i].any()]
    per_row_choices = [[terms[(i, p)] for p in range(scores.shape[1]) if targets[i, p]] for i in rows]
    combos = [sum(c) / len(rows) for c in itertools.product(*per_row_choices)]
    full = decoupled_softmax_loss(scores, targets).item()
    assert sum(combos) / len(combos) == pytest.approx(full, rel=1e-10)
    # Every sampled value is one of those combinations.
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        v = decoupled_softmax_loss(scores, targets, one_positive=True, generator=g)
        assert min(abs(v.item() - c) for c in combos) < 1e-10


def test_one_positive_single_row_hits_every_positive_term():
    scores, targets = random_batch(11)
    row = 2
    s, y = scores[row : row + 1], targets[row : row + 1]
    expected = sorted(decoupled_softmax_terms(s, y)[y].tolist())
    seen = set()
    for k in range(200):
        g = torch.Generator().manual_seed(k)
        seen.add(round(decoupled_softmax_loss(s, y, one_positive=True, generator=g).item(), 12))
    assert sorted(seen) == pytest.approx(expected, rel=1e-10)
    assert sum(expected) / len(expected) == pytest.approx(decoupled_softmax_loss(s, y).item(), rel=1e-12)


def test_two_column_shards_combine_to_the_full_loss_and_gradient():
    scores, targets = random_batch(12, b=7, p=10)
    full_s = scores.clone().requires_grad_(True)
    full = decoupled_softmax_loss(full_s, targets)
    full.backward()

    shard_s = scores.clone().requires_grad_(True)
    parts = [(shard_s[:, :4], targets[:, :4]), (shard_s[:, 4:], targets[:, 4:])]
    neg_lse = torch.logsumexp(torch.stack([negative_logsumexp(s, y) for s, y in parts]), dim=0)  # "all-reduce"
    row_sum = sum(decoupled_softmax_terms(s, y, neg_lse=neg_lse).sum(dim=1) for s, y in parts)
    row_count = sum(y.sum(dim=1) for _, y in parts)
    sharded = mean_over_rows(row_sum, row_count)
    sharded.backward()
    assert sharded.item() == pytest.approx(full.item(), rel=1e-12)
    assert torch.allclose(shard_s.grad, full_s.grad, rtol=1e-10, atol=1e-12)


def test_half_precision_runs_in_float32():
    scores, targets = random_batch(13)
    loss = decoupled_softmax_loss(scores.to(torch.bfloat16), targets)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert loss.item() == pytest.approx(reference_loss(scores, targets), rel=3e-2)


def test_bad_inputs_raise_clear_errors():
    s = torch.randn(2, 3)
    with pytest.raises(XmcbenchError, match="boolean"):
        decoupled_softmax_loss(s, torch.ones(2, 3))
    with pytest.raises(XmcbenchError, match="does not match"):
        decoupled_softmax_loss(s, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="2-D"):
        decoupled_softmax_loss(torch.randn(3), torch.ones(3, dtype=torch.bool))
