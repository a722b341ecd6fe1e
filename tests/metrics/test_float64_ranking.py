"""float64 scores are ranked by their float32 image and repaired where float32 merged distinct values."""

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.metrics import evaluate
from xmcbench.metrics.ranking import top_k


def _reference_top_k(m: sp.csr_matrix, k: int) -> np.ndarray:
    out = np.full((m.shape[0], k), -1, dtype=np.int64)
    for i in range(m.shape[0]):
        lab, val = m.indices[m.indptr[i] : m.indptr[i + 1]], m.data[m.indptr[i] : m.indptr[i + 1]]
        order = np.lexsort((lab, -val))[:k]  # score descending, then lower label
        out[i, : order.size] = lab[order]
    return out


def _near_ties(seed: int, n: int = 300, n_labels: int = 60) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random((n, n_labels)) < 0.5, 0.0, np.nan)
    base = rng.choice([0.1, 0.3, 1 / 3, 0.7, -0.2, 0.0, -0.0], size=dense.shape)
    # float32 merges base, base + 1 ulp(float64) ... ; exact float64 ties stay too
    noise = rng.choice([0.0, 1e-12, -1e-12, 2e-12, 1e-9], size=dense.shape)
    dense = np.where(np.isnan(dense), 0, base + noise)
    mask = rng.random(dense.shape) < 0.6
    rows, cols = np.nonzero(mask)
    return sp.csr_matrix((dense[rows, cols], (rows, cols)), shape=dense.shape)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [1, 3, 7, 40, 55])
def test_float64_top_k_matches_a_per_row_sort(seed, k):
    m = _near_ties(seed)
    assert m.dtype == np.float64
    np.testing.assert_array_equal(top_k(m, k), _reference_top_k(m, k))
    np.testing.assert_array_equal(top_k(m, k, chunk_entries=64), _reference_top_k(m, k))


def test_float64_metrics_equal_those_of_an_exact_reranking():
    m = _near_ties(7)
    truth = sp.csr_matrix((np.random.default_rng(1).random(m.shape) < 0.1).astype(np.float32))
    # Replace each score by its exact dense rank (float32-representable, same order): same metrics.
    ranks = np.unique(-m.data, return_inverse=True)[1].ravel()
    as_ranks = sp.csr_matrix((-ranks.astype(np.float32), m.indices, m.indptr), shape=m.shape)
    a = evaluate(m, truth, k=(1, 3, 5, 20))
    b = evaluate(as_ranks, truth, k=(1, 3, 5, 20))
    assert a == pytest.approx(b, abs=1e-9)
