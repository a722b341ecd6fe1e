"""UniDEC pick-some-labels (Section 3.1-3.2): both directions and the unified loss, against loops."""

from __future__ import annotations

import math

import pytest
import torch

from xmcbench.errors import XmcbenchError
from xmcbench.losses import infonce_loss, psl_bidirectional_loss, psl_loss, unidec_loss


def reference_q2l(scores: torch.Tensor, targets: torch.Tensor, reduction: str = "sum") -> float:
    """sum (paper) or mean over queries with P_i^B of -(1/|P_i^B|) sum_p log(exp(s_ip) / sum_{l in L_B} exp(s_il))."""
    rows = []
    for i in range(scores.shape[0]):
        positives = [p for p in range(scores.shape[1]) if targets[i, p]]
        if not positives:
            continue
        denom = sum(math.exp(float(v)) for v in scores[i])
        rows.append(-sum(math.log(math.exp(float(scores[i, p])) / denom) for p in positives) / len(positives))
    if reduction == "sum":
        return sum(rows)
    return sum(rows) / len(rows) if rows else 0.0


def reference_l2q(scores: torch.Tensor, targets: torch.Tensor, reduction: str = "sum") -> float:
    """sum (paper) or mean over labels with P_l^B of -(1/|P_l^B|) sum_{q in P_l^B} log(exp(s_ql) / sum_{q' in Q_B} exp(s_q'l))."""
    cols = []
    for l in range(scores.shape[1]):
        queries = [q for q in range(scores.shape[0]) if targets[q, l]]
        if not queries:
            continue
        denom = sum(math.exp(float(scores[q, l])) for q in range(scores.shape[0]))
        cols.append(-sum(math.log(math.exp(float(scores[q, l])) / denom) for q in queries) / len(queries))
    if reduction == "sum":
        return sum(cols)
    return sum(cols) / len(cols) if cols else 0.0


def random_batch(seed: int, b: int = 6, p: int = 8):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(b, p, generator=g, dtype=torch.float64) * 2
    targets = torch.rand(b, p, generator=g) < 0.3
    targets[0] = False  # query without in-pool positives
    targets[:, 1] = False  # a pool label (a hard negative) that is nobody's positive
    targets[2, 2:5] = True
    return scores, targets


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("seed", range(4))
def test_directions_match_loop_references(seed, reduction):
    scores, targets = random_batch(seed)
    assert psl_loss(scores, targets, reduction).item() == pytest.approx(
        reference_q2l(scores, targets, reduction), rel=1e-10
    )
    assert psl_loss(scores.T, targets.T, reduction).item() == pytest.approx(
        reference_l2q(scores, targets, reduction), rel=1e-10
    )


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("lam", [0.0, 0.3, 0.5, 1.0])
def test_bidirectional_weights(lam, reduction):
    scores, targets = random_batch(4)
    expected = lam * reference_q2l(scores, targets, reduction) + (1 - lam) * reference_l2q(scores, targets, reduction)
    assert psl_bidirectional_loss(scores, targets, lam, reduction).item() == pytest.approx(expected, rel=1e-10)


def test_unidec_combines_heads_with_the_paper_weights():
    de, targets = random_batch(5)
    clf = torch.randn(de.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64) * 3
    lam, lam_d, lam_c = 0.3, 0.5, 0.7
    l_d = lam_d * reference_q2l(de, targets) + (1 - lam_d) * reference_l2q(de, targets)
    l_c = lam_c * reference_q2l(clf, targets) + (1 - lam_c) * reference_l2q(clf, targets)
    got = unidec_loss(de, clf, targets, lambda_=lam, lambda_d=lam_d, lambda_c=lam_c)
    assert got.item() == pytest.approx(lam * l_d + (1 - lam) * l_c, rel=1e-10)
    default = unidec_loss(de, clf, targets)  # paper: lambda_D = lambda_C = 0.5; lambda = 0.5 here
    assert default.item() == pytest.approx(
        (0.5 * psl_bidirectional_loss(de, targets) + 0.5 * psl_bidirectional_loss(clf, targets)).item(), rel=1e-12
    )


def test_psl_is_pal_n_infonce():
    scores, targets = random_batch(6)
    # infonce averages over rows: PSL's "mean" reduction is PAL-N InfoNCE on the pool.
    assert psl_loss(scores, targets, "mean").item() == pytest.approx(infonce_loss(scores, targets).item(), rel=1e-12)


def test_gradcheck():
    de, targets = random_batch(7, b=4, p=5)
    targets[1, 0] = True
    clf = de.flip(1).clone()
    de.requires_grad_(True)
    clf.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: unidec_loss(a, b, targets, lambda_=0.3), (de, clf))


def test_rows_and_columns_without_positives_are_inert():
    scores, targets = random_batch(8)
    wild = scores.clone()
    wild[0] = float("-inf")  # query without positives, fully padded
    wild[:, 1] = 1e4  # label that no query has as positive: huge in its own column only matters for l2q
    wild.requires_grad_(True)
    loss = psl_bidirectional_loss(wild, targets)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(wild.grad).all()
    assert torch.all(wild.grad[0] == 0)


def test_no_positives_anywhere_is_zero():
    s = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    loss = unidec_loss(s, s * 2, torch.zeros(3, 4, dtype=torch.bool))
    loss.backward()
    assert loss.item() == 0.0 and torch.all(s.grad == 0)


def test_permutation_invariance():
    scores, targets = random_batch(9)
    base = psl_bidirectional_loss(scores, targets).item()
    g = torch.Generator().manual_seed(0)
    rows, cols = torch.randperm(6, generator=g), torch.randperm(8, generator=g)
    permuted = psl_bidirectional_loss(scores[rows][:, cols], targets[rows][:, cols])
    assert permuted.item() == pytest.approx(base, rel=1e-12)


def test_bad_lambda():
    scores, targets = random_batch(0)
    with pytest.raises(XmcbenchError, match=r"lambda_q2l must be in \[0, 1\]"):
        psl_bidirectional_loss(scores, targets, lambda_q2l=1.5)
    with pytest.raises(XmcbenchError, match="lambda_"):
        unidec_loss(scores, scores, targets, lambda_=-0.1)
