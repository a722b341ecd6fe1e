"""DEXML's decoupled softmax over the whole label space, with labels sharded over ranks.

DEXML (Gupta et al., ICLR 2024), Eq. 5, for query i with positives P_i and scores s = <q, z>/τ:

    ℓ_i = −(1/|P_i|) Σ_{p ∈ P_i} log( e^{s_ip} / (e^{s_ip} + Σ_{n ∉ P_i} e^{s_in}) )

(other positives are left out of each positive's denominator), averaged over the rows that have at
least one positive. Appendix B.5 trains it on G GPUs: each rank embeds B/G queries and L/G labels,
all-gathers the query embeddings, scores all B queries against its label shard, and combines the
per-row negative sums with all-reduce. The negative log-sum-exp is combined stably: the maximum
negative score of each row is all-reduced first (MAX), then the shifted sums (SUM).

Every rank returns the same loss value, the full-label-space loss. Gradients follow the
convention of :mod:`xmcbench.train.distributed`: the loss's backward on rank r yields the
gradient of the full loss with respect to rank r's queries and label shard, so parameter
gradients are to be SUMMED over ranks (``all_reduce_gradients(params, "sum")``), or, under DDP,
which averages, the loss multiplied by the world size before ``backward()``.
In a single process it is the plain (unsharded) decoupled softmax loss.
"""

from __future__ import annotations

import torch

from xmcbench.errors import XmcbenchError
from xmcbench.train.distributed import all_gather_with_grad, all_reduce_max, all_reduce_sum


def sharded_decoupled_softmax_loss(
    q_local: torch.Tensor,
    label_emb_shard: torch.Tensor,
    targets_shard: torch.Tensor,
    temperature: float = 1.0,
    counted_shard: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decoupled softmax loss of the global batch against all labels, labels sharded over ranks.

    Args:
        q_local: (b_r, d) this rank's query embeddings (ranks may hold different b_r).
        label_emb_shard: (L_r, d) embeddings of this rank's labels (see ``shard_range``).
        targets_shard: (B, L_r) bool, row i of the GLOBAL batch (queries in rank order) vs this
            rank's labels: True where the label is a positive of the query.
        temperature: τ; scores are <q, z> / τ.
        counted_shard: optional (B, L_r) bool subset of ``targets_shard``: the positives that
            contribute a term (default: all). DEXML's released code draws one positive per row
            per step (``xmcbench.losses.sample_one_positive`` on the global targets, same
            generator state on every rank, then sliced); every positive still stays out of the
            denominator, and rows average over their counted positives.

    Returns:
        0-d fp32 tensor, identical on every rank: the loss over all B queries and all labels.
        Zero (with zero gradients) when no row has a positive.
    """
    if not temperature > 0:
        raise XmcbenchError(f"temperature must be > 0, got {temperature}")
    q_all = all_gather_with_grad(q_local)  # (B, d)
    if targets_shard.shape != (q_all.shape[0], label_emb_shard.shape[0]):
        raise XmcbenchError(
            f"targets_shard has shape {tuple(targets_shard.shape)} but the global batch has "
            f"{q_all.shape[0]} queries and this rank has {label_emb_shard.shape[0]} labels"
        )
    positive = targets_shard.to(device=q_all.device, dtype=torch.bool)  # (B, L_r)
    counted = positive
    if counted_shard is not None:
        counted = counted_shard.to(device=q_all.device, dtype=torch.bool)  # (B, L_r)
        if counted.shape != positive.shape or (counted & ~positive).any():
            raise XmcbenchError("counted_shard must have the shape of targets_shard and mark only its positives")
    # Softmax terms in fp32 even under bf16 autocast: a sum over a million labels needs it.
    with torch.autocast(q_all.device.type, enabled=False):
        local = _local_share(q_all.float(), label_emb_shard.float(), positive, counted, temperature)

    # Same value on every rank; the gradient stays this rank's share (module docstring).
    total = all_reduce_sum(local.detach())
    return local + (total - local).detach()


def _local_share(
    q_all: torch.Tensor, labels: torch.Tensor, positive: torch.Tensor, counted: torch.Tensor, temperature: float
) -> torch.Tensor:
    """This rank's share of the loss: the terms of the counted positives on its label shard."""
    scores = (q_all @ labels.T) / temperature  # (B, L_r)

    # 1. Stable log Σ_{n ∉ P_i} e^{s_in} over all shards: global max, then shifted sums.
    negative_scores = scores.masked_fill(positive, float("-inf"))  # (B, L_r)
    if scores.shape[1] > 0:
        local_max = negative_scores.max(dim=1).values  # (B,)
    else:  # more ranks than labels: this shard is empty
        local_max = scores.new_full((scores.shape[0],), float("-inf"))
    shift = all_reduce_max(local_max)  # (B,)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))  # rows without negatives
    shifted_sum = torch.exp(negative_scores - shift[:, None]).sum(dim=1)  # (B,)
    shifted_sum = all_reduce_sum(shifted_sum)  # (B,) Σ over every rank's negatives
    # A row whose labels are all positive has no negatives: log N_i = −inf, and each of its terms
    # is log(e^s / e^s) = 0. (The shifted sum is >= 1 whenever a negative exists, since the max
    # contributes e^0; the clamp only keeps the unused branch of torch.where free of log(0).)
    log_negatives = torch.where(
        shifted_sum.detach() > 0,
        shift + torch.log(shifted_sum.clamp_min(torch.finfo(scores.dtype).tiny)),
        torch.full_like(shift, float("-inf")),
    )  # (B,)

    # 2. −log(e^{s_ip} / (e^{s_ip} + N_i)) = logaddexp(s_ip, log N_i) − s_ip, only at the few
    # counted positives (no second (B, L_r) matrix).
    rows, cols = counted.nonzero(as_tuple=True)  # (P,), (P,)
    positive_scores = scores[rows, cols]  # (P,)
    terms = torch.logaddexp(positive_scores, log_negatives[rows]) - positive_scores  # (P,)
    row_sums = scores.new_zeros(scores.shape[0]).index_add(0, rows, terms)  # (B,)
    with torch.no_grad():
        n_counted = all_reduce_sum(counted.sum(dim=1).to(scores.dtype))  # (B,) |P_i| over all shards
        n_rows = (n_counted > 0).sum().clamp_min(1)  # rows that count in the average
    return (row_sums / n_counted.clamp_min(1)).sum() / n_rows
