"""Propensity-scored nDCG at k (PSnDCG@k), as pyxclib/napkinXC report it.

With w_l the inverse propensity of label l, r_i row i's ranking, b_i its best ranking (true labels
by descending w) and IDCG_i@k = sum_{j=1..min(k, |y_i|)} 1/log2(j+1) the *unweighted* ideal DCG::

    PSDCG_i@k      = sum_{j=1..k} w_{r_i(j)} [r_i(j) in y_i] / log2(j + 1)
    best PSDCG_i@k = sum_{j=1..min(k, |y_i|)} w_{b_i(j)} / log2(j + 1)

    PSnDCG@k = [ sum_i PSDCG_i@k / IDCG_i@k ] / [ sum_i best PSDCG_i@k / IDCG_i@k ]

Like PSP@k it is a ratio of dataset sums, not a mean of per-row ratios. Each row's terms are
divided by its own plain IDCG before summing (napkinXC's ``psndcg_at_k``, which agrees with
pyxclib's ``psndcg``); rows without true labels add 0 to both sums.

Per-row components: numerator_i = PSDCG_i@k / IDCG_i@k, denominator_i = best PSDCG_i@k / IDCG_i@k
(both 0 when y_i is empty).
"""

from __future__ import annotations

import numpy as np

from xmcbench.metrics.ranking import RankedTruth

NAME = "PSnDCG"
TITLE = "propensity-scored nDCG"
NEEDS_PROPENSITY = True


def components(ranked: RankedTruth, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(numerator, denominator), each (n_rows,), with PSnDCG@k = numerator.sum() / denominator.sum()."""
    ideal = ranked.ideal_dcg(k)
    has = ideal > 0
    numerator = np.divide(ranked.ps_dcg(k), ideal, out=np.zeros(ranked.n_rows), where=has)
    denominator = np.divide(ranked.best_ps_dcg(k), ideal, out=np.zeros(ranked.n_rows), where=has)
    return numerator, denominator


def psndcg_at_k(ranked: RankedTruth, k: int) -> float:
    """PSnDCG@k as a fraction in [0, 1] (0 when no row has a true label)."""
    numerator, denominator = components(ranked, k)
    total = denominator.sum()
    return float(numerator.sum() / total) if total > 0 else 0.0
