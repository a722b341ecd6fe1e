"""Pick-some-labels (PSL) loss of UniDEC (Kharbanda et al., 2024, Section 3.1-3.2), both directions.

What it minimises. A batch Q_B of queries samples at most beta positives each; the label pool
L_B is the union of the sampled positives (and eta hard negatives per query). P_i^B = P_i ∩ L_B
are *all* positives of query i present in the pool, sampled for it or for another query. PSL
is the PAL-N multi-class reduction restricted to the pool:

    L_q2l = sum_{i in Q_B} -1/|P_i^B| sum_{p in P_i^B} log( exp(s_ip) / sum_{l in L_B} exp(s_il) )

with s = <Phi(x_i), Phi(z_l)> / tau. The label-to-query term L_l2q is the same expression on
the transposed matrix: for each pool label l, its positive queries P_l^B in the batch against
all batch queries:

    L_l2q = sum_{l in L_B} -1/|P_l^B| sum_{i in P_l^B} log( exp(s_il) / sum_{j in Q_B} exp(s_jl) )

Reduction (``reduction``). The paper writes *sums* over the queries and over the pool labels,
so ``reduction="sum"`` (the default, the paper's form) gives L_l2q about |L_B| / |Q_B| times
the weight of L_q2l (≈ 2.6 with 1,500 labels for 576 queries). ``reduction="mean"`` (xmcbench's
earlier choice, not the paper's) averages each direction over its rows (columns) that have at
least one positive, which makes both directions batch-size free and weighs them equally.

Combination (UniDEC Eq. for L_D, L_C and Algorithm 1):

    L_D = lambda_D L_D,q2l + (1 - lambda_D) L_D,l2q        (dual-encoder head, lambda_D = 0.5)
    L_C = lambda_C L_C,q2l + (1 - lambda_C) L_C,l2q        (classifier head,  lambda_C = 0.5)
    L   = lambda L_D + (1 - lambda) L_C

The paper fixes lambda_D = lambda_C = 0.5 and reports lambda = 0.5 and 0.3 (Appendix C,
Table 7, LF-Amazon-131K; 0.3 scores slightly higher there); the default here is 0.5.

Relation to siblings: ``psl_loss(reduction="mean")`` equals ``infonce_loss`` (PAL-N, its default);
the default ``reduction="sum"`` is that times the number of rows with a positive. Both keep other
positives in the denominator, unlike ``decoupled_softmax_loss``. UniDEC calls the DE variant
SupConDE since PSL takes the form of the SupCon loss (Khosla et al., 2020).

Example:
    >>> s = torch.randn(16, 40) / 0.1          # queries x pool labels
    >>> y = torch.rand(16, 40) < 0.1
    >>> loss = psl_bidirectional_loss(s, y)    # 0.5 q2l + 0.5 l2q
"""

from __future__ import annotations

import torch

from xmcbench.losses.common import LossInputError, check_fraction, check_scores_targets, mean_over_rows, upcast

__all__ = ["psl_bidirectional_loss", "psl_loss", "unidec_loss"]


REDUCTIONS = ("sum", "mean")


def _check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise LossInputError(f"PSL: unknown reduction {reduction!r}; choose 'sum' (paper) or 'mean'")


def psl_loss(scores: torch.Tensor, targets: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
    """Query-to-label PSL term: over rows with a positive, -(1/|P_i^B|) sum_p log softmax(s_i)_p.

    Args:
        scores: (B, P) query x pool-label scores, already scaled by the temperature.
        targets: (B, P) bool marking every in-pool positive of each row (P_i^B).
        reduction: "sum" over the rows (the paper's Σ_i, default) or "mean" over the rows
            that have a positive.

    Returns:
        Scalar; 0 (with a graph) when no row has a positive. For the label-to-query term pass
        ``scores.T, targets.T``.
    """
    check_scores_targets(scores, targets, "psl_loss")
    _check_reduction(reduction)
    s = upcast(scores)
    has_pos = targets.any(dim=1)
    s = torch.where(has_pos[:, None], s, torch.zeros_like(s))  # rows without positives are inert
    log_p = torch.log_softmax(s, dim=1)  # (B, P) softmax over the pool
    row_nll = (-log_p).masked_fill(~targets, 0.0).sum(dim=1)  # (B,)
    count = targets.sum(dim=1)  # (B,) |P_i^B|
    if reduction == "sum":
        return (row_nll / count.clamp_min(1).to(row_nll.dtype)).sum()  # rows without positives add 0
    return mean_over_rows(row_nll, count)


def psl_bidirectional_loss(
    scores: torch.Tensor, targets: torch.Tensor, lambda_q2l: float = 0.5, reduction: str = "sum"
) -> torch.Tensor:
    """lambda L_q2l + (1 - lambda) L_l2q (UniDEC's symmetric L_D or L_C) over one score matrix.

    Args:
        scores: (B, P) query x pool-label scores, already scaled by the temperature.
        targets: (B, P) bool in-pool positives.
        lambda_q2l: weight of the query-to-label term (lambda_D or lambda_C; 0.5 in UniDEC).
        reduction: "sum" (paper) or "mean", applied to each direction (see the module docstring).
    """
    check_fraction(lambda_q2l, "lambda_q2l", "psl_bidirectional_loss")
    return lambda_q2l * psl_loss(scores, targets, reduction) + (1.0 - lambda_q2l) * psl_loss(
        scores.T, targets.T, reduction
    )


def unidec_loss(
    de_scores: torch.Tensor,
    clf_scores: torch.Tensor,
    targets: torch.Tensor,
    lambda_: float = 0.5,
    lambda_d: float = 0.5,
    lambda_c: float = 0.5,
    reduction: str = "sum",
) -> torch.Tensor:
    """UniDEC's unified loss L = lambda L_D + (1 - lambda) L_C (Section 3.2, Algorithm 1).

    Args:
        de_scores: (B, P) <Phi_D(x_i), Phi_D(z_l)> / tau, dual-encoder head (normalised embeddings).
        clf_scores: (B, P) <Phi_C(x_i), Psi_l> / tau, classifier head against the classifier table.
        targets: (B, P) bool in-pool positives, shared by both heads (same pool L_B).
        lambda_: weight of the DE loss L_D (the paper reports 0.5 and 0.3).
        lambda_d: q2l weight inside L_D (lambda_D = 0.5 in the paper).
        lambda_c: q2l weight inside L_C (lambda_C = 0.5 in the paper).
        reduction: "sum" (paper's Σ over queries and labels) or "mean" (see the module docstring).
    """
    check_fraction(lambda_, "lambda_", "unidec_loss")
    loss_d = psl_bidirectional_loss(de_scores, targets, lambda_d, reduction)
    loss_c = psl_bidirectional_loss(clf_scores, targets, lambda_c, reduction)
    return lambda_ * loss_d + (1.0 - lambda_) * loss_c
