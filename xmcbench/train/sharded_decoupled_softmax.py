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

Memory. The loss never holds a (B, L_r) float matrix whole: the scores are computed in blocks of
labels, in the forward pass for an online log-sum-exp of the negatives and again in the backward
pass, where each block's gradient is formed and multiplied straight into the query and label
gradients. With g_ij = dℓ/ds_ij, a_ip = 1 / (|R| c_i) on the counted positives (c_i of them in
row i, |R| rows with one) and σ_ip = sigmoid(N_i − s_ip), N_i = log Σ_{n ∉ P_i} e^{s_in}:

    g_ip = −a_ip σ_ip (counted positives),  g_in = W_i e^{s_in − N_i} (negatives),
    W_i = Σ_p a_ip σ_ip (summed over every rank's positives: one all-reduce of B numbers),

and 0 at uncounted positives. Autograd through the plain expression kept about a dozen float32
(B, L_r) tensors alive at once (20 GB of a 44 GB step on an H200 at 4096 x 100k labels); this
keeps one (B, block) score block at a time (exponentiated in place), the positive cells, and the
(L_r, d) label gradient, for one more (B, L_r, d) matmul (the scores are recomputed once). The
targets may come as a sparse COO tensor, so that no (B, L_r) tensor of any kind is needed.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from xmcbench.errors import XmcbenchError
from xmcbench.train.distributed import all_gather_with_grad, all_reduce_sum, is_distributed

BLOCK_CELLS = 1 << 24  # scores per label block (B x block): 64 MB in float32
_COUNTED_ERROR = "counted_shard must have the shape of targets_shard and mark only its positives"


def sharded_decoupled_softmax_loss(
    q_local: torch.Tensor,
    label_emb_shard: torch.Tensor,
    targets_shard: torch.Tensor,
    temperature: float = 1.0,
    counted_shard: torch.Tensor | None = None,
    block: int | None = None,
) -> torch.Tensor:
    """Decoupled softmax loss of the global batch against all labels, labels sharded over ranks.

    Args:
        q_local: (b_r, d) this rank's query embeddings (ranks may hold different b_r).
        label_emb_shard: (L_r, d) embeddings of this rank's labels (see ``shard_range``).
        targets_shard: (B, L_r) bool, row i of the GLOBAL batch (queries in rank order) vs this
            rank's labels: True where the label is a positive of the query. Dense, or a sparse
            COO tensor whose stored non-zero entries are the positives: only the positive cells
            are read, so a sparse mask saves the dense one's byte a cell (1.3 GB a GPU at 8192
            queries x 163k labels).
        temperature: τ; scores are <q, z> / τ.
        counted_shard: optional (B, L_r) bool subset of ``targets_shard`` (dense or sparse COO):
            the positives that contribute a term (default: all). DEXML's released code draws one positive per row
            per step (``xmcbench.losses.sample_one_positive`` on the global targets, same
            generator state on every rank, then sliced); every positive still stays out of the
            denominator, and rows average over their counted positives.
        block: labels per score block (default: ``BLOCK_CELLS`` scores per block); any value
            gives the same loss and gradients up to float rounding.

    Returns:
        0-d tensor (float32, or float64 for float64 inputs), identical on every rank: the loss
        over all B queries and all labels. Zero (with zero gradients) when no row has a positive.
    """
    if not temperature > 0:
        raise XmcbenchError(f"temperature must be > 0, got {temperature}")
    if block is not None and block < 1:
        raise XmcbenchError(f"block must be >= 1 label, got {block}")
    q_all = all_gather_with_grad(q_local)  # (B, d)
    if targets_shard.shape != (q_all.shape[0], label_emb_shard.shape[0]):
        raise XmcbenchError(
            f"targets_shard has shape {tuple(targets_shard.shape)} but the global batch has "
            f"{q_all.shape[0]} queries and this rank has {label_emb_shard.shape[0]} labels"
        )
    if block is None:
        block = max(1, BLOCK_CELLS // max(1, q_all.shape[0]))

    # The positive cells, ordered by label so that each block's are one slice. (Only the cells
    # are used: reductions of a (B, L_r) bool matrix along its rows would widen it to int64 on
    # the CPU, 8 bytes a cell.)
    n_cols = label_emb_shard.shape[0]
    keys = _cell_keys(targets_shard, n_cols).to(q_all.device)  # (P,) row * L_r + col, ascending
    is_counted = torch.ones_like(keys, dtype=torch.bool)  # (P,)
    if counted_shard is not None:
        if tuple(counted_shard.shape) != tuple(targets_shard.shape):
            raise XmcbenchError(_COUNTED_ERROR)
        counted_keys = _cell_keys(counted_shard, n_cols).to(q_all.device)  # (C,)
        is_counted = torch.isin(keys, counted_keys)
        if int(is_counted.sum()) != counted_keys.numel():
            raise XmcbenchError(_COUNTED_ERROR)  # a counted cell outside the positives
    rows, cols = keys // max(1, n_cols), keys % max(1, n_cols)  # (P,), (P,)
    order = torch.argsort(cols, stable=True)
    rows, cols, is_counted = rows[order], cols[order], is_counted[order]
    with torch.no_grad():
        n_counted = torch.bincount(rows[is_counted], minlength=q_all.shape[0]).to(torch.float64)  # (B,) |C_i|
        n_counted = all_reduce_sum(n_counted)  # over all shards
        n_rows = (n_counted > 0).sum().clamp_min(1)  # rows that count in the average
        weights = torch.where(is_counted, 1.0 / (n_counted[rows].clamp_min(1) * n_rows), 0.0)  # (P,) a_ip

    # Softmax terms in fp32 even under bf16 autocast: a sum over a million labels needs it.
    with torch.autocast(q_all.device.type, enabled=False):
        # float32 for half inputs, float64 kept (the tests' exact comparisons)
        dtype = torch.promote_types(torch.promote_types(q_all.dtype, label_emb_shard.dtype), torch.float32)
        local = _BlockwiseShare.apply(
            q_all.to(dtype), label_emb_shard.to(dtype), rows, cols, weights.to(dtype), float(temperature), int(block)
        )

    # Same value on every rank; the gradient stays this rank's share (module docstring).
    total = all_reduce_sum(local.detach())
    return local + (total - local).detach()


def _cell_keys(mask: torch.Tensor, n_cols: int) -> torch.Tensor:
    """(P,) ascending int64 keys ``row * n_cols + col`` of the True / non-zero cells of a (B, n_cols)
    dense or sparse COO mask. A sparse mask's repeated cells are summed, as ``to_dense()`` does;
    for bool values that is "any of them", so an uncoalesced bool mask is read as it is."""
    if mask.layout == torch.sparse_coo:
        if mask.sparse_dim() != 2 or mask.dense_dim() != 0:
            raise XmcbenchError(
                f"a sparse mask must have 2 sparse and no dense dimensions; got {mask.sparse_dim()} + {mask.dense_dim()}"
            )
        if mask.dtype != torch.bool:
            mask = mask.coalesce()  # +1 and -1 stored at one cell make no positive
        index, values = mask._indices(), mask._values()
        keep = values != 0
        return torch.unique(index[0][keep] * n_cols + index[1][keep])
    if mask.layout != torch.strided:
        raise XmcbenchError(f"masks must be dense or sparse COO tensors; got layout {mask.layout}")
    rows, cols = mask.to(torch.bool).nonzero(as_tuple=True)  # row-major: keys ascending
    return rows * n_cols + cols


class _BlockwiseShare(torch.autograd.Function):
    """This rank's share of the loss, Σ_p a_ip log(1 + e^{N_i − s_ip}) over its positive cells.

    Its backward gives the gradient of the FULL loss with respect to this rank's scores (the
    negatives' part needs W_i from every rank), which is the module's gradient convention.
    """

    @staticmethod
    def forward(ctx, q, labels, rows, cols, weights, temperature, block):
        # q (B, d), labels (L_r, d), rows/cols/weights (P,) positive cells sorted by column
        bounds = _block_bounds(cols, labels.shape[0], block)
        neg_lse, s_pos = _negative_logsumexp(q, labels, rows, cols, temperature, bounds)  # (B,) all shards', (P,)
        # −log(e^s / (e^s + e^N)) = log(1 + e^{N − s}); a row without negatives (N = −inf) gives 0
        # (logaddexp, not softplus: softplus returns its argument past 20, 2e-9 off in float64)
        gap = neg_lse[rows] - s_pos  # (P,)
        terms = torch.logaddexp(gap, torch.zeros_like(gap))  # (P,)
        ctx.save_for_backward(q, labels, rows, cols, weights, neg_lse, s_pos)
        ctx.temperature, ctx.bounds = temperature, bounds
        return (weights * terms).sum()

    @staticmethod
    def backward(ctx, grad):
        # autograd runs backward under the caller's autocast state: keep these sums in float32 too
        with torch.autocast(grad.device.type, enabled=False):
            return _BlockwiseShare._backward(ctx, grad)

    @staticmethod
    def _backward(ctx, grad):
        q, labels, rows, cols, weights, neg_lse, s_pos = ctx.saved_tensors
        tau = ctx.temperature
        pos_grad = weights * torch.sigmoid(neg_lse[rows] - s_pos)  # (P,) a_ip σ_ip = −g_ip
        row_weight = q.new_zeros(q.shape[0]).index_add_(0, rows, pos_grad)  # (B,) this shard's part of W_i
        if is_distributed():
            dist.all_reduce(row_weight, op=dist.ReduceOp.SUM)  # W_i over every rank's positives
        shift = torch.where(torch.isfinite(neg_lse), neg_lse, torch.zeros_like(neg_lse))  # (B,)
        q_grad = torch.zeros_like(q)  # (B, d)
        labels_grad = torch.empty_like(labels)  # (L_r, d)
        for start, stop, lo, hi in ctx.bounds:
            scores = torch.mm(q, labels[start:stop].T).div_(tau)  # (B, C)
            r, c = rows[lo:hi], cols[lo:hi] - start
            scores[r, c] = float("-inf")  # positives are no one's negatives
            g = torch.exp_(scores.sub_(shift[:, None])).mul_(row_weight[:, None])  # (B, C) g_in
            g[r, c] = -pos_grad[lo:hi]  # g_ip
            q_grad.addmm_(g, labels[start:stop])
            labels_grad[start:stop] = g.T @ q
        scale = grad / tau
        return q_grad.mul_(scale), labels_grad.mul_(scale), None, None, None, None, None


def _block_bounds(cols: torch.Tensor, n_labels: int, block: int) -> list[tuple[int, int, int, int]]:
    """(first label, one past the last, first positive, one past the last) of every label block."""
    starts = torch.arange(0, n_labels, block, device=cols.device)
    edges = torch.searchsorted(cols, torch.cat([starts, starts.new_tensor([n_labels])])).tolist()
    return [(s, min(s + block, n_labels), edges[i], edges[i + 1]) for i, s in enumerate(starts.tolist())]


def _negative_logsumexp(q, labels, rows, cols, temperature, bounds) -> tuple[torch.Tensor, torch.Tensor]:
    """N_i = log Σ_{n ∉ P_i} e^{s_in} over every rank's labels, block by block (−inf without
    negatives), and the scores s_ip of the positive cells, read off the same blocks.

    Online: a running maximum and a sum rescaled to it; across ranks the maxima are all-reduced
    (MAX) first, then the sums rescaled to the global maximum (SUM).
    """
    peak = q.new_full((q.shape[0],), float("-inf"))  # (B,)
    total = q.new_zeros(q.shape[0])  # (B,) Σ e^{s − peak}
    s_pos = q.new_empty(rows.shape[0])  # (P,)
    for start, stop, lo, hi in bounds:
        scores = torch.mm(q, labels[start:stop].T).div_(temperature)  # (B, C)
        s_pos[lo:hi] = scores[rows[lo:hi], cols[lo:hi] - start]
        scores[rows[lo:hi], cols[lo:hi] - start] = float("-inf")
        new_peak = torch.maximum(peak, scores.amax(dim=1))
        shift = torch.where(torch.isfinite(new_peak), new_peak, torch.zeros_like(new_peak))
        total = total * torch.exp(peak - shift) + torch.exp_(scores.sub_(shift[:, None])).sum(dim=1)
        peak = new_peak
    if is_distributed():
        global_peak = peak.clone()
        dist.all_reduce(global_peak, op=dist.ReduceOp.MAX)
        shift = torch.where(torch.isfinite(global_peak), global_peak, torch.zeros_like(global_peak))
        total = total * torch.exp(peak - shift)  # a shard without negatives in a row adds 0
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        peak = global_peak
    # A row with a negative has total >= e^0 at its maximum; one without has total 0 and N = −inf.
    neg_lse = torch.where(total > 0, peak + torch.log(total.clamp_min(torch.finfo(total.dtype).tiny)), peak)
    return neg_lse, s_pos
