"""nDCG@k: hand-computed examples and agreement with napkinXC."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.metrics import evaluate, rank_truth
from xmcbench.metrics.ndcg import components


def test_hand_example():
    # row 0: truth {1, 3}, ranking 3, 1, 2 (1 and 2 tie; 1 wins); row 1: truth {0}, ranking 2, 0;
    # row 2: truth {}, ranking 4.
    truth = sp.csr_matrix(np.array([[0, 1, 0, 1, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=np.float32))
    pred = sp.csr_matrix(np.array([[0, 0.8, 0.8, 0.9, 0], [0.1, 0, 0.9, 0, 0], [0, 0, 0, 0, 0.5]], dtype=np.float32))
    got = evaluate(pred, truth, k=(1, 2, 3), metrics=["nDCG"])
    d2 = 1 / math.log2(3)
    assert got["nDCG@1"] == pytest.approx(100 * (1 + 0 + 0) / 3)
    # row 0: DCG = 1 + 1/log2(3) = IDCG (two true labels); row 1: DCG = 1/log2(3), IDCG = 1; row 2: 0.
    assert got["nDCG@2"] == pytest.approx(100 * (1 + d2 + 0) / 3)
    assert got["nDCG@3"] == pytest.approx(100 * (1 + d2 + 0) / 3)


def test_ideal_dcg_runs_over_min_k_and_true_count():
    truth = sp.csr_matrix(np.array([[1, 1, 1, 0, 0, 0]], dtype=np.float32))
    pred = sp.csr_matrix(np.array([[0, 0, 0.9, 0.8, 0.7, 0.6]], dtype=np.float32))  # hit at rank 1 only
    ranked = rank_truth(pred, truth, 5)
    num, den = components(ranked, 5)
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)  # three true labels, k=5
    np.testing.assert_allclose(num, [1 / idcg])
    np.testing.assert_allclose(den, [1.0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_napkinxc(ref, seed):
    p = ref.make_problem(seed)
    ranked = ref.reference_ranking(p.predictions, p.filter, 5)
    expected = ref.napkin("nDCG", ref.true_lists(p.truth), ranked, 5)
    got = evaluate(p.predictions, p.truth, k=ref.K, filter=p.filter, metrics=["ndcg"])
    np.testing.assert_allclose([got[f"nDCG@{k}"] for k in ref.K], expected, rtol=0, atol=1e-9)


def test_rows_without_labels_score_zero_and_stay_in_the_mean():
    truth = sp.csr_matrix(np.array([[1, 0], [0, 0]], dtype=np.float32))
    pred = sp.csr_matrix(np.array([[0.9, 0.1], [0.9, 0.1]], dtype=np.float32))
    assert evaluate(pred, truth, k=1, metrics=["nDCG"])["nDCG@1"] == pytest.approx(50.0)
