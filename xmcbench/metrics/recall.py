"""Recall at k (R@k): the share of a row's true labels found in its top k.

For row i with true label set y_i and ranking r_i::

    R@k = 1/n * sum_i |{r_i(1..k)} ∩ y_i| / |y_i|

Rows without true labels count 0 and stay in the mean (napkinXC's ``recall_at_k`` default
``zero_division=0``, and pyxclib's ``recall``). pyxclib also has a second recall that leaves such
rows out of the mean; xmcbench does not use it — filter the rows first if that is what you want.

Per-row components: numerator_i = hits_i(k) / |y_i| (0 when y_i is empty), denominator_i = 1.
"""

from __future__ import annotations

import numpy as np

from xmcbench.metrics.ranking import RankedTruth

NAME = "R"
TITLE = "recall"
NEEDS_PROPENSITY = False


def components(ranked: RankedTruth, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(numerator, denominator), each (n_rows,), with R@k = numerator.sum() / denominator.sum()."""
    n_true = ranked.n_true.astype(np.float64)
    share = np.divide(ranked.hits(k), n_true, out=np.zeros(ranked.n_rows), where=n_true > 0)
    return share, np.ones(ranked.n_rows)


def recall_at_k(ranked: RankedTruth, k: int) -> float:
    """R@k as a fraction in [0, 1]."""
    numerator, denominator = components(ranked, k)
    return float(numerator.sum() / denominator.sum()) if ranked.n_rows else 0.0
