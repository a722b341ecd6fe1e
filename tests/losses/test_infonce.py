"""Multi-label SoftmaxCE (DEXML Eq. 3) and InfoNCE (Eq. 4) against loops over the equations."""

from __future__ import annotations

import math

import pytest
import torch

from xmcbench.errors import XmcbenchError
from xmcbench.losses import decoupled_softmax_loss, decoupled_softmax_terms, infonce_loss, softmax_ce_loss


def reference_softmax_ce(scores: torch.Tensor, targets: torch.Tensor, normalize: bool) -> float:
    """Eq. 3: -sum_{j in P_i} log(e^{s_ij} / sum_l e^{s_il}), optionally / |P_i|; mean over rows with P_i."""
    rows = []
    for i in range(scores.shape[0]):
        row = [float(v) for v in scores[i]]
        top = max(row)
        log_z = top + math.log(sum(math.exp(v - top) for v in row))
        terms = [-(row[j] - log_z) for j in range(len(row)) if targets[i, j]]
        if terms:
            rows.append(sum(terms) / (len(terms) if normalize else 1))
    return sum(rows) / len(rows) if rows else 0.0


def reference_infonce(scores: torch.Tensor, targets: torch.Tensor, normalize: bool) -> float:
    """Eq. 4: denominator e^{s_ij} + sum over the pool minus d_j, written out literally."""
    rows = []
    for i in range(scores.shape[0]):
        terms = []
        for j in range(scores.shape[1]):
            if not targets[i, j]:
                continue
            s_j = float(scores[i, j])
            others = [float(scores[i, d]) for d in range(scores.shape[1]) if d != j]
            denom = math.exp(s_j) + sum(math.exp(v) for v in others)
            terms.append(-math.log(math.exp(s_j) / denom))
        if terms:
            rows.append(sum(terms) / (len(terms) if normalize else 1))
    return sum(rows) / len(rows) if rows else 0.0


def random_batch(seed: int, b: int = 6, p: int = 9):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(b, p, generator=g, dtype=torch.float64) * 2
    targets = torch.rand(b, p, generator=g) < 0.35
    targets[0] = False
    targets[1] = True
    targets[2, :3] = True
    return scores, targets


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("normalize", [True, False])
def test_match_loop_references(seed, normalize):
    scores, targets = random_batch(seed)
    ce = softmax_ce_loss(scores, targets, normalize_positives=normalize).item()
    nce = infonce_loss(scores, targets, normalize_positives=normalize).item()
    assert ce == pytest.approx(reference_softmax_ce(scores, targets, normalize), rel=1e-10)
    assert nce == pytest.approx(reference_infonce(scores, targets, normalize), rel=1e-10)
    assert ce == pytest.approx(nce, rel=1e-12)  # the paper: (4) with D^- = all labels is (3)


def test_sum_is_count_times_mean_for_equal_counts():
    scores, _ = random_batch(5)
    targets = torch.zeros_like(scores, dtype=torch.bool)
    targets[:, :3] = True  # 3 positives in every row
    assert infonce_loss(scores, targets, normalize_positives=False).item() == pytest.approx(
        3 * infonce_loss(scores, targets).item(), rel=1e-12
    )


def test_decoupled_terms_are_never_larger():
    # Dropping other positives from the denominator can only lower each term.
    scores, targets = random_batch(6)
    log_p = torch.log_softmax(scores, dim=1)
    dec = decoupled_softmax_terms(scores, targets)
    assert torch.all(dec[targets] <= -log_p[targets] + 1e-12)
    assert decoupled_softmax_loss(scores, targets) <= infonce_loss(scores, targets)


def test_infonce_pushes_down_a_confident_positive_decoupled_does_not():
    """DEXML Sec. 4.1: dl/ds_l = -(1 - |P_i| sigma_il): positive (descent lowers s) once sigma_il > 1/|P_i|."""
    s = torch.tensor([[6.0, 0.0, 0.0, -1.0, -1.0]], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([[True, True, True, False, False]])
    infonce_loss(s, y, normalize_positives=False).backward()
    sigma = torch.softmax(s.detach(), dim=1)
    assert s.grad[0, 0].item() == pytest.approx(-(1 - 3 * sigma[0, 0].item()), rel=1e-10)
    assert s.grad[0, 0] > 0
    s.grad = None
    decoupled_softmax_loss(s, y).backward()
    assert s.grad[0, 0] <= 0


def test_gradcheck():
    scores, targets = random_batch(7, b=4, p=6)
    scores.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda s: infonce_loss(s, targets), (scores,))
    assert torch.autograd.gradcheck(lambda s: softmax_ce_loss(s, targets, normalize_positives=False), (scores,))


def test_edge_cases_are_finite():
    s = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    none = torch.zeros(3, 4, dtype=torch.bool)
    loss = infonce_loss(s, none)
    loss.backward()
    assert loss.item() == 0.0 and torch.all(s.grad == 0)
    # All positive: every term is -log(1/P) (other positives share the denominator).
    equal = torch.zeros(2, 4, dtype=torch.float64)
    assert infonce_loss(equal, torch.ones(2, 4, dtype=torch.bool)).item() == pytest.approx(math.log(4))


def test_masked_rows_and_padding():
    scores, targets = random_batch(8)
    base = infonce_loss(scores, targets).item()
    wild = scores.clone()
    wild[0] = float("-inf")  # a fully padded row without positives
    wild = torch.cat([wild, torch.full((wild.shape[0], 2), float("-inf"), dtype=wild.dtype)], dim=1)
    wild_t = torch.cat([targets, torch.zeros(targets.shape[0], 2, dtype=torch.bool)], dim=1)
    wild.requires_grad_(True)
    loss = infonce_loss(wild, wild_t)
    loss.backward()
    assert loss.item() == pytest.approx(base, rel=1e-12)
    assert torch.isfinite(wild.grad).all() and torch.all(wild.grad[0] == 0)


def test_permutation_and_duplication_invariance():
    scores, targets = random_batch(9)
    base = infonce_loss(scores, targets).item()
    g = torch.Generator().manual_seed(1)
    rows, cols = torch.randperm(6, generator=g), torch.randperm(9, generator=g)
    assert infonce_loss(scores[rows][:, cols], targets[rows][:, cols]).item() == pytest.approx(base, rel=1e-12)
    assert infonce_loss(torch.cat([scores] * 3), torch.cat([targets] * 3)).item() == pytest.approx(base, rel=1e-12)


def test_bad_inputs():
    with pytest.raises(XmcbenchError, match="boolean"):
        infonce_loss(torch.randn(2, 3), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(XmcbenchError, match="floating"):
        softmax_ce_loss(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.bool))
