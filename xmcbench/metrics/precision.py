"""Precision at k (P@k), the headline metric of extreme classification.

For row i with true label set y_i and ranking r_i (filter applied, ties to the lower label)::

    P@k = 1/n * sum_i  1/k * sum_{j=1..k} [r_i(j) in y_i]

Rows with fewer than k predictions count the missing slots as misses (the denominator stays k);
rows without true labels score 0 and stay in the mean (pyxclib and napkinXC agree).

Per-row components (metric = sum(numerator) / sum(denominator)): numerator_i = hits_i(k) / k,
denominator_i = 1.
"""

from __future__ import annotations

import numpy as np

from xmcbench.metrics.ranking import RankedTruth

NAME = "P"
TITLE = "precision"
NEEDS_PROPENSITY = False


def components(ranked: RankedTruth, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(numerator, denominator), each (n_rows,), with P@k = numerator.sum() / denominator.sum()."""
    return ranked.hits(k) / k, np.ones(ranked.n_rows)


def precision_at_k(ranked: RankedTruth, k: int) -> float:
    """P@k as a fraction in [0, 1]."""
    numerator, denominator = components(ranked, k)
    return float(numerator.sum() / denominator.sum()) if ranked.n_rows else 0.0
