"""PRIME's clipped dynamic-margin triplet loss (Eq. 13/14): the three regions of both variants,
the pool form and the released code's softmax re-weighting of negatives, against loops."""

from __future__ import annotations

import math

import pytest
import torch

from xmcbench.errors import XmcbenchError
from xmcbench.losses import (
    dynamic_margin_triplet_loss,
    dynamic_margin_triplet_pool_loss,
    dynamic_margin_triplet_terms,
    triplet_margin_loss,
)

GMIN, GMAX = 0.1, 0.3


def reference_term(s_p: float, s_n: float, variant: str, gmin: float = GMIN, gmax: float = GMAX) -> float:
    gap = s_p - s_n
    if variant == "paper" and 0 < gap < gmin:
        return gap + gmin  # Eq. 13 case expansion
    margin = min(max(abs(gap), gmin), gmax)
    return max(s_n - s_p + margin, 0.0)  # Eq. 13 first line / released code


def value_and_grads(s_p: float, s_n: float, variant: str):
    p = torch.tensor(s_p, dtype=torch.float64, requires_grad=True)
    n = torch.tensor(s_n, dtype=torch.float64, requires_grad=True)
    loss = dynamic_margin_triplet_loss(p, n, GMIN, GMAX, variant=variant)
    loss.backward()
    return loss.item(), (p.grad.item(), n.grad.item())


@pytest.mark.parametrize("variant", ["max", "paper"])
def test_easy_region_is_zero(variant):
    for s_p, s_n in [(0.8, 0.5), (0.62, 0.5), (0.9, -0.9)]:  # gap >= gamma_min (inside and beyond the clip)
        value, grads = value_and_grads(s_p, s_n, variant)
        assert value == 0.0 and grads == (0.0, 0.0)


def test_ambiguous_region_max_variant_has_the_ordinary_gradient():
    value, grads = value_and_grads(0.55, 0.5, "max")  # gap 0.05 < gamma_min
    assert value == pytest.approx(GMIN - 0.05)
    assert grads == (-1.0, 1.0)


def test_ambiguous_region_paper_variant_has_the_inverted_gradient():
    value, grads = value_and_grads(0.55, 0.5, "paper")
    assert value == pytest.approx(0.05 + GMIN)  # s_p - s_n + gamma_min
    assert grads == (1.0, -1.0)  # Eq. 14


@pytest.mark.parametrize("variant", ["max", "paper"])
@pytest.mark.parametrize("s_p,s_n,expected", [(0.3, 0.5, 0.2 + 0.2), (0.45, 0.5, 0.05 + GMIN), (-0.5, 0.5, 1.0 + GMAX)])
def test_hard_region_is_standard_with_unit_gradient(variant, s_p, s_n, expected):
    value, grads = value_and_grads(s_p, s_n, variant)
    assert value == pytest.approx(expected)
    assert grads == (-1.0, 1.0)  # magnitude 1: the margin is detached (no doubling)


@pytest.mark.parametrize("variant", ["max", "paper"])
def test_boundaries(variant):
    gmin, gmax = 0.25, 0.5  # binary fractions: the gaps below are exact
    p, n = torch.tensor([0.5, 0.75]), torch.tensor([0.5, 0.5])  # gap 0 (hard), gap == gamma_min (easy)
    terms = dynamic_margin_triplet_terms(p, n, gmin, gmax, variant)
    assert terms.tolist() == [gmin, 0.0]


def test_equal_clip_bounds_give_the_fixed_margin_triplet():
    g = torch.Generator().manual_seed(0)
    s_p, s_n = torch.rand(50, generator=g) * 2 - 1, torch.rand(50, generator=g) * 2 - 1
    assert dynamic_margin_triplet_loss(s_p, s_n, 0.3, 0.3).item() == pytest.approx(
        triplet_margin_loss(s_p, s_n, 0.3).item(), rel=1e-6
    )


@pytest.mark.parametrize("variant", ["max", "paper"])
def test_explicit_triplets_match_elementwise_reference(variant):
    g = torch.Generator().manual_seed(1)
    s_p = torch.rand(40, generator=g, dtype=torch.float64) * 2 - 1
    s_n = torch.rand(40, generator=g, dtype=torch.float64) * 2 - 1
    s_n[:10] = s_p[:10] - 0.05  # make sure the ambiguous region is populated
    expected = sum(reference_term(a, b, variant) for a, b in zip(s_p.tolist(), s_n.tolist())) / 40
    assert dynamic_margin_triplet_loss(s_p, s_n, variant=variant).item() == pytest.approx(expected, rel=1e-12)


def random_pool(seed: int, b: int = 5, p: int = 9):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(b, p, generator=g, dtype=torch.float64) * 2 - 1
    targets = torch.rand(b, p, generator=g) < 0.3
    targets[0] = False
    targets[1] = True
    targets[2, :3] = True
    return scores, targets


def reference_pool(scores, targets, variant, temperature=None) -> float:
    """Per row: mean over (p, n) pairs, or with tau the mean over p of sum_n softmax_active(s_n / tau) l."""
    rows = []
    for i in range(scores.shape[0]):
        pos = [float(scores[i, j]) for j in range(scores.shape[1]) if targets[i, j]]
        neg = [float(scores[i, j]) for j in range(scores.shape[1]) if not targets[i, j]]
        if not pos or not neg:
            continue
        if temperature is None:
            rows.append(sum(reference_term(p, n, variant) for p in pos for n in neg) / (len(pos) * len(neg)))
            continue
        per_pos = []
        for p in pos:
            losses = [reference_term(p, n, variant) for n in neg]
            active = [j for j, v in enumerate(losses) if v > 0]
            if not active:
                per_pos.append(0.0)
                continue
            top = max(neg[j] / temperature for j in active)
            weights = {j: math.exp(neg[j] / temperature - top) for j in active}
            total = sum(weights.values())
            per_pos.append(sum(weights[j] / total * losses[j] for j in active))
        rows.append(sum(per_pos) / len(per_pos))
    return sum(rows) / len(rows) if rows else 0.0


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("variant", ["max", "paper"])
@pytest.mark.parametrize("temperature", [None, 0.1])
def test_pool_matches_loop_reference(seed, variant, temperature):
    scores, targets = random_pool(seed)
    got = pool_loss(scores, targets, variant=variant, temperature=temperature)
    assert got.item() == pytest.approx(reference_pool(scores, targets, variant, temperature), rel=1e-10, abs=1e-14)


def pool_loss(scores, targets, *args, variant="max", temperature=None):
    """The pool loss with the reference's reduction: uniform mean (None) or softmax over all negatives (tau)."""
    if temperature is None:
        return dynamic_margin_triplet_pool_loss(scores, targets, *args, variant=variant, reduction="mean")
    return dynamic_margin_triplet_pool_loss(
        scores,
        targets,
        *args,
        variant=variant,
        negative_temperature=temperature,
        reduction="softmax",
        top_negatives=None,
    )


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("variant", ["max", "paper"])
def test_pool_sum_is_eq1(seed, variant):
    """reduction="sum": Σ_i Σ_{j ∈ P_i, k ∈ N_i} l (PRIME Eq. 1), the default."""
    scores, targets = random_pool(seed)
    expected = sum(
        reference_term(float(scores[i, j]), float(scores[i, k]), variant)
        for i in range(scores.shape[0])
        for j in range(scores.shape[1])
        for k in range(scores.shape[1])
        if targets[i, j] and not targets[i, k]
    )
    got = dynamic_margin_triplet_pool_loss(scores, targets, variant=variant)
    assert got.item() == pytest.approx(expected, rel=1e-10, abs=1e-14)


def test_reweighting_one_positive_against_hardest_negatives_like_the_released_code():
    # s_pos (B, 1) vs s_neg (B, N): per row sum_n w_n l_n, w = softmax over violating n of s_n / tau.
    s_pos = torch.tensor([[0.5], [0.9]], dtype=torch.float64)
    s_neg = torch.tensor([[0.6, 0.45, 0.0], [0.1, 0.2, 0.0]], dtype=torch.float64)
    rows = []
    for p, negs in zip([0.5, 0.9], [[0.6, 0.45, 0.0], [0.1, 0.2, 0.0]]):
        losses = [reference_term(p, n, "max") for n in negs]
        active = [j for j, v in enumerate(losses) if v > 0]
        z = sum(math.exp(negs[j] / 0.1) for j in active)
        rows.append(sum(math.exp(negs[j] / 0.1) / z * losses[j] for j in active))
    got = dynamic_margin_triplet_loss(s_pos, s_neg, negative_temperature=0.1)
    assert got.item() == pytest.approx(sum(rows) / 2, rel=1e-12)
    assert rows[1] == 0.0  # every negative satisfied: zero weights, no NaN


def test_gradcheck_of_the_weighted_pool_away_from_kinks():
    _, targets = random_pool(4, b=4, p=6)
    g = torch.Generator().manual_seed(4)
    # The margin is detached, so the analytic gradient is the true derivative only where the clip
    # is constant: |gap| < gamma_min or |gap| > gamma_max. A 0.4 grid plus distinct column offsets
    # of at most 0.04 gives gaps 0.4 k + d with 0.008 <= |d| <= 0.04: never near 0, 0.15 or 0.35,
    # and |gap| is either < 0.05 or > 0.36.
    scores = (torch.randint(-3, 4, (4, 6), generator=g) * 0.4).double() + 0.008 * torch.arange(6).double()
    scores.requires_grad_(True)
    for variant in ("max", "paper"):
        assert torch.autograd.gradcheck(
            lambda s: pool_loss(s, targets, 0.15, 0.35, variant=variant, temperature=0.1),
            (scores,),
        )


def test_edge_cases_have_no_nan():
    s = torch.rand(3, 5, dtype=torch.float64, requires_grad=True)
    for targets in (torch.zeros(3, 5, dtype=torch.bool), torch.ones(3, 5, dtype=torch.bool)):
        for temperature in (None, 0.1):
            loss = pool_loss(s, targets, temperature=temperature)
            loss.backward()
            assert loss.item() == 0.0 and torch.all(s.grad == 0)
            s.grad = None


@pytest.mark.parametrize("reduction", ["sum", "mean", "softmax"])
def test_padding_columns_change_nothing(reduction):
    """A -inf column is padding, never a negative: every reduction gives the value and gradient it
    gives without it, row 1 (every label a positive) included, which padding must not make a row."""
    scores, targets = random_pool(5)
    plain = scores.clone().requires_grad_(True)
    base = dynamic_margin_triplet_pool_loss(plain, targets, reduction=reduction)
    base.backward()
    padded = torch.cat([scores, torch.full((5, 2), float("-inf"), dtype=scores.dtype)], dim=1).requires_grad_(True)
    padded_t = torch.cat([targets, torch.zeros(5, 2, dtype=torch.bool)], dim=1)
    loss = dynamic_margin_triplet_pool_loss(padded, padded_t, reduction=reduction)
    loss.backward()
    assert loss.item() == pytest.approx(base.item(), rel=1e-12)
    assert torch.isfinite(padded.grad).all() and torch.all(padded.grad[:, -2:] == 0)
    torch.testing.assert_close(padded.grad[:, :-2], plain.grad, rtol=1e-12, atol=1e-15)


def test_permutation_invariance():
    scores, targets = random_pool(6)
    base = dynamic_margin_triplet_pool_loss(scores, targets, variant="paper").item()
    g = torch.Generator().manual_seed(1)
    rows, cols = torch.randperm(5, generator=g), torch.randperm(9, generator=g)
    permuted = dynamic_margin_triplet_pool_loss(scores[rows][:, cols], targets[rows][:, cols], variant="paper")
    assert permuted.item() == pytest.approx(base, rel=1e-12)


def test_bad_arguments():
    s = torch.zeros(2)
    with pytest.raises(XmcbenchError, match="variant"):
        dynamic_margin_triplet_loss(s, s, variant="inverted")
    with pytest.raises(XmcbenchError, match="gamma_min <= gamma_max"):
        dynamic_margin_triplet_loss(s, s, 0.5, 0.1)
    with pytest.raises(XmcbenchError, match="negative_temperature"):
        dynamic_margin_triplet_loss(s, s, negative_temperature=0.0)


@pytest.mark.parametrize("reduction", ["sum", "mean", "softmax"])
@pytest.mark.parametrize("variant", ["max", "paper"])
def test_pool_loss_in_row_chunks_is_the_same_value_and_gradient(monkeypatch, reduction, variant):
    """Large pools run in checkpointed row chunks (memory O(chunk x K x P)): the same loss and
    gradient as in one piece, rows without positives included."""
    import xmcbench.losses.dynamic_margin_triplet as dmt

    g = torch.Generator().manual_seed(3)
    scores = torch.rand(37, 23, generator=g, dtype=torch.float64) * 2 - 1
    targets = torch.rand(37, 23, generator=g) < 0.2
    targets[5] = False  # a row without positives
    targets[:, 4] = True  # a label that is positive for every row: K is large in the transposed term
    results = []
    for budget in (1 << 25, 50):  # one piece; chunks of a few rows
        monkeypatch.setattr(dmt, "_TRIPLET_BUDGET", budget)
        for s, t in ((scores, targets), (scores.T, targets.T)):
            x = s.detach().clone().requires_grad_(True)
            loss = dmt.dynamic_margin_triplet_pool_loss(x, t, 0.1, 0.3, variant, 0.1, reduction, top_negatives=5)
            loss.backward()
            results.append((loss.detach(), x.grad))
    for (a, ga), (b, gb) in zip(results[:2], results[2:], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(ga, gb, rtol=1e-12, atol=1e-12)
    assert results[0][0] != 0
