"""Ranking conventions: ties to the lower label, filter before top-k, padding, exact float order,
chunking, and input validation."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.errors import XmcbenchError
from xmcbench.metrics import evaluate, rank_truth, top_k
from xmcbench.metrics.ranking import as_predictions, as_truth, find_in_rows


def test_ties_go_to_the_lower_label_index():
    scores = sp.csr_matrix(np.array([[0.5, 0.0, 0.7, 0.5, 0.7, 0.5]], dtype=np.float32))
    scores.eliminate_zeros()
    assert top_k(scores, 5).tolist() == [[2, 4, 0, 3, 5]]


def test_ties_independent_of_storage_order():
    # The same row stored with its labels in descending order: the tie-break must not depend on it.
    row = sp.csr_matrix(
        (np.array([1.0, 1.0, 1.0, 2.0], dtype=np.float32), np.array([9, 4, 7, 1]), np.array([0, 4])), shape=(1, 10)
    )
    assert top_k(row, 4).tolist() == [[1, 4, 7, 9]]


def test_stored_zero_and_negative_scores_are_predictions():
    scores = sp.csr_matrix(
        (np.array([-1.0, 0.0, -0.5], dtype=np.float32), np.array([0, 1, 2]), np.array([0, 3])), shape=(1, 4)
    )
    assert top_k(scores, 4).tolist() == [[1, 2, 0, -1]]


def test_negative_zero_ties_with_zero():
    scores = sp.csr_matrix((np.array([-0.0, 0.0], dtype=np.float32), np.array([3, 1]), np.array([0, 2])), shape=(1, 4))
    assert top_k(scores, 2).tolist() == [[1, 3]]


def test_infinities_rank_at_the_ends():
    scores = sp.csr_matrix(
        (np.array([np.inf, -np.inf, 1.0, np.inf], dtype=np.float32), np.array([0, 1, 2, 3]), np.array([0, 4])),
        shape=(1, 4),
    )
    assert top_k(scores, 4).tolist() == [[0, 3, 2, 1]]


def test_float64_scores_that_float32_would_merge_keep_their_order():
    a = 0.1234567890123
    scores = sp.csr_matrix(
        (np.array([a, a + 1e-12, a - 1e-12], dtype=np.float64), np.array([0, 1, 2]), np.array([0, 3])), shape=(1, 3)
    )
    assert top_k(scores, 3).tolist() == [[1, 0, 2]]


def test_rows_shorter_than_k_are_padded():
    scores = sp.csr_matrix(np.array([[0.3, 0, 0.2], [0, 0, 0], [0.1, 0.2, 0.3]], dtype=np.float32))
    assert top_k(scores, 4).tolist() == [[0, 2, -1, -1], [-1, -1, -1, -1], [2, 1, 0, -1]]


def test_filter_is_applied_before_top_k():
    scores = sp.csr_matrix(np.array([[0.9, 0.8, 0.7, 0.6], [0.9, 0.8, 0.7, 0.6]], dtype=np.float32))
    flt = sp.csr_matrix(np.array([[1, 0, 1, 0], [0, 0, 0, 0]], dtype=np.float32))
    assert top_k(scores, 2, filter=flt).tolist() == [[1, 3], [0, 1]]


def test_dense_scores_mean_every_label_is_scored():
    dense = np.array([[0.0, -1.0, 0.5]], dtype=np.float32)  # zero is a real score here
    assert top_k(dense, 3).tolist() == [[2, 0, 1]]


@pytest.mark.parametrize("chunk_entries", [1, 7, 64, 1 << 20])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_python_reference_for_any_chunking(ref, seed, chunk_entries):
    p = ref.make_problem(seed, n=120)
    expected = ref.reference_ranking(p.predictions, p.filter, 6)
    got = top_k(p.predictions, 6, filter=p.filter, chunk_entries=chunk_entries)
    assert [[x for x in row if x >= 0] for row in got.tolist()] == expected


def test_uniform_rows_match_reference(ref):
    # Every row with the same number of predictions takes the reshape (no-copy) path.
    rng = np.random.default_rng(3)
    n, n_labels, width = 50, 40, 8
    labels = np.stack([rng.choice(n_labels, width, replace=False) for _ in range(n)])
    scores = np.round(rng.random((n, width)), 1).astype(np.float32)
    pred = sp.csr_matrix((scores.ravel(), labels.ravel(), np.arange(0, n * width + 1, width)), shape=(n, n_labels))
    flt = sp.csr_matrix(
        (np.ones(n), (np.arange(n), labels[:, 0])), shape=(n, n_labels)
    )  # removes one prediction per row
    for f in (None, flt):
        for chunk_entries in (16, 1 << 20):
            got = top_k(pred, 5, filter=f, chunk_entries=chunk_entries)
            assert [[x for x in r if x >= 0] for r in got.tolist()] == ref.reference_ranking(pred, f, 5)


def test_rank_truth_hits_and_chunking_agree(ref):
    p = ref.make_problem(4, n=100)
    a = rank_truth(p.predictions, p.truth, 7, filter=p.filter)
    b = rank_truth(p.predictions, p.truth, 7, filter=p.filter, chunk_entries=5)
    for name in ("hit_row", "hit_rank", "hit_label"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    # Independent check of every hit: the label at that rank of the reference ranking is true.
    ranking = ref.reference_ranking(p.predictions, p.filter, 7)
    truth = ref.true_lists(p.truth)
    expected = sorted((r, j, lab) for r, row in enumerate(ranking) for j, lab in enumerate(row) if lab in truth[r])
    assert sorted(zip(a.hit_row.tolist(), a.hit_rank.tolist(), a.hit_label.tolist())) == expected
    assert np.all(np.diff(a.hit_rank) >= 0)


def test_find_in_rows():
    m = sp.csr_matrix(np.array([[0, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=np.float32))
    got = find_in_rows(m, np.array([0, 0, 1, 2, 2]), np.array([1, 2, 0, 0, 3]))
    assert got.tolist() == [0, -1, -1, 2, 5]
    empty = sp.csr_matrix((2, 3), dtype=np.float32)
    assert find_in_rows(empty, np.array([0, 1]), np.array([0, 2])).tolist() == [-1, -1]


def test_truth_is_binarised():
    truth = sp.csr_matrix(
        (np.array([3.0, 0.0, 1.0, 1.0]), np.array([0, 1, 2, 2]), np.array([0, 4])), shape=(1, 3)
    )  # a weight, an explicit zero, a repeated entry
    t = as_truth(truth)
    assert t.indices.tolist() == [0, 2]
    pred = sp.csr_matrix(np.array([[0.1, 0.9, 0.5]], dtype=np.float32))
    assert evaluate(pred, truth, k=3, metrics=["P@3", "R@3"]) == {
        "P@3": pytest.approx(200 / 3),
        "R@3": pytest.approx(100.0),
    }


def test_bad_inputs_raise_clear_errors():
    pred = sp.csr_matrix(np.array([[0.1, np.nan]], dtype=np.float32))
    with pytest.raises(XmcbenchError, match="NaN"):
        top_k(pred, 1)
    dup = sp.csr_matrix((np.array([1.0, 2.0]), np.array([1, 1]), np.array([0, 2])), shape=(1, 3))
    with pytest.raises(XmcbenchError, match="twice"):
        as_predictions(dup)
    good = sp.csr_matrix(np.eye(2, 3, dtype=np.float32))
    with pytest.raises(XmcbenchError, match=r"shape \(2, 3\).*shape \(3, 3\)"):
        evaluate(good, sp.csr_matrix(np.eye(3, dtype=np.float32)))
    with pytest.raises(XmcbenchError, match="filter has shape"):
        top_k(good, 1, filter=sp.csr_matrix((2, 4)))
    with pytest.raises(XmcbenchError, match="inv_propensity has 2 entries"):
        evaluate(good, good, inv_propensity=np.ones(2))
    with pytest.raises(XmcbenchError, match="positive"):
        top_k(good, 0)
    with pytest.raises(XmcbenchError, match="scipy.sparse"):
        top_k([[1, 2]], 1)


def test_cached_statistics_do_not_depend_on_request_order(ref):
    p = ref.make_problem(6, n=80)
    kw = dict(filter=p.filter, inv_propensity=p.inv_propensity)
    fresh = {k: rank_truth(p.predictions, p.truth, 7, **kw) for k in range(1, 8)}
    shared = rank_truth(p.predictions, p.truth, 7, **kw)
    for k in (5, 2, 7, 1, 3, 6, 4):
        for stat in ("hits", "dcg", "ps_gain", "ps_dcg", "best_ps_gain", "best_ps_dcg"):
            np.testing.assert_allclose(getattr(shared, stat)(k), getattr(fresh[k], stat)(k), rtol=1e-15, err_msg=stat)
    with pytest.raises(ValueError, match="outside"):
        shared.hits(8)
