"""Golden values: each loss on a 2 x 3 pool, computed by hand and written here as literals.

Every expected number follows from the paper's equation with pencil-and-paper arithmetic (the
comments give the steps), including the reduction over rows / triplets, so a change in a loss's
form or reduction shows up as a wrong number rather than as a drifted reference implementation.
"""

from __future__ import annotations

import pytest
import torch

from xmcbench.losses import (
    decoupled_softmax_loss,
    dynamic_margin_triplet_pool_loss,
    psl_bidirectional_loss,
    psl_loss,
    soft_top_k_loss,
)

# Scores (already divided by τ) and targets shared by PSL and the decoupled softmax.
S = torch.tensor([[2.0, 0.0, -1.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
Y = torch.tensor([[True, False, False], [True, True, False]])


def test_psl_q2l_sum_unidec_section_3_1():
    # row 0: -log(e^2 / (e^2 + 1 + e^-1)) = 0.169846...
    # row 1: -(1/2)[log(1/(2 + e)) + log(e/(2 + e))] = log(2 + e) - 1/2 = 1.051444...
    # Σ_i (the paper's sum over queries) = 1.221290...
    assert psl_loss(S, Y).item() == pytest.approx(1.2212907334883365, abs=1e-12)
    assert psl_loss(S, Y, "mean").item() == pytest.approx(1.2212907334883365 / 2, abs=1e-12)


def test_psl_l2q_sum_and_bidirectional():
    # label 0 (positives: both queries, scores 2 and 0): -(1/2)[log(e^2/(e^2+1)) + log(1/(e^2+1))] = 1.126928...
    # label 1 (positive: query 1, scores 0 and 1): -log(e/(1+e)) = 0.313261...; label 2: no positive
    # Σ_l = 1.440189...; L_D = 0.5 q2l + 0.5 l2q = 1.330740...
    assert psl_loss(S.T, Y.T).item() == pytest.approx(1.4401896985611955, abs=1e-12)
    assert psl_bidirectional_loss(S, Y).item() == pytest.approx(1.330740216024766, abs=1e-12)
    # mean reduction (xmcbench option): 0.5 * 1.221290/2 + 0.5 * 1.440189/2
    assert psl_bidirectional_loss(S, Y, reduction="mean").item() == pytest.approx(0.665370108012383, abs=1e-12)


def test_decoupled_softmax_dexml_eq_5():
    # row 0: one positive, same as PSL: 0.169846...
    # row 1: each positive against the negative only: -(1/2)[log(1/(1+1)) + log(e/(e+1))] = 0.503204...
    # mean over queries = 0.336525...
    assert decoupled_softmax_loss(S, Y).item() == pytest.approx(0.3365252267976848, abs=1e-12)


def test_soft_top_k_dexml_eq_6_and_the_released_normalisation():
    # k = 1.5, α = 2: for scores {1, 0, -1} the threshold is t = 0 by symmetry,
    # σ(2) + σ(0) + σ(-2) = 1.5; z = (0.880797, 0.5, 0.119203).
    s = torch.tensor([[1.0, 0.0, -1.0], [-1.0, 0.0, 1.0]], dtype=torch.float64)
    y = torch.tensor([[True, False, True], [False, True, False]])
    # Eq. 6: -(1/L) Σ_p log z_p, L = 3; row 0: -(log σ(2) + log σ(-2))/3 = 0.751285; row 1: log 2 / 3 = 0.231049
    assert soft_top_k_loss(s, y, k=1.5, alpha=2.0).item() == pytest.approx(0.4911672004409818, abs=1e-8)
    # released code: divided by the number of (sampled) positives: row 0 /2, row 1 /1
    got = soft_top_k_loss(s, y, k=1.5, alpha=2.0, normalise="positives")
    assert got.item() == pytest.approx(0.910037595801459, abs=1e-8)
    # sampling one positive of row 0 (the counted mask) changes only its terms: -log σ(2) / 1
    counted = torch.tensor([[True, False, False], [False, True, False]])
    got = soft_top_k_loss(s, y, k=1.5, alpha=2.0, counted=counted, normalise="positives")
    assert got.item() == pytest.approx((0.12692801104297263 + 0.6931471805599453) / 2, abs=1e-8)


# PRIME: row 0 has positive 0.5 and negatives 0.45 (gap 0.05: ambiguous) and 0.6 (gap -0.1: hard);
# row 1 has positives 0.9 and 0.3 and the negative 0.5.
P_SCORES = torch.tensor([[0.5, 0.45, 0.6], [0.5, 0.9, 0.3]], dtype=torch.float64)
P_TARGETS = torch.tensor([[True, False, False], [False, True, True]])


def test_dynamic_margin_triplet_sum_prime_eq_1_and_13():
    # m = clip(|gap|, 0.1, 0.3), l = max(m - gap, 0):
    # (0.5, 0.45): m 0.1, l 0.05;  (0.5, 0.6): m 0.1, l 0.2;  (0.9, 0.5): gap 0.4, l 0;  (0.3, 0.5): m 0.2, l 0.4
    # Eq. 1 sums over the batch's triplets: 0.05 + 0.2 + 0 + 0.4 = 0.65
    assert dynamic_margin_triplet_pool_loss(P_SCORES, P_TARGETS).item() == pytest.approx(0.65, abs=1e-12)
    # "mean" (xmcbench option): row means 0.125 and 0.2, then their mean
    got = dynamic_margin_triplet_pool_loss(P_SCORES, P_TARGETS, reduction="mean")
    assert got.item() == pytest.approx(0.1625, abs=1e-12)
    # "softmax" (released code, τ 0.1): row 0 weights e^4.5, e^6 over its two violators; row 1: only
    # (0.3, 0.5) violates, weight 1, averaged over the row's 2 positives
    w = 0.18242552380635632  # e^4.5 / (e^4.5 + e^6)
    row0 = w * 0.05 + (1 - w) * 0.2
    got = dynamic_margin_triplet_pool_loss(P_SCORES, P_TARGETS, reduction="softmax", negative_temperature=0.1)
    assert got.item() == pytest.approx((row0 + 0.2) / 2, abs=1e-12)
    assert (row0 + 0.2) / 2 == pytest.approx(0.1863180857145233, abs=1e-12)


def test_non_violating_negatives_leave_the_paper_triplet_term_unchanged():
    """PRIME Eq. 1: an easy negative adds max(., 0) = 0 to the sum; the old mean would shrink."""
    easy = torch.tensor([[-0.9], [-0.8]], dtype=torch.float64)  # far below every positive
    scores = torch.cat([P_SCORES, easy.expand(2, 5)], dim=1)  # (2, 8): five easy negatives per row
    targets = torch.cat([P_TARGETS, torch.zeros(2, 5, dtype=torch.bool)], dim=1)
    for variant in ("max", "paper"):
        before = dynamic_margin_triplet_pool_loss(P_SCORES, P_TARGETS, variant=variant)
        after = dynamic_margin_triplet_pool_loss(scores, targets, variant=variant)
        assert after.item() == pytest.approx(before.item(), abs=1e-12)
        # the softmax weighting ignores them too (they are not violating)
        before = dynamic_margin_triplet_pool_loss(P_SCORES, P_TARGETS, variant=variant, reduction="softmax")
        after = dynamic_margin_triplet_pool_loss(scores, targets, variant=variant, reduction="softmax")
        assert after.item() == pytest.approx(before.item(), abs=1e-12)
    mean_before = dynamic_margin_triplet_pool_loss(P_SCORES, P_TARGETS, reduction="mean").item()
    mean_after = dynamic_margin_triplet_pool_loss(scores, targets, reduction="mean").item()
    assert mean_after < mean_before  # the dilution the paper's sum does not have
