"""Balanced hierarchical 2-means: split N embeddings into 2^k clusters whose sizes differ by ≤ 1.

NGAME (Dahiya et al., WSDM 2023) builds its negative-mining-aware batches from these clusters
(similar queries land in one batch, so in-batch negatives are hard), and DEXA/PRIME share free
vectors across clusters of labels made the same way. One split of a group of m points:

1. L2-normalise the points; pick two distinct random points as the two centroids.
2. Score every point by the difference of its similarities to the two centroids,
   s_i = <x_i, c_1> - <x_i, c_2>, and give the ceil(m/2) highest-scoring points to child 1 and
   the rest to child 2 (equal halves, so the tree stays balanced).
3. Recompute each centroid as the normalised mean of its half. The objective is the mean
   similarity of each point to its own centroid, which with c = S/|S| (S the sum of the half)
   is simply (|S_1| + |S_2|) / m.
4. Repeat 2-3 until the objective gains less than ``tol`` (1e-4) or ``max_iter`` is reached;
   the last assignment is the split.

The recursion is run one *level* at a time: all groups of a level are split together with
batched tensor ops (``bmm`` over a ``(groups, size, d)`` view), so 2M x 384 embeddings take
log2(n_clusters) batched passes instead of millions of Python calls. Sizes within a level
differ by at most one, so a level is at most two equal-size blocks, each a zero-copy view of
the embeddings once they are permuted into group order.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from xmcbench.errors import XmcbenchError

__all__ = ["balanced_kmeans", "n_clusters_for_size"]


def n_clusters_for_size(n_points: int, cluster_size: int) -> int:
    """The smallest power of two whose clusters hold at most ``cluster_size`` points (capped at n)."""
    if cluster_size < 1:
        raise XmcbenchError(f"cluster_size must be >= 1; got {cluster_size}")
    if n_points < 1:
        raise XmcbenchError("cannot cluster an empty set of embeddings")
    n_clusters = 2 ** max(0, math.ceil(math.log2(n_points / cluster_size)))
    largest = 2 ** int(math.floor(math.log2(n_points)))  # every cluster needs at least one point
    return int(min(n_clusters, largest))


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _normalised_copy(emb: np.ndarray | torch.Tensor, device: torch.device, chunk: int = 1 << 16) -> torch.Tensor:
    """L2-normalised float32 copy of ``emb`` on ``device``, filled in chunks (memmaps, fp16, GPU)."""
    n, d = emb.shape
    out = torch.empty((n, d), dtype=torch.float32, device=device)
    for start in range(0, n, chunk):
        part = emb[start : start + chunk]
        if not isinstance(part, torch.Tensor):
            part = torch.from_numpy(np.array(part, dtype=np.float32))  # a copy: memmaps may be read-only
        out[start : start + chunk] = torch.nn.functional.normalize(part.to(device=device, dtype=torch.float32), dim=-1)
    return out


def _split_block(x: torch.Tensor, gen: torch.Generator, tol: float, max_iter: int) -> tuple[torch.Tensor, int]:
    """2-means of each group of a ``(G, m, d)`` block -> per-group positions, child-1 half first.

    Returns ``order`` (G, m): positions within each group sorted by score, the first
    ``ceil(m/2)`` of them forming child 1; and the number of iterations run.
    """
    g, m, _ = x.shape
    n_left = m - m // 2
    # Two distinct seeds per group, drawn on the CPU generator so every device gives the same.
    first = torch.randint(0, m, (g,), generator=gen)
    second = (first + torch.randint(1, m, (g,), generator=gen)) % m
    first, second = first.to(x.device), second.to(x.device)
    rows = torch.arange(g, device=x.device)
    centroids = torch.stack([x[rows, first], x[rows, second]], dim=1)  # (G, 2, d)
    centroids = torch.nn.functional.normalize(centroids, dim=-1)

    total = x.sum(dim=1)  # (G, d): the right half's sum is total - left, saving half the work
    order = torch.empty((g, m), dtype=torch.long, device=x.device)
    best = torch.full((g,), -math.inf, dtype=torch.float64, device=x.device)
    active = torch.ones(g, dtype=torch.bool, device=x.device)
    iterations = 0
    for iterations in range(1, max_iter + 1):
        diff = (centroids[:, 0] - centroids[:, 1]).unsqueeze(-1)  # (G, d, 1)
        score = torch.bmm(x, diff).squeeze(-1)  # (G, m)
        new_order = torch.sort(score, dim=1, descending=True, stable=True).indices  # (G, m)
        # Groups that converged keep the assignment they converged with.
        order = torch.where(active.unsqueeze(1), new_order, order)
        left = torch.zeros((g, 1, m), dtype=x.dtype, device=x.device)  # (G, 1, m) indicator of child 1
        left[:, 0].scatter_(1, order[:, :n_left], 1.0)
        left_sum = torch.bmm(left, x).squeeze(1)  # (G, d)
        sums = torch.stack([left_sum, total - left_sum], dim=1)  # (G, 2, d)
        centroids = torch.nn.functional.normalize(sums, dim=-1)
        objective = sums.norm(dim=-1).sum(-1).double() / m  # mean similarity to own centroid
        gain = objective - best
        best = torch.where(active, objective, best)
        active &= gain >= tol
        if not bool(active.any()):
            break
    return order, iterations


def balanced_kmeans(
    emb: np.ndarray | torch.Tensor,
    n_clusters: int | None = None,
    *,
    cluster_size: int | None = None,
    seed: int = 0,
    max_iter: int = 50,
    tol: float = 1e-4,
    device: str | torch.device | None = None,
) -> list[np.ndarray]:
    """Split the rows of ``emb`` (N, d) into ``n_clusters`` balanced clusters.

    Args:
        emb: (N, d) embeddings (any float dtype; normalised here, the caller's array is untouched).
        n_clusters: a power of two <= N. Give this or ``cluster_size``.
        cluster_size: the largest cluster wanted; the count is the smallest power of two that
            achieves it (``n_clusters_for_size``).
        seed: seeds the choice of the two initial centroids of every split.
        max_iter: most 2-means iterations per split (NGAME has no cap; it stops on the gain).
        tol: stop a split when the mean similarity to own centroid gains less than this.
        device: where the tensor work runs (default: CUDA when available, else CPU).

    Returns:
        ``n_clusters`` int64 arrays of row indices, each row in exactly one, sizes differing by
        at most one. The same inputs, seed and device give the same clusters.
    """
    if (n_clusters is None) == (cluster_size is None):
        raise XmcbenchError("balanced_kmeans needs exactly one of n_clusters and cluster_size")
    if emb.ndim != 2:
        raise XmcbenchError(f"balanced_kmeans needs (N, d) embeddings; got shape {tuple(emb.shape)}")
    n, _ = emb.shape
    if n < 1:
        raise XmcbenchError("cannot cluster an empty set of embeddings")
    if n_clusters is None:
        n_clusters = n_clusters_for_size(n, int(cluster_size))
    if n_clusters < 1 or n_clusters & (n_clusters - 1):
        raise XmcbenchError(f"n_clusters must be a power of two; got {n_clusters}")
    if n_clusters > n:
        raise XmcbenchError(f"cannot make {n_clusters} clusters of {n} embeddings: every cluster needs a point")
    if max_iter < 1:
        raise XmcbenchError(f"max_iter must be >= 1; got {max_iter}")

    device = torch.device(device) if device is not None else _default_device()
    x = _normalised_copy(emb, device)  # (N, d) float32
    ids = torch.arange(n, device=device)
    gen = torch.Generator().manual_seed(int(seed))

    # A level is at most two blocks of equal-size groups, bigger groups first: [(count, size)].
    blocks = [(1, n)]
    for level in range(int(math.log2(n_clusters))):
        pieces: dict[int, list[torch.Tensor]] = {}  # child size -> (G, size) positions into x
        offset = 0
        for count, size in blocks:
            block = x[offset : offset + count * size].view(count, size, -1)  # (G, m, d), no copy
            order, _ = _split_block(block, gen, tol, max_iter)
            start = offset + torch.arange(count, device=device).unsqueeze(1) * size  # (G, 1)
            positions = start + order  # (G, m) positions into x
            n_left = size - size // 2
            pieces.setdefault(n_left, []).append(positions[:, :n_left])
            pieces.setdefault(size - n_left, []).append(positions[:, n_left:])
            offset += count * size
        sizes = sorted(pieces, reverse=True)
        perm = torch.cat([torch.cat(pieces[s]).reshape(-1) for s in sizes])
        blocks = [(sum(p.shape[0] for p in pieces[s]), s) for s in sizes]
        ids = ids[perm]
        if level + 1 < int(math.log2(n_clusters)):
            x = x[perm]  # group order for the next level's views
    del x

    ids_np = ids.cpu().numpy()
    bounds = np.cumsum([size for count, size in blocks for _ in range(count)])[:-1]
    return np.split(ids_np, bounds)
