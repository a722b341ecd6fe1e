"""Positive sampling: validity, padding, determinism, and the sampling distributions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from xmcbench.errors import XmcbenchError
from xmcbench.sampling.positives import sample_positives


def _labels():
    rows = [[0, 3, 5, 9], [2], [], [1, 4, 6, 7, 8, 9], [9, 0]]
    data = [(i, j) for i, r in enumerate(rows) for j in r]
    r, c = zip(*data)
    return sparse.csr_matrix((np.ones(len(r), dtype=np.float32), (r, c)), shape=(5, 10)), rows


@pytest.mark.parametrize("beta", [1, 2, 3, 10])
def test_samples_are_distinct_positives_padded_with_minus_one(beta):
    labels, truth = _labels()
    rows = np.array([0, 1, 2, 3, 4, 3, 0])
    out = sample_positives(labels, rows, beta, np.random.default_rng(0))
    assert out.shape == (rows.size, beta) and out.dtype == np.int64
    for r, sampled in zip(rows, out):
        got = sampled[sampled >= 0]
        assert len(got) == min(beta, len(truth[r]))
        assert len(set(got)) == len(got) and set(got) <= set(truth[r])
        assert (sampled[len(got) :] == -1).all()  # padding only at the end
    full = sample_positives(labels, rows, 10, np.random.default_rng(0))
    for r, sampled in zip(rows, full):
        assert set(sampled[sampled >= 0]) == set(truth[r])


def test_deterministic_by_generator():
    labels, _ = _labels()
    a = sample_positives(labels, np.arange(5), 2, np.random.default_rng(7))
    b = sample_positives(labels, np.arange(5), 2, np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)


def test_uniform_single_draw_frequencies():
    labels, truth = _labels()
    n = 30000
    out = sample_positives(labels, np.full(n, 3), 1, np.random.default_rng(1))[:, 0]
    freq = np.bincount(out, minlength=10)[truth[3]] / n
    expected = 1 / len(truth[3])
    assert np.abs(freq - expected).max() < 4 * np.sqrt(expected * (1 - expected) / n)


def test_weighted_draws_follow_inverse_propensity():
    labels, truth = _labels()
    weights = np.linspace(1.0, 5.5, 10)
    n = 40000
    rng = np.random.default_rng(2)
    # beta = 1: PRIME's p_il = w_l / sum_{j in P_i} w_j
    one = sample_positives(labels, np.full(n, 3), 1, rng, weights=weights)[:, 0]
    w = weights[truth[3]]
    p = w / w.sum()
    freq = np.bincount(one, minlength=10)[truth[3]] / n
    assert np.abs(freq - p).max() < 4 * np.sqrt(p * (1 - p) / n).max()
    # beta = 2 without replacement: P(l drawn) = p_l + sum_{j != l} p_j p_l / (1 - p_j)
    two = sample_positives(labels, np.full(n, 3), 2, rng, weights=weights)
    assert (two[:, 0] != two[:, 1]).all()
    incl = np.array([p[a] + sum(p[j] * p[a] / (1 - p[j]) for j in range(len(p)) if j != a) for a in range(len(p))])
    freq2 = np.bincount(two.ravel(), minlength=10)[truth[3]] / n
    assert np.abs(freq2 - incl).max() < 4 * np.sqrt(incl * (1 - incl) / n).max()


def test_zero_weight_labels_only_when_nothing_else_is_left():
    labels, truth = _labels()
    weights = np.ones(10)
    weights[[0, 9]] = 0.0
    out = sample_positives(labels, np.full(500, 0), 2, np.random.default_rng(3), weights=weights)
    assert set(out.ravel()) == {3, 5}
    out = sample_positives(labels, np.full(50, 4), 2, np.random.default_rng(3), weights=weights)
    assert (np.sort(out, axis=1) == [0, 9]).all()  # the query has only zero-weight labels


def test_bad_inputs_are_errors():
    labels, _ = _labels()
    rng = np.random.default_rng(0)
    with pytest.raises(XmcbenchError, match="CSR"):
        sample_positives(labels.tocoo(), np.arange(2), 1, rng)
    with pytest.raises(XmcbenchError, match="beta"):
        sample_positives(labels, np.arange(2), 0, rng)
    with pytest.raises(XmcbenchError, match="out of range"):
        sample_positives(labels, np.array([5]), 1, rng)
    with pytest.raises(XmcbenchError, match="shape"):
        sample_positives(labels, np.arange(2), 1, rng, weights=np.ones(3))
    with pytest.raises(XmcbenchError, match="finite"):
        sample_positives(labels, np.arange(2), 1, rng, weights=-np.ones(10))


def test_with_replacement_draws_follow_the_per_draw_probabilities():
    """PRIME App. J: p_il = γ_l / Σ_{j ∈ P_i} γ_j for every draw, independently."""
    labels = sparse.csr_matrix(np.array([[1, 1, 0, 0], [0, 0, 0, 0], [0, 1, 1, 1]], dtype=np.float32))
    weights = np.array([1.0, 3.0, 0.0, 1.0])
    out = sample_positives(labels, np.array([0, 1, 2]), 20000, np.random.default_rng(0), weights=weights, replace=True)
    assert (out[1] == -1).all() and (out[[0, 2]] >= 0).all()  # β columns always filled for a query with positives
    np.testing.assert_allclose(np.bincount(out[0], minlength=4) / 20000, [0.25, 0.75, 0, 0], atol=0.02)
    np.testing.assert_allclose(np.bincount(out[2], minlength=4) / 20000, [0, 0.75, 0, 0.25], atol=0.02)
    # duplicates happen (independent draws), unlike the default successive sampling
    two = sample_positives(labels, np.array([0] * 200), 2, np.random.default_rng(1), weights=weights, replace=True)
    assert (two[:, 0] == two[:, 1]).any()
    distinct = sample_positives(labels, np.array([0] * 200), 2, np.random.default_rng(1), weights=weights)
    assert (distinct[:, 0] != distinct[:, 1]).all()
