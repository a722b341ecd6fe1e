"""PRIME's prototype regulariser R (Dahiya, Ortego & Jiménez, NAACL 2025, Eq. 5-7).

What it minimises. PRIME scores a query q against a label l twice: s_ql = h_q . h_l against the
label-text embedding, and b_ql = h_q . z_l against the label prototype (text embedding +
centroid + free vector). R (brought over from OAK, Mohan et al., 2024) asks the prototype to be
*better* than the text embedding, by a margin m':

    R_p = 1/P sum_{positive pairs} (s_qp - b_qp + m')       (Eq. 6)  prototype closer for positives
    R_n = 1/N sum_{negative pairs} (b_qn - s_qn + m')       (Eq. 7)  and farther for negatives
    R   = (R_p + R_n) / 2,          L = ... + lambda R,  lambda = 0.1, m' = 0.1

P and N are the numbers of positive and negative comparisons in the batch.

Paper vs released code. As written, R_p and R_n are linear: they keep rewarding the prototype
for beating the text embedding by more than m', without bound. The released ``RegLoss``
hinges every term at zero (max(0, .)) and divides each sum by the number of *non-zero* terms
— which is 0/0 = NaN once every pair satisfies the margin. Both are offered:

- ``variant="hinge"`` (default, as the published numbers were obtained): hinged terms, each of
  R_p, R_n averaged over its non-zero entries, and 0 (not NaN) when it has none.
- ``variant="paper"``: the linear Eq. 6-7, each averaged over all its pairs (0 if none).

Two further details of the released code, left to the caller: it evaluates R on one sampled
positive per query and the top-k hardest negatives (by b), not on every pool pair; and its
``TripletLossWReg`` builds the regulariser with the triplet's upper margin (0.3 in its shipped
config) rather than the paper's m' = 0.1. The default here is the paper's 0.1.

Relation to siblings: it is added to three ``dynamic_margin_triplet_pool_loss`` terms in PRIME's
Eq. 5; it is not a ranking loss by itself (it only compares the two scorings of the same pair).

Example:
    >>> s = torch.rand(4, 10); b = torch.rand(4, 10)      # text and prototype similarities
    >>> y = torch.rand(4, 10) < 0.2
    >>> r = prime_regularizer(s, b, y, margin=0.1)
"""

from __future__ import annotations

import torch

from xmcbench.losses.common import LossInputError, check_scores_targets

__all__ = ["prime_regularizer"]

DEFAULT_MARGIN = 0.1  # m' in PRIME Eq. 6-7
VARIANTS = ("hinge", "paper")


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over ``mask`` (0 with a graph when the mask is empty)."""
    total = values.masked_fill(~mask, 0.0).sum()
    return total / mask.sum().clamp_min(1).to(values.dtype)


def prime_regularizer(
    text_scores: torch.Tensor,
    proto_scores: torch.Tensor,
    targets: torch.Tensor,
    margin: float = DEFAULT_MARGIN,
    variant: str = "hinge",
) -> torch.Tensor:
    """R = (R_p + R_n) / 2 of PRIME Eq. 6-7 over all (query, pool label) pairs of a batch.

    Args:
        text_scores: (B, P) s_ql = h_q . h_l, query vs label-text embedding (finite).
        proto_scores: (B, P) b_ql = h_q . z_l, query vs label prototype (finite).
        targets: (B, P) bool positives; every other column is a negative.
        margin: m' (0.1 in the paper).
        variant: "hinge" (released code: max(0, .) and mean over non-zero terms; default) or
            "paper" (linear terms, mean over all pairs).

    Returns:
        Scalar R. Never NaN: an empty set of terms contributes 0.
    """
    check_scores_targets(text_scores, targets, "prime_regularizer")
    check_scores_targets(proto_scores, targets, "prime_regularizer")
    if variant not in VARIANTS:
        raise LossInputError(f"prime_regularizer: unknown variant {variant!r}; choose 'hinge' or 'paper'")
    pos_terms = text_scores - proto_scores + margin  # (B, P) Eq. 6 summand
    neg_terms = proto_scores - text_scores + margin  # (B, P) Eq. 7 summand
    if variant == "paper":
        r_p = _masked_mean(pos_terms, targets)
        r_n = _masked_mean(neg_terms, ~targets)
    else:
        pos_terms, neg_terms = torch.relu(pos_terms), torch.relu(neg_terms)
        r_p = _masked_mean(pos_terms, targets & (pos_terms > 0))
        r_n = _masked_mean(neg_terms, ~targets & (neg_terms > 0))
    return 0.5 * (r_p + r_n)
