"""Triplet loss with a clipped dynamic margin, PRIME (Dahiya, Ortego & Jiménez, NAACL 2025, Eq. 3, 12-14).

What it minimises. For a query (anchor) with positive and negative similarities s_p, s_n, the
fixed margin of the triplet loss is replaced by the gap itself, clipped and detached:

    m = clip(|s_p - s_n|, gamma_min, gamma_max)_detached
    l = max(s_n - s_p + m, 0)                                   (Eq. 13, first line)

Writing gap = s_p - s_n this has three regions, with gradients w.r.t. (s_p, s_n):

    easy       gap >= gamma_min       l = 0                               (0, 0)
    ambiguous  0 < gap < gamma_min    l = gamma_min - gap                 (-1, +1)
    hard       gap <= 0               l = -gap + clip(-gap), >= gamma_min (-1, +1), norm 1
                                      because m is detached (Eq. 13 discussion)

The paper contradicts itself here. The defining formula above (and the authors' released
code, ``torch.max(0, sim_n - sim_p + clamp(|sim_p - sim_n|.detach(), min, max))``) gives the
ordinary gradient (-1, +1) in the ambiguous region. The case expansion of Eq. 3 / Eq. 13 writes
the loss there as s_p - s_n + gamma_min, and Eq. 14 and the text claim the *inverted* gradient
(+1, -1) ("negatives are pulled closer to the anchor while positives are pushed apart"). Both
are offered:

- ``variant="max"`` (default): the max formula. The published numbers come from the released
  code, which computes this.
- ``variant="paper"``: the case expansion, l = gap + gamma_min in the ambiguous region (the
  inverted gradient of Eq. 14). It is discontinuous at gap = gamma_min (it drops from
  2 gamma_min to 0); at gap = 0 both variants equal gamma_min.

Reduction over triplets (``reduction`` of the pool form). PRIME's Eq. 1, which Eq. 3/13 and
Eq. 5 inherit, *sums* over the batch's queries and over each query's (positive, negative)
pairs:

    L_T = Σ_{i=1}^{B} Σ_{j ∈ P_i, k ∈ N_i} l(s_ij, s_ik)                        (Eq. 1)

- ``reduction="sum"`` (default, the paper): that sum. A non-violating triplet adds exactly 0,
  so adding easy negatives to a pool leaves the loss unchanged.
- ``reduction="softmax"`` (the released ``TripletMarginLossOHNM``): per anchor and positive,
  keep the ``top_negatives`` (100) hardest negatives by s_n, weight each *violating* one by
  softmax_n(s_n / tau) over the violating ones (tau = ``negative_temperature`` = 0.1; the
  weights are not detached), sum over negatives, then average over the anchor's positives and
  over anchors.
- ``reduction="mean"`` (xmcbench's earlier choice, in neither): per row the uniform mean over
  all its pairs, non-violating ones included, then the mean over rows. It divides the triplet
  gradient by the number of pool negatives (~6.4K on LF-AmazonTitles-1.3M), which shrinks the
  triplet terms against the regulariser λR as training makes most pairs easy.

Two forms:
- ``dynamic_margin_triplet_loss(s_pos, s_neg, ...)``: explicit triplets of any broadcastable
  shapes, averaged over the triplets given; with re-weighting, the softmax runs over the last
  dimension (the negatives), e.g. s_pos (B, 1) against s_neg (B, N) as in the released code
  (one sampled positive, the top-N hardest negatives).
- ``dynamic_margin_triplet_pool_loss(scores, targets, ...)``: every (positive, negative) pair of
  each row of a (B, P) pool, reduced as ``reduction`` says.

PRIME's full objective (Eq. 5) is L(h_q, z_l) + L(h_q, h_l) + L(h_l, h_q) + lambda R: this loss
on query-to-prototype, query-to-label and (transposed) label-to-query similarities, plus the
regulariser in ``prime_regularizer.py``. Table 10: gamma_min = 0.1, gamma_max = 0.3.

Relation to siblings: with gamma_min = gamma_max = gamma, the "max" variant is exactly
``triplet_margin_loss`` with margin gamma.

Example:
    >>> s_p = torch.tensor([0.9, 0.55, 0.2]); s_n = torch.tensor([0.5, 0.5, 0.6])
    >>> loss = dynamic_margin_triplet_loss(s_p, s_n, 0.1, 0.3)     # easy, ambiguous, hard triplets
"""

from __future__ import annotations

import torch

from xmcbench.losses.common import LossInputError, check_scores_targets, mean_over_rows
from xmcbench.losses.triplet import gather_positives

__all__ = ["dynamic_margin_triplet_loss", "dynamic_margin_triplet_pool_loss", "dynamic_margin_triplet_terms"]

GAMMA_MIN = 0.1  # PRIME Table 10
GAMMA_MAX = 0.3  # PRIME Table 10
VARIANTS = ("max", "paper")
REDUCTIONS = ("sum", "softmax", "mean")


def _check(gamma_min: float, gamma_max: float, variant: str, negative_temperature: float | None) -> None:
    if not 0 <= gamma_min <= gamma_max:
        raise LossInputError(f"dynamic margin needs 0 <= gamma_min <= gamma_max, got {gamma_min}, {gamma_max}")
    if variant not in VARIANTS:
        raise LossInputError(f"unknown dynamic-margin variant {variant!r}; choose 'max' (released code) or 'paper'")
    if negative_temperature is not None and not negative_temperature > 0:
        raise LossInputError(f"negative_temperature must be > 0 or None, got {negative_temperature}")


def dynamic_margin_triplet_terms(
    s_pos: torch.Tensor,
    s_neg: torch.Tensor,
    gamma_min: float = GAMMA_MIN,
    gamma_max: float = GAMMA_MAX,
    variant: str = "max",
) -> torch.Tensor:
    """Elementwise loss of each (broadcast) triplet, no reduction (see module docstring)."""
    _check(gamma_min, gamma_max, variant, None)
    gap = s_pos - s_neg
    margin = gap.detach().abs().clamp(gamma_min, gamma_max)
    losses = torch.relu(margin - gap)
    if variant == "paper":
        ambiguous = (gap > 0) & (gap < gamma_min)
        losses = torch.where(ambiguous, gap + gamma_min, losses)
    return losses


def _negative_weights(s_neg: torch.Tensor, active: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax over the last dim of s_neg / temperature restricted to ``active``; 0 elsewhere.

    A slice with no active entry gets all-zero weights (the released code's -100 fill gives
    uniform weights on zero losses there, i.e. the same zero contribution).
    """
    any_active = active.any(dim=-1, keepdim=True)
    logits = (s_neg / temperature).masked_fill(~active, float("-inf"))
    logits = torch.where(any_active, logits, torch.zeros_like(logits))
    return torch.softmax(logits, dim=-1) * active


def dynamic_margin_triplet_loss(
    s_pos: torch.Tensor,
    s_neg: torch.Tensor,
    gamma_min: float = GAMMA_MIN,
    gamma_max: float = GAMMA_MAX,
    variant: str = "max",
    negative_temperature: float | None = None,
) -> torch.Tensor:
    """Clipped dynamic-margin triplet loss (PRIME Eq. 13), averaged over the triplets given.

    Args:
        s_pos: positive similarities, broadcastable with ``s_neg``.
        s_neg: negative similarities; with re-weighting its last dim indexes the negatives.
        gamma_min, gamma_max: clip range of the margin (0.1, 0.3 in PRIME Table 10).
        variant: "max" (defining formula, released code; default) or "paper" (Eq. 13 case
            expansion / Eq. 14, inverted gradient in the ambiguous region).
        negative_temperature: None for the plain mean; tau (0.1 in the released code) to weight
            violating negatives by softmax(s_n / tau) over the last dim, summed over negatives
            and averaged over the remaining dims.

    Returns:
        Scalar loss; 0 for empty input.
    """
    _check(gamma_min, gamma_max, variant, negative_temperature)
    s_pos, s_neg = torch.broadcast_tensors(s_pos, s_neg)
    losses = dynamic_margin_triplet_terms(s_pos, s_neg, gamma_min, gamma_max, variant)
    if losses.numel() == 0:
        return losses.sum()
    if negative_temperature is None:
        return losses.mean()
    if losses.dim() == 0:
        return losses  # a single triplet: its weight is 1 (or it is 0)
    weights = _negative_weights(s_neg, losses.detach() > 0, negative_temperature)
    return (weights * losses).sum(dim=-1).mean()


def dynamic_margin_triplet_pool_loss(
    scores: torch.Tensor,
    targets: torch.Tensor,
    gamma_min: float = GAMMA_MIN,
    gamma_max: float = GAMMA_MAX,
    variant: str = "max",
    negative_temperature: float | None = 0.1,
    reduction: str = "sum",
    top_negatives: int | None = 100,
) -> torch.Tensor:
    """Dynamic-margin triplet loss over every (positive, negative) pair of each row of a pool.

    Args:
        scores: (B, P) query x pool similarities (cosine in PRIME). For the label-to-query
            term of Eq. 5 pass the transposed matrices.
        targets: (B, P) bool positives; every other column is a negative of the row (a -inf
            score marks a padding column, which is never violating).
        gamma_min, gamma_max, variant: as in ``dynamic_margin_triplet_loss``.
        negative_temperature: tau of the "softmax" reduction (released code: 0.1).
        reduction: "sum" (Eq. 1, default), "softmax" (released code) or "mean" (see the
            module docstring).
        top_negatives: "softmax" only: the hardest negatives kept per row (released code: 100;
            None keeps all).

    Returns:
        Scalar: "sum": the sum over all (row, positive, negative) triplets; "softmax": per row
        the mean over its positives of the weighted sum over its kept negatives, then the mean
        over rows with a pair; "mean": per row the mean over its pairs, then the mean over rows
        with a pair. Memory O(B * K * P), K = max positives/row, in row chunks of at most 2^25
        cells whose intermediates are recomputed in backward (the same value and gradient).
    """
    check_scores_targets(scores, targets, "dynamic_margin_triplet_pool_loss")
    if reduction not in REDUCTIONS:
        raise LossInputError(f"unknown triplet reduction {reduction!r}; choose one of {', '.join(REDUCTIONS)}")
    if reduction == "softmax" and negative_temperature is None:
        raise LossInputError("the softmax reduction needs a negative_temperature (released code: 0.1)")
    if top_negatives is not None and top_negatives < 1:
        raise LossInputError(f"top_negatives must be >= 1 or None, got {top_negatives}")
    _check(gamma_min, gamma_max, variant, negative_temperature)
    if scores.numel() == 0:
        return scores.sum()
    args = (gamma_min, gamma_max, variant, negative_temperature, reduction, top_negatives)
    n_rows, width = scores.shape
    k = int(targets.sum(dim=1).max())  # positives of the fullest row: the K of (B, K, P)
    rows = max(1, _TRIPLET_BUDGET // max(k * width, 1))
    if rows >= n_rows:
        row_loss, row_count = _pool_rows(scores, targets, *args)
    else:
        # Every row's terms are independent: rows in chunks, each chunk's (rows, K, P) tensors
        # recomputed in backward instead of kept (a 3200-query PRIME batch whose popular labels have
        # hundreds of positive queries needs tens of GB at once otherwise).
        from torch.utils.checkpoint import checkpoint

        parts = [
            checkpoint(_pool_rows, scores[i : i + rows], targets[i : i + rows], *args, use_reentrant=False)
            if scores.requires_grad
            else _pool_rows(scores[i : i + rows], targets[i : i + rows], *args)
            for i in range(0, n_rows, rows)
        ]
        row_loss = torch.cat([part[0] for part in parts])
        row_count = torch.cat([part[1] for part in parts])
    if reduction == "sum":
        return row_loss.sum()
    return mean_over_rows(row_loss, row_count)


_TRIPLET_BUDGET = 1 << 25  # (row, positive, negative) cells per chunk: 128 MB per float32 tensor


def _pool_rows(scores, targets, gamma_min, gamma_max, variant, negative_temperature, reduction, top_negatives):
    """Per-row loss and count of ``dynamic_margin_triplet_pool_loss`` over the (B, P) rows given:
    (B,) sums of the row's triplet terms ("sum", "mean") or of its anchors' weighted sums
    ("softmax"), and (B,) the count each row's mean divides by."""
    pos, pos_valid = gather_positives(scores, targets)  # (B, K)
    neg_valid = ~targets & ~torch.isneginf(scores)  # (B, P) a -inf column is padding: no triplet
    valid = pos_valid[:, :, None] & neg_valid[:, None, :]  # (B, K, P)
    s_neg = scores.masked_fill(targets, 0.0)[:, None, :]  # (B, 1, P)
    losses = dynamic_margin_triplet_terms(pos[:, :, None], s_neg, gamma_min, gamma_max, variant)
    losses = losses.masked_fill(~valid, 0.0)  # (B, K, P)
    if reduction in ("sum", "mean"):
        return losses.sum(dim=(1, 2)), valid.sum(dim=(1, 2))
    if top_negatives is not None and top_negatives < scores.shape[1]:
        hardest = scores.detach().masked_fill(targets, float("-inf")).topk(top_negatives, dim=1).indices  # (B, k)
        kept = torch.zeros_like(targets).scatter_(1, hardest, True) & neg_valid  # (B, P)
        neg_valid = kept
        valid = valid & kept[:, None, :]
    weights = _negative_weights(s_neg.expand_as(losses), valid & (losses.detach() > 0), negative_temperature)
    per_anchor = (weights * losses).sum(dim=2)  # (B, K) weighted sum over negatives
    anchors = pos_valid & neg_valid.any(dim=1, keepdim=True)  # (B, K) positives that have negatives
    return per_anchor.sum(dim=1), anchors.sum(dim=1)
