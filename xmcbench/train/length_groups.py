"""Split a batch of texts into a few groups of similar token length, to pad less.

A batch of token ids is padded to its longest text, and a transformer spends as much work on a
padding token as on a real one: a training batch of 64 queries of 10 to 24 tokens, padded to 24,
spends about a third of the encoder's work on padding. The encoder treats each row on its own (the
attention mask keeps rows apart), so the rows can be encoded in several forward passes, each
padded only to its own longest row, and put back in order: the same embeddings up to float
rounding, and the same gradients (autograd flows through the concatenation and the indexing).

Each extra forward pass has a fixed cost, so splitting pays only when it saves more padding than
that. ``length_groups`` chooses the split: the rows sorted by length, cut into at most
``max_groups`` contiguous groups of at least ``min_rows`` rows each, minimising the padded tokens
(Σ rows × longest row, per group) plus ``group_cost`` tokens per group. It is exact (a dynamic
programme) and pure numpy, so it is tested and timed on its own.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GROUP_COST", "group_cost_for", "length_groups", "padded_tokens"]

# The fixed cost of one more group in a training step, in tokens. Measured on CPU, one thread,
# all-MiniLM-L6-v2, forward + backward of 32 to 128 rows cut into 1 or 4 groups of the same
# padded size: each extra group cost 45 to 90 tokens' worth of time (about 1.1 ms per token). In a
# training step the backward of every group produces a full gradient for every weight (the 30k x
# 384 word embeddings included) that is then added up: a cost set by the model's size, not the
# batch's. Without a graph an extra group cost nothing measurable, so this errs on the side of
# splitting less.
GROUP_COST = 64.0
# ... for all-MiniLM-L6-v2, whose weights number 2.10 times its non-embedding weights. A group's fixed
# cost is the gradient of every weight; a token's cost is the work of the non-embedding weights. So
# for another model the cost in tokens scales with that ratio (``group_cost_for``): 1.3 x less for
# BERT-base, 26 x more for the 1M-weight test BERT, whose forward passes are nearly all overhead.
MEASURED_WEIGHT_RATIO = 2.10


def group_cost_for(weights: int, embedding_weights: int) -> float:
    """GROUP_COST scaled to a model of ``weights`` weights, ``embedding_weights`` of them in its embeddings."""
    return GROUP_COST * weights / max(weights - embedding_weights, 1) / MEASURED_WEIGHT_RATIO


def padded_tokens(lengths: np.ndarray, groups: list[np.ndarray]) -> int:
    """Tokens the encoder processes when each group is padded to its longest row."""
    lengths = np.asarray(lengths).ravel()
    return int(sum(rows.size * int(lengths[rows].max()) for rows in groups if rows.size))


def length_groups(
    lengths: np.ndarray, *, min_rows: int, max_groups: int = 4, group_cost: float = GROUP_COST
) -> list[np.ndarray]:
    """Positions into ``lengths`` grouped by length: shortest group first, every position once.

    The groups are contiguous runs of the positions sorted by length (a stable sort), at most
    ``max_groups`` of them, each with at least ``min_rows`` rows, chosen to minimise
    Σ (rows × longest row) + ``group_cost`` per group. One group (all positions, sorted by
    length) when the batch has fewer than ``2 * min_rows`` rows, when every length is the same,
    or when no split saves more than it costs; ties go to fewer groups.

    Cost: a stable sort, then a dynamic programme over at most ``max_groups`` × (distinct lengths
    + 1) cut points, whatever the number of rows.
    """
    lengths = np.asarray(lengths).ravel()
    n = lengths.size
    order = np.argsort(lengths, kind="stable")  # (n,)
    min_rows = max(int(min_rows), 1)
    if max_groups < 2 or n < 2 * min_rows:
        return [order]
    s = lengths[order].astype(np.int64)  # (n,) ascending
    if s[0] == s[-1]:
        return [order]

    # A cut is the number of sorted rows before it. Some optimal split cuts only at the end of a
    # run of equal lengths, or min_rows before the next cut: moving a cut inside a run to the
    # right keeps the left group's longest row and moves rows out of a group with a longer one,
    # as far as the run ends or the right group gets down to min_rows. Chaining that from the
    # last cut (n) leftwards leaves these candidates; their number does not grow with n.
    run_ends = np.append(np.flatnonzero(s[1:] != s[:-1]) + 1, n)  # (r,)
    cuts = (run_ends[None, :] - min_rows * np.arange(max_groups)[:, None]).ravel()
    cuts = np.unique(np.append(cuts[(cuts >= min_rows) & (cuts <= n)], 0))  # (c,) ascending, 0 and n in it

    # cost[i, j]: one group of the sorted rows cuts[i]:cuts[j]; inf when it has too few rows.
    size = cuts[None, :] - cuts[:, None]  # (c, c)
    longest = np.concatenate([[0], s])[cuts]  # (c,) s[cut - 1], the longest row before each cut
    cost = np.where(size >= min_rows, size * longest[None, :] + float(group_cost), np.inf)  # (c, c)

    # best[j]: cheapest split of the rows before cuts[j] into g groups; came_from[g][j]: its last group's start.
    best = np.where(cuts == 0, 0.0, np.inf)  # (c,) zero groups
    came_from = []
    totals = []
    for _ in range(max_groups):
        total = best[:, None] + cost  # (c, c)
        came_from.append(np.argmin(total, axis=0))  # (c,)
        best = total[came_from[-1], np.arange(cuts.size)]  # (c,)
        totals.append(best[-1])
    n_groups = int(np.argmin(totals)) + 1  # argmin: the first of equal costs, so the fewest groups

    bounds = [cuts.size - 1]
    for g in range(n_groups - 1, -1, -1):
        bounds.append(int(came_from[g][bounds[-1]]))
    edges = cuts[bounds[::-1]]  # (n_groups + 1,) from 0 to n
    return [order[a:b] for a, b in zip(edges[:-1], edges[1:])]
