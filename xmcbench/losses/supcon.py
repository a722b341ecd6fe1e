"""MACLR's in-batch contrastive losses: ICT contrastive (Eq. 1) and cluster SupCon (Eq. 2).

Xiong et al., "Extreme Zero-Shot Learning for Extreme Text Classification", NAACL 2022.

What they minimise. A batch holds N pseudo pairs (x̂_i, ŷ_i) (context, title) and scores
s_ij = E(x̂_i) · E(ŷ_j) / τ of every context against every title of the batch:

    Eq. 1 (ICT):      L = - Σ_i log( e^{s_ii} / Σ_{j=1..N} e^{s_ij} )
    Eq. 2 (cluster):  L = Σ_i -1/|P(i)| Σ_{p ∈ P(i)} log( e^{s_ip} / Σ_{j=1..N} e^{s_ij} ),
                      P(i) = { p : C(x̂_i) = C(x̂_p) }  (i itself is always in P(i))

With every instance its own cluster, P(i) = {i} and Eq. 2 *is* Eq. 1: MACLR's second half of
Stage I, and its few-shot fine-tuning, are this function with ``clusters = arange(N)``.
Stage II reuses Eq. 2 with "cluster" = the pseudo pair's label: two rows of the batch that
share a pseudo label are positives of each other.

Reduction. The paper sums over the N rows; here the default is the mean (``reduction="mean"``),
which only rescales the gradient by 1/N (equivalently the learning rate) and keeps the loss
comparable across batch sizes. ``reduction="sum"`` gives the printed equation.

Temperature. The paper writes raw inner products (no τ) of un-normalised 512-d CLS projections;
it does not report a temperature or normalisation ("not reported"). τ = 1 reproduces the
printed equation; a recipe that L2-normalises embeddings needs τ ≈ 0.05 to learn.

Relation to siblings: Eq. 2 is ``infonce_loss`` (PAL-N, DEXML Eq. 4) with the targets built from
cluster ids over an N × N in-batch matrix; ``label_regularisation_loss`` is MACLR's Eq. 3.

Example:
    >>> q, t = torch.randn(8, 16), torch.randn(8, 16)
    >>> ict = ict_contrastive_loss(q @ t.T)
    >>> sup = supcon_loss(q @ t.T, torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]))
"""

from __future__ import annotations

from typing import Literal

import torch

from xmcbench.losses.common import LossInputError, upcast

__all__ = ["cluster_targets", "ict_contrastive_loss", "supcon_loss", "supcon_loss_from_targets"]


def cluster_targets(clusters: torch.Tensor) -> torch.Tensor:
    """(N,) cluster ids -> (N, N) bool, True where rows i and p share a cluster (P(i) of Eq. 2)."""
    if clusters.dim() != 1:
        raise LossInputError(f"supcon_loss: clusters must be 1-D (N,), got shape {tuple(clusters.shape)}")
    return clusters[:, None] == clusters[None, :]


def supcon_loss(
    scores: torch.Tensor, clusters: torch.Tensor, reduction: Literal["mean", "sum"] = "mean"
) -> torch.Tensor:
    """MACLR Eq. 2: supervised contrastive loss of contexts against titles under a clustering.

    Args:
        scores: (N, N) s_ij = E(x̂_i)·E(ŷ_j) (already divided by any temperature); row i is
            context i, column j title j.
        clusters: (N,) integer cluster id of each pair; pairs in one cluster are positives.
        reduction: "mean" over rows (default) or "sum" (the printed equation).

    Returns:
        Scalar loss.
    """
    if clusters.shape[0] != scores.shape[0]:
        raise LossInputError(f"supcon_loss: {clusters.shape[0]} cluster ids for {scores.shape[0]} rows")
    return supcon_loss_from_targets(scores, cluster_targets(clusters), reduction)


def supcon_loss_from_targets(
    scores: torch.Tensor, positives: torch.Tensor, reduction: Literal["mean", "sum"] = "mean"
) -> torch.Tensor:
    """Eq. 2 with P(i) given directly as a bool (N, N) mask (row i's positive columns).

    Stage II's pseudo pairs and few-shot pairs use this form: column p is a positive of row i
    when pair p's label is one of instance i's (pseudo) labels. Rows need at least one positive.
    """
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2 or scores.shape[0] != scores.shape[1]:
        raise LossInputError(
            f"supcon_loss: scores must be a square (N, N) tensor, got {getattr(scores, 'shape', None)}"
        )
    if not scores.is_floating_point():
        raise LossInputError(f"supcon_loss: scores must be floating point, got {scores.dtype}")
    if positives.shape != scores.shape or positives.dtype != torch.bool:
        raise LossInputError(f"supcon_loss: positives must be a bool tensor of shape {tuple(scores.shape)}")
    if reduction not in ("mean", "sum"):
        raise LossInputError(f"supcon_loss: reduction must be 'mean' or 'sum', got {reduction!r}")
    log_p = torch.log_softmax(upcast(scores), dim=1)  # (N, N) log e^{s_ij} / Σ_j e^{s_ij}
    count = positives.sum(dim=1).clamp_min(1).to(log_p.dtype)  # (N,) |P(i)|
    row = -(log_p.masked_fill(~positives, 0.0).sum(dim=1)) / count  # (N,)
    return row.mean() if reduction == "mean" else row.sum()


def ict_contrastive_loss(scores: torch.Tensor, reduction: Literal["mean", "sum"] = "mean") -> torch.Tensor:
    """MACLR Eq. 1: each context's own title is its only positive among the batch's titles.

    Args:
        scores: (N, N) context × title scores; the positive of row i is column i.
        reduction: "mean" over rows (default) or "sum" (the printed equation).
    """
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2:
        raise LossInputError("ict_contrastive_loss: scores must be a square (N, N) tensor")
    return supcon_loss(scores, torch.arange(scores.shape[0], device=scores.device), reduction)
