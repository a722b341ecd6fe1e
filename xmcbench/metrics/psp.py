"""Propensity-scored precision at k (PSP@k), Jain et al. (2016), as pyxclib/napkinXC report it.

With w_l the inverse propensity of label l (see :mod:`xmcbench.metrics.propensity`)::

    PSP@k = [ sum_i 1/k * sum_{j=1..k} w_{r_i(j)} [r_i(j) in y_i] ]
          / [ sum_i 1/k * sum_{j=1..k} w_{b_i(j)} ]

where b_i is row i's best possible ranking: its true labels sorted by descending w (a row with
fewer than k true labels contributes only those). The score is a **ratio of dataset sums**
(equivalently of dataset means), not a mean of per-row ratios: rows whose true labels are all
frequent weigh less. Rows without true labels add 0 to both sums.

Per-row components: numerator_i = (1/k) * sum of w over the true labels in the top k,
denominator_i = (1/k) * sum of the k largest w among y_i. A bootstrap must resample rows and
recompute the ratio of the resampled sums (see :mod:`xmcbench.metrics.bootstrap`).
"""

from __future__ import annotations

import numpy as np

from xmcbench.metrics.ranking import RankedTruth

NAME = "PSP"
TITLE = "propensity-scored precision"
NEEDS_PROPENSITY = True


def components(ranked: RankedTruth, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(numerator, denominator), each (n_rows,), with PSP@k = numerator.sum() / denominator.sum()."""
    return ranked.ps_gain(k) / k, ranked.best_ps_gain(k) / k
