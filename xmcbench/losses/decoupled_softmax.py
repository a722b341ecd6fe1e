"""DecoupledSoftmax loss of DEXML (Gupta et al., ICLR 2024, Eq. 5), with the pieces a sharded run needs.

What it minimises. For query i with positive set P_i and scores s_i (already divided by the
temperature tau), every positive p gets its own softmax against the row's negatives only:

    l_ip = -log( e^{s_ip} / (e^{s_ip} + sum_{n not in P_i} e^{s_in}) )
         = log(e^{s_ip} + e^{N_i}) - s_ip,        N_i = logsumexp_{n not in P_i} s_in

Other positives of the row never appear in the denominator ("decoupled"), so a confidently
predicted positive is not pushed down to make room for harder ones — the defect of SoftmaxCE /
InfoNCE (Eq. 3-4, see ``infonce.py``), whose optimum is sigma_ip = 1/|P_i|.

Reduction. Eq. 5 *sums* over the positives of a row. The authors' released code divides by the
number of positives, and samples ONE positive per row per step; both are offered here:

- default: the row loss is the mean of l_ip over its positives, then the mean over the rows
  that have at least one positive (rows without positives are dropped, not counted as 0);
- ``one_positive=True``: one positive per row is drawn uniformly with ``generator``; its term is
  the row loss. The denominator still excludes *all* of the row's positives, so the expectation
  over the draw equals the default loss exactly (each positive is drawn with prob 1/|P_i|).

Numerics. N_i is a masked logsumexp (-inf for a row without negatives, giving l_ip = 0, the
exact value of the equation); unused cells are zeroed before any arithmetic, so -inf padding
columns (non-targets scored -inf) simply drop out and no inf - inf appears, in the forward or
the backward pass. Half-precision inputs are computed in float32.

Sharding (DEXML Appendix B.5: labels split over ranks, queries all-gathered). N_i is the only
quantity that couples columns, and logsumexp combines across shards with logaddexp:
``N_i = logsumexp_g N_i^(g)``. So a rank computes ``negative_logsumexp`` on its columns,
all-reduces it (e.g. all-gather + logsumexp, differentiably), calls
``decoupled_softmax_terms(scores_g, targets_g, neg_lse=N)``, sums the terms and the positive
counts per row, all-reduces both, and finishes with ``common.mean_over_rows``.

Relation to siblings: ``infonce_loss`` / ``softmax_ce_loss`` keep other positives in the
denominator; ``psl_loss`` (UniDEC) is InfoNCE over the pool with the same 1/|P_i| averaging.

Example:
    >>> s = torch.tensor([[2.0, 1.0, -1.0], [0.5, 0.0, 3.0]])
    >>> y = torch.tensor([[True, True, False], [False, False, True]])
    >>> loss = decoupled_softmax_loss(s / 0.05, y)
"""

from __future__ import annotations

import torch

from xmcbench.losses.common import LossInputError, check_scores_targets, mean_over_rows, upcast

__all__ = [
    "decoupled_softmax_loss",
    "decoupled_softmax_terms",
    "negative_logsumexp",
    "sample_one_positive",
]


def negative_logsumexp(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-row log of the summed exponentiated negative scores, N_i = logsumexp_{n not in P_i} s_in.

    Args:
        scores: (B, P) floating scores (already divided by the temperature).
        targets: (B, P) bool, True where the column is a positive of the row.

    Returns:
        (B,) tensor (float32 for half inputs); -inf for a row without negatives. Partial values
        from column shards combine exactly with ``torch.logaddexp`` / ``torch.logsumexp``.
    """
    check_scores_targets(scores, targets, "negative_logsumexp")
    s = upcast(scores)
    masked = s.masked_fill(targets, float("-inf"))  # (B, P)
    # A row whose negatives are all -inf (none, or only padding) has N_i = -inf; logsumexp's own
    # backward would compute exp(-inf - (-inf)) = NaN there, so such rows go through zeros instead.
    if masked.shape[1]:
        empty = torch.isneginf(masked.amax(dim=1))  # (B,)
    else:
        empty = torch.ones(s.shape[0], dtype=torch.bool, device=s.device)
    safe = torch.where(empty[:, None], torch.zeros_like(masked), masked)
    lse = torch.logsumexp(safe, dim=1)
    return torch.where(empty, torch.full_like(lse, float("-inf")), lse)


def decoupled_softmax_terms(
    scores: torch.Tensor, targets: torch.Tensor, neg_lse: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-positive loss terms l_ip = log(e^{s_ip} + e^{N_i}) - s_ip; 0 at non-positive cells.

    Args:
        scores: (B, P) floating scores (already divided by the temperature).
        targets: (B, P) bool positives.
        neg_lse: optional (B,) N_i over *all* negatives of each row (from every shard); by
            default computed from these columns with ``negative_logsumexp``.

    Returns:
        (B, P) tensor of non-negative terms (float32 for half inputs).
    """
    check_scores_targets(scores, targets, "decoupled_softmax_terms")
    s = upcast(scores)
    if neg_lse is None:
        neg_lse = negative_logsumexp(s, targets)
    elif neg_lse.shape != s.shape[:1]:
        raise LossInputError(
            f"decoupled_softmax_terms: neg_lse must have shape ({s.shape[0]},), got {tuple(neg_lse.shape)}"
        )
    has_pos = targets.any(dim=1)
    # Rows without positives contribute nothing; keeping their N_i out avoids inf arithmetic there.
    n = torch.where(has_pos, neg_lse.to(s.dtype), torch.zeros_like(neg_lse, dtype=s.dtype))  # (B,)
    s_pos = s.masked_fill(~targets, 0.0)  # (B, P) non-positive cells never reach the log
    terms = torch.logaddexp(s_pos, n[:, None]) - s_pos
    return terms.masked_fill(~targets, 0.0)


def sample_one_positive(targets: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """A (B, P) bool mask with one uniformly drawn positive per row (all False for rows without any).

    The draw is the argmax of i.i.d. uniform keys over the row's positives, so it is uniform,
    needs no division, and is fully determined by ``generator`` (drawn on the generator's device,
    then moved to ``targets``' device).
    """
    if targets.dim() != 2 or targets.dtype != torch.bool:
        raise LossInputError("sample_one_positive: targets must be a 2-D bool tensor")
    if targets.shape[1] == 0:
        return targets.clone()
    device = generator.device if generator is not None else targets.device
    keys = torch.rand(targets.shape, generator=generator, device=device).to(targets.device)
    keys = keys.masked_fill(~targets, -1.0)
    chosen = torch.zeros_like(targets)
    chosen.scatter_(1, keys.argmax(dim=1, keepdim=True), True)
    return chosen & targets


def decoupled_softmax_loss(
    scores: torch.Tensor,
    targets: torch.Tensor,
    one_positive: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """DecoupledSoftmax loss (DEXML Eq. 5), averaged over each row's positives, then over rows.

    Args:
        scores: (B, P) similarities already divided by the temperature tau (DEXML Table 7:
            tau = 0.05 for EURLex-4K / LF-AmazonTitles-131K, 1 for the two large datasets).
        targets: (B, P) bool; True marks every pool column that is any positive of the row.
        one_positive: draw one positive per row (as the released code does) instead of
            averaging over all of them; unbiased for the default loss (see module docstring).
        generator: torch.Generator for the draw (only used with ``one_positive``).

    Returns:
        Scalar loss; 0 (with a graph) when no row has a positive.
    """
    check_scores_targets(scores, targets, "decoupled_softmax_loss")
    terms = decoupled_softmax_terms(scores, targets)  # (B, P)
    if one_positive:
        chosen = sample_one_positive(targets, generator)
        terms = terms.masked_fill(~chosen, 0.0)
        counts = chosen.sum(dim=1)
    else:
        counts = targets.sum(dim=1)
    return mean_over_rows(terms.sum(dim=1), counts)
