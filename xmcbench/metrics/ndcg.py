"""Normalised discounted cumulative gain at k (nDCG@k), binary relevance.

For row i with true label set y_i and ranking r_i::

    DCG_i@k  = sum_{j=1..k} [r_i(j) in y_i] / log2(j + 1)
    IDCG_i@k = sum_{j=1..min(k, |y_i|)} 1 / log2(j + 1)
    nDCG@k   = 1/n * sum_i DCG_i@k / IDCG_i@k

The ideal DCG runs over min(k, |y_i|) positions, so a row with one true label ranked first scores 1
at every k. Rows without true labels score 0 and stay in the mean (napkinXC's default
``zero_division=0``; pyxclib gives the same number). Missing prediction slots are misses.

Per-row components: numerator_i = DCG_i@k / IDCG_i@k (0 when y_i is empty), denominator_i = 1.
"""

from __future__ import annotations

import numpy as np

from xmcbench.metrics.ranking import RankedTruth

NAME = "nDCG"
TITLE = "normalised discounted cumulative gain"
NEEDS_PROPENSITY = False


def components(ranked: RankedTruth, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(numerator, denominator), each (n_rows,), with nDCG@k = numerator.sum() / denominator.sum()."""
    ideal = ranked.ideal_dcg(k)
    gain = np.divide(ranked.dcg(k), ideal, out=np.zeros(ranked.n_rows), where=ideal > 0)
    return gain, np.ones(ranked.n_rows)


def ndcg_at_k(ranked: RankedTruth, k: int) -> float:
    """nDCG@k as a fraction in [0, 1]."""
    numerator, denominator = components(ranked, k)
    return float(numerator.sum() / denominator.sum()) if ranked.n_rows else 0.0
