"""Sample at most β positives per query from a CSR label matrix, uniformly or ∝ given weights.

UniDEC's pick-some-labels (PSL) draws ≤ β positives per query each step (all of them when the
query has ≤ β); DEXML draws one; PRIME draws them with probability proportional to the label's
inverse propensity (PRIME, Appendix J)::

    p_il = γ_l / Σ_{j ∈ P_i} γ_j

For more than one positive, draws are without replacement, each next draw ∝ the weights of the
labels still left (successive sampling; for β = 1 this is exactly p_il). It is vectorised over
the whole batch with exponential keys (Efraimidis & Spirakis, 2006): give every positive the key
E / w with E ~ Exp(1) and keep the β smallest keys of each row; with uniform weights the keys
are plain uniforms. Inverse propensities come from ``xmcbench.metrics.propensity.inv_propensity``.

``replace=True`` draws β times independently with the per-draw probabilities p_il instead
(PRIME App. J gives p_il per draw; its released code draws with a multinomial). A label drawn
twice is returned twice; the pool keeps it once, so a query may bring fewer than β distinct
labels.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from xmcbench.errors import XmcbenchError
from xmcbench.sampling._csr import check_csr, row_entries

__all__ = ["sample_positives"]


def sample_positives(
    labels: sparse.csr_matrix,
    rows: np.ndarray,
    beta: int,
    rng: np.random.Generator,
    weights: np.ndarray | None = None,
    replace: bool = False,
) -> np.ndarray:
    """(b, β) int64 label ids: up to β distinct positives of each query in ``rows``, -1 padded.

    Args:
        labels: (N, L) CSR of training labels (stored entries are positives, no duplicates).
        rows: (b,) query indices of the batch.
        beta: most positives per query.
        rng: numpy Generator (see ``step_rng`` for one that survives resumes).
        weights: optional (L,) non-negative sampling weights, e.g. inverse propensities; a label
            of weight 0 is drawn only when the query has no other positive left to draw.
        replace: False (default): distinct positives, successive sampling. True: β independent
            draws with probability ∝ weight (all-zero rows: uniform), β columns always filled
            for a query with a positive.

    Rows are filled left to right in draw order; queries with fewer than β positives are padded
    with -1, queries with none are all -1.
    """
    check_csr(labels, "the label matrix given to sample_positives")
    if beta < 1:
        raise XmcbenchError(f"the number of positives per query must be >= 1; got beta={beta}")
    rows = np.asarray(rows, dtype=np.int64).ravel()
    n, n_labels = labels.shape
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise XmcbenchError(f"query index out of range for a label matrix of {n} rows")

    seg, cand, seg_start = row_entries(labels, rows)
    if replace:
        return _draw_with_replacement(seg, cand, seg_start, rows.size, beta, rng, weights, n_labels)
    if weights is None:
        keys = rng.random(cand.size)
    else:
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (n_labels,):
            raise XmcbenchError(f"positive sampling weights must have shape ({n_labels},); got {weights.shape}")
        if not np.all(np.isfinite(weights)) or weights.min(initial=0.0) < 0:
            raise XmcbenchError("positive sampling weights must be finite and >= 0 (e.g. inverse propensities)")
        w = weights[cand]
        with np.errstate(divide="ignore"):
            keys = np.where(w > 0, rng.exponential(size=cand.size) / np.where(w > 0, w, 1.0), np.inf)

    # By query, then key: one argsort of seg + a key squashed into [0, 1) (monotone, so the
    # order within a query is the keys' order; equal squashed keys keep stored order).
    with np.errstate(invalid="ignore"):
        squashed = np.where(np.isinf(keys), 1.0, keys / (1.0 + keys))
    order = np.argsort(2.0 * seg + squashed, kind="stable")
    rank = np.arange(cand.size, dtype=np.int64) - seg_start[seg]  # seg is sorted, so order keeps it
    keep = rank < beta
    out = np.full((rows.size, beta), -1, dtype=np.int64)
    out[seg[keep], rank[keep]] = cand[order[keep]]
    return out


def _draw_with_replacement(
    seg: np.ndarray,
    cand: np.ndarray,
    seg_start: np.ndarray,
    b: int,
    beta: int,
    rng: np.random.Generator,
    weights: np.ndarray | None,
    n_labels: int,
) -> np.ndarray:
    """(b, β) i.i.d. draws per row ∝ weights by inverse CDF over the rows' concatenated entries."""
    out = np.full((b, beta), -1, dtype=np.int64)
    if cand.size == 0:
        return out
    if weights is None:
        w = np.ones(cand.size)
    else:
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (n_labels,) or not np.all(np.isfinite(weights)) or weights.min(initial=0.0) < 0:
            raise XmcbenchError(f"positive sampling weights must be finite, >= 0 and of shape ({n_labels},)")
        w = weights[cand]
    counts = np.bincount(seg, minlength=b)  # (b,) positives per row
    totals = np.bincount(seg, weights=w, minlength=b)  # (b,)
    w = np.where(totals[seg] > 0, w, 1.0)  # a row whose weights are all 0 draws uniformly
    totals = np.bincount(seg, weights=w, minlength=b)
    cum = np.cumsum(w)  # (T,) over all rows' entries, row after row
    base = np.concatenate([[0.0], cum])[seg_start]  # (b,) weight of all entries before each row
    has = counts > 0
    u = rng.random((b, beta))  # (b, β)
    target = base[:, None] + u * totals[:, None]  # (b, β) a point inside each row's span
    at = np.searchsorted(cum, target, side="right")  # (b, β) entry index
    last = seg_start + np.maximum(counts, 1) - 1  # keep float edge cases inside the row
    at = np.clip(at, seg_start[:, None], last[:, None])
    out[has] = cand[at[has]]
    return out
