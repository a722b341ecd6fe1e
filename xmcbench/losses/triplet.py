"""Fixed-margin triplet loss as used by NGAME (Dahiya et al., WSDM 2023) and LMTX (Zhang et al., 2024, Eq. 1).

What it minimises. For an anchor (query) q, a positive label p and a negative label n scored by
cosine similarity s_qp, s_qn:

    l(q, p, n) = max(0, s_qn - s_qp + gamma)

i.e. every negative must score at least gamma below the positive; triplets already separated
by gamma contribute nothing. LMTX (Eq. 1) sums this over the hard negatives of the mini-batch
for the document's pseudo-positive, with gamma = 0.3; here the terms are *averaged* so the
value does not depend on how many triplets a batch holds.

Two forms:
- ``triplet_margin_loss(s_pos, s_neg, margin)``: explicit triplets, any broadcastable shapes
  (e.g. (B, 1) against (B, N)); the mean over all broadcast triplets.
- ``triplet_pool_loss(scores, targets, margin)``: a (B, P) query x pool matrix; every
  (positive, negative) pair of a row is a triplet; per row the mean over its pairs, then the
  mean over rows that have at least one pair. Memory is O(B * K * P), K the largest number of
  positives in a row.

Relation to siblings: ``dynamic_margin_triplet_loss`` (PRIME) replaces the fixed gamma with a
clipped, detached |s_qp - s_qn|. Gradient w.r.t. (s_qp, s_qn) is (-1, +1) for violating
triplets and (0, 0) otherwise.

Example:
    >>> s = torch.randn(8, 20).tanh()
    >>> y = torch.zeros(8, 20, dtype=torch.bool); y[torch.arange(8), torch.arange(8)] = True
    >>> loss = triplet_pool_loss(s, y, margin=0.3)
"""

from __future__ import annotations

import torch

from xmcbench.losses.common import LossInputError, check_scores_targets, mean_over_rows

__all__ = ["gather_positives", "triplet_margin_loss", "triplet_pool_loss"]

DEFAULT_MARGIN = 0.3  # LMTX gamma (and NGAME's default)


def triplet_margin_loss(s_pos: torch.Tensor, s_neg: torch.Tensor, margin: float = DEFAULT_MARGIN) -> torch.Tensor:
    """mean of max(0, s_neg - s_pos + margin) over the (broadcast) triplets given; 0 if none."""
    _check_margin(margin)
    s_pos, s_neg = torch.broadcast_tensors(s_pos, s_neg)
    losses = torch.relu(s_neg - s_pos + margin)
    if losses.numel() == 0:
        return losses.sum()
    return losses.mean()


def gather_positives(scores: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pack each row's positive scores: (B, K) scores and (B, K) validity, K = max positives.

    Padding slots hold 0.0 and are False in the validity mask. Used by the pool forms of the
    triplet losses to build (B, K, P) triplet grids without a Python loop.
    """
    k = int(targets.sum(dim=1).max()) if targets.numel() else 0
    order = torch.argsort(targets.to(torch.int8), dim=1, descending=True, stable=True)[:, :k]  # (B, K)
    valid = targets.gather(1, order)
    pos = scores.gather(1, order).masked_fill(~valid, 0.0)
    return pos, valid


def triplet_pool_loss(scores: torch.Tensor, targets: torch.Tensor, margin: float = DEFAULT_MARGIN) -> torch.Tensor:
    """Fixed-margin triplet loss over every (positive, negative) pair of each row of a pool.

    Args:
        scores: (B, P) query x pool-label similarities (cosine for NGAME/LMTX).
        targets: (B, P) bool; True marks the row's positives, every other column is a negative
            (a -inf score marks a padding column, which never violates the margin).
        margin: gamma (0.3 in LMTX).

    Returns:
        Scalar: per row the mean over its pairs, then the mean over rows with >= 1 pair.
    """
    check_scores_targets(scores, targets, "triplet_pool_loss")
    _check_margin(margin)
    if scores.numel() == 0:
        return scores.sum()
    pos, pos_valid = gather_positives(scores, targets)  # (B, K)
    neg_valid = ~targets & ~torch.isneginf(scores)  # (B, P) a -inf column is padding: no triplet
    valid = pos_valid[:, :, None] & neg_valid[:, None, :]  # (B, K, P)
    s_neg = scores.masked_fill(targets, 0.0)[:, None, :]  # (B, 1, P) positives never act as negatives
    losses = torch.relu(s_neg - pos[:, :, None] + margin).masked_fill(~valid, 0.0)  # (B, K, P)
    return mean_over_rows(losses.sum(dim=(1, 2)), valid.sum(dim=(1, 2)))


def _check_margin(margin: float) -> None:
    if margin < 0:
        raise LossInputError(f"triplet margin must be >= 0, got {margin}")
