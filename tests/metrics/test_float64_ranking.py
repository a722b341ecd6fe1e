"""float64 scores are ranked by a truncated 64-bit image and repaired where it merged distinct values."""

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


def _near_ties(seed: int, n: int = 300, n_labels: int = 60, dtype=np.float64) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    base = rng.choice([0.1, 0.3, 1 / 3, 0.7, -0.2, 0.0, -0.0, 1e300, -1e-300], size=(n, n_labels)).astype(dtype)
    # float32 merges base and base + 1e-12; the truncated 64-bit key merges base and base + a few
    # ulps (steps), and also base + 1e-12 at large rows; exact ties stay ties.
    noise = rng.choice([0.0, 1e-12, -1e-12, 2e-12, 1e-9], size=base.shape).astype(dtype)
    steps = rng.choice([0, 0, 1, 2, -1, 3], size=base.shape)
    scores = base + noise
    for _ in range(3):
        up, down = steps > 0, steps < 0
        scores[up] = np.nextafter(scores[up], dtype(np.inf))
        scores[down] = np.nextafter(scores[down], dtype(-np.inf))
        steps = steps - np.sign(steps)
    rows, cols = np.nonzero(rng.random(base.shape) < 0.6)
    return sp.csr_matrix((scores[rows, cols], (rows, cols)), shape=base.shape)


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


@pytest.mark.parametrize("dtype", [np.float64, np.longdouble])
@pytest.mark.parametrize("n_labels", [2, 60, 3000])  # the key's spare bits grow with the row width
def test_ulp_apart_scores_rank_exactly(dtype, n_labels):
    m = _near_ties(11, n=40, n_labels=n_labels, dtype=dtype)
    assert m.dtype == dtype
    for k in (1, 5, n_labels):
        np.testing.assert_array_equal(top_k(m, k), _reference_top_k(m, k))


def test_dense_float64_scores_one_ulp_apart():
    scores = np.full((3, 200), 0.25)
    scores[0, 150] = np.nextafter(0.25, 1.0)  # one ulp above a tie of 199: must rank first
    scores[1, 7] = np.nextafter(0.25, 0.0)  # one ulp below: must rank last
    scores[2] = -np.inf
    scores[2, 3] = np.inf
    got = top_k(scores, 200)
    assert got[0, 0] == 150 and list(got[0, 1:4]) == [0, 1, 2]
    assert got[1, -1] == 7 and list(got[1, :3]) == [0, 1, 2]
    assert got[2, 0] == 3 and list(got[2, 1:3]) == [0, 1]


def test_rows_wider_than_the_packed_second_key_rank_exactly():
    width = (1 << 20) + 2  # 3 shift - 1 > 63 bits: the lexsort branch
    rng = np.random.default_rng(3)
    scores = rng.choice([0.5, np.nextafter(0.5, 1.0), np.nextafter(0.5, 0.0), 0.25], size=(2, width))
    got = top_k(scores, 50)
    m = sp.csr_matrix(scores)
    np.testing.assert_array_equal(got, _reference_top_k(m, 50))


def test_longdouble_beyond_float64_ranks_without_warnings():
    m = np.array([[np.longdouble("1e400"), np.longdouble(1), np.longdouble("1e401")]])
    if not np.isfinite(m).all():
        pytest.skip("longdouble is float64 on this platform")
    with np.errstate(all="raise"):
        assert top_k(m, 3).tolist() == [[2, 0, 1]]
