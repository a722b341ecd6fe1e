"""Multi-label SoftmaxCE and InfoNCE of DEXML (Gupta et al., ICLR 2024, Eq. 3 and Eq. 4).

What they minimise. For query i with positives P_i, every positive j is a separate softmax
cross-entropy term whose denominator holds *every* column, other positives included:

    SoftmaxCE (Eq. 3):  l_i = -sum_{j in P_i} log( e^{s_ij} / sum_{l in [L]} e^{s_il} )
    InfoNCE   (Eq. 4):  l_i = -sum_{j in P_i} log( e^{s_ij} / (e^{s_ij} + sum_{d in D^- \\ d_j} e^{s_id}) )

where D^- is the batch's label set (for in-batch negatives the union of the batch positives,
plus any hard negatives). D^- \\ d_j plus d_j itself is the whole pool, so InfoNCE is SoftmaxCE
over the pool instead of over all L labels; the paper notes that with D^- = all labels (4)
*is* (3). Given a score matrix the two compute the same number: ``softmax_ce_loss`` is meant
for a (B, L) matrix over the whole label space, ``infonce_loss`` for a (B, P) in-batch pool.

Why DEXML replaces them: the gradient w.r.t. positive l is (1 - |P_i| sigma_il) x_q, so the
optimum spreads probability 1/|P_i| over the positives and a confidently predicted positive
(sigma_il > 1/|P_i|) is pushed *down*. ``decoupled_softmax_loss`` drops other positives from
the denominator to remove this coupling.

Reduction. The paper sums over positives (PAL in the terms of Menon et al., 2019). By default
the sum is divided by |P_i| (PAL-N), the same normalisation as ``decoupled_softmax_loss``, so a
comparison of the two (DEXML Table 11-12) differs only in the denominator; pass
``normalize_positives=False`` for the plain sum of Eq. 3-4. Either way the result is then
averaged over the rows that have at least one positive.

Relation to siblings: ``psl_loss(reduction="mean")`` (UniDEC pick-some-labels) equals
``infonce_loss`` with the default normalisation — UniDEC's PSL is PAL-N InfoNCE over the in-batch
pool; PSL's default, the paper's sum over rows, is that times the number of rows with a positive.

Numerics: a log_softmax per row; rows without positives are zeroed before it (no NaN from a row
padded with -inf), and -inf non-target cells (padding) drop out. Half inputs run in float32.

Example:
    >>> s = torch.randn(8, 32) / 0.05
    >>> y = torch.rand(8, 32) < 0.1
    >>> pal_n = infonce_loss(s, y)
    >>> pal = softmax_ce_loss(s, y, normalize_positives=False)
"""

from __future__ import annotations

import torch

from xmcbench.losses.common import check_scores_targets, mean_over_rows, upcast

__all__ = ["infonce_loss", "softmax_ce_loss"]


def _multilabel_softmax_ce(
    scores: torch.Tensor, targets: torch.Tensor, normalize_positives: bool, name: str
) -> torch.Tensor:
    check_scores_targets(scores, targets, name)
    s = upcast(scores)
    has_pos = targets.any(dim=1)  # (B,)
    s = torch.where(has_pos[:, None], s, torch.zeros_like(s))  # rows without positives: inert
    log_p = torch.log_softmax(s, dim=1)  # (B, P)
    row_nll = (-log_p).masked_fill(~targets, 0.0).sum(dim=1)  # (B,) sum over the row's positives
    counts = targets.sum(dim=1) if normalize_positives else has_pos.long()
    return mean_over_rows(row_nll, counts)


def softmax_ce_loss(scores: torch.Tensor, targets: torch.Tensor, normalize_positives: bool = True) -> torch.Tensor:
    """Multi-label SoftmaxCE (DEXML Eq. 3): one softmax cross-entropy per positive, over all columns.

    Args:
        scores: (B, L) scores over the whole label space (already divided by the temperature).
        targets: (B, L) bool positives.
        normalize_positives: divide each row's sum by its number of positives (default, PAL-N);
            False gives the plain sum of Eq. 3 (PAL).

    Returns:
        Scalar: mean over the rows with at least one positive; 0 if there are none.
    """
    return _multilabel_softmax_ce(scores, targets, normalize_positives, "softmax_ce_loss")


def infonce_loss(scores: torch.Tensor, targets: torch.Tensor, normalize_positives: bool = True) -> torch.Tensor:
    """Multi-label InfoNCE (DEXML Eq. 4): softmax cross-entropy per positive over the label pool.

    Args:
        scores: (B, P) scores of each query against the pool D^- (in-batch positives and any
            hard negatives), already divided by the temperature.
        targets: (B, P) bool; True marks every pool column that is a positive of the row.
        normalize_positives: divide each row's sum by its number of positives (default, PAL-N);
            False gives the plain sum of Eq. 4 (PAL).

    Returns:
        Scalar: mean over the rows with at least one positive; 0 if there are none.
    """
    return _multilabel_softmax_ce(scores, targets, normalize_positives, "infonce_loss")
