"""Fixtures for the metric tests: seeded random problems with edge cases, and napkinXC references.

The reference path is deliberately independent of xmcbench: rows are ranked by a plain Python
sort on (-score, label) after dropping filtered pairs, and the metrics come from
``napkinxc.metrics`` (which the XMC literature's pyxclib agrees with).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

K = (1, 2, 3, 4, 5)


@dataclass
class Problem:
    predictions: sp.csr_matrix  # (n, L) scores
    truth: sp.csr_matrix  # (n, L) 0/1
    filter: sp.csr_matrix  # (n, L) pairs removed from predictions
    train: sp.csr_matrix  # (n_train, L) training labels
    inv_propensity: np.ndarray  # (L,)


def make_problem(seed: int = 0, n: int = 300, n_labels: int = 60) -> Problem:
    """Random problem with ties, short rows, empty rows and a filter that removes true labels.

    Rows 0-4 are fixed edge cases: 0 has no true labels, 1 has no predictions, 2 has two
    predictions (fewer than k), 3 has all-tied scores, 4's best prediction is true but filtered.
    """
    rng = np.random.default_rng(seed)
    truth = (rng.random((n, n_labels)) < 0.05).astype(np.float32)
    scores = np.where(rng.random((n, n_labels)) < 0.15, np.round(rng.random((n, n_labels)), 1), 0.0)
    predicted = scores > 0
    # Make some true labels likelier to be predicted, with higher scores.
    boost = (truth > 0) & (rng.random((n, n_labels)) < 0.5)
    scores[boost] = np.round(0.5 + 0.5 * rng.random(boost.sum()), 1)
    predicted |= boost
    scores[rng.random((n, n_labels)) < 0.01] = -0.3  # a few negative scores ...
    predicted |= scores == -0.3
    zero = rng.random((n, n_labels)) < 0.01  # ... and a few stored zeros (still predictions)
    predicted |= zero
    scores[zero] = 0.0
    filt = np.zeros((n, n_labels), dtype=bool)
    filt[rng.random((n, n_labels)) < 0.02] = True

    truth[0] = 0
    predicted[1] = False
    predicted[2] = False
    predicted[2, [5, 9]] = True
    scores[2, [5, 9]] = [0.2, 0.7]
    truth[2, 5] = 1
    predicted[3] = False
    predicted[3, [1, 4, 7, 8, 20, 30]] = True
    scores[3, [1, 4, 7, 8, 20, 30]] = 0.5
    truth[3, [7, 30]] = 1
    truth[4, 11] = 1
    predicted[4, 11] = True
    scores[4, 11] = 2.0
    filt[4] = False
    filt[4, 11] = True

    rows, cols = np.nonzero(predicted)
    predictions = sp.csr_matrix((scores[rows, cols], (rows, cols)), shape=(n, n_labels))
    train = sp.csr_matrix((rng.random((4 * n, n_labels)) < rng.random(n_labels) ** 3 * 0.5).astype(np.float32))
    from xmcbench.metrics import inv_propensity

    return Problem(
        predictions=predictions,
        truth=sp.csr_matrix(truth),
        filter=sp.csr_matrix(filt.astype(np.float32)),
        train=train,
        inv_propensity=inv_propensity(train, 0.55, 1.5),
    )


def reference_ranking(predictions: sp.csr_matrix, filter: sp.csr_matrix | None, k: int) -> list[list[int]]:
    """Each row's top-k labels by a plain Python sort on (-score, label), filtered pairs dropped."""
    out = []
    for i in range(predictions.shape[0]):
        banned = set() if filter is None else set(filter.indices[filter.indptr[i] : filter.indptr[i + 1]].tolist())
        row = predictions[i]
        pairs = [(float(s), int(j)) for j, s in zip(row.indices, row.data) if int(j) not in banned]
        pairs.sort(key=lambda p: (-p[0], p[1]))
        out.append([j for _, j in pairs[:k]])
    return out


def true_lists(truth: sp.csr_matrix) -> list[list[int]]:
    return [truth.indices[truth.indptr[i] : truth.indptr[i + 1]].tolist() for i in range(truth.shape[0])]


def napkin(family: str, truth_lists, ranked_lists, k: int, inv_propensity=None) -> np.ndarray:
    """napkinXC's metric at 1..k, in percent."""
    import napkinxc.metrics as nm

    if family == "P":
        values = nm.precision_at_k(truth_lists, ranked_lists, k=k)
    elif family == "nDCG":
        values = nm.ndcg_at_k(truth_lists, ranked_lists, k=k)
    elif family == "R":
        values = nm.recall_at_k(truth_lists, ranked_lists, k=k)
    elif family == "PSP":
        values = nm.psprecision_at_k(truth_lists, ranked_lists, inv_propensity, k=k)
    elif family == "PSnDCG":
        values = nm.psndcg_at_k(truth_lists, ranked_lists, inv_propensity, k=k)
    else:
        raise ValueError(family)
    return np.asarray(values) * 100


@pytest.fixture
def problem() -> Problem:
    return make_problem(0)


@pytest.fixture
def ref() -> SimpleNamespace:
    """Helpers: make_problem, reference_ranking, true_lists, napkin, K."""
    return SimpleNamespace(
        make_problem=make_problem, reference_ranking=reference_ranking, true_lists=true_lists, napkin=napkin, K=K
    )
