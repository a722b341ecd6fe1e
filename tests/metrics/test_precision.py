"""P@k: hand-computed examples and agreement with napkinXC (ties, filter, short and empty rows)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.metrics import evaluate, rank_truth
from xmcbench.metrics.precision import components, precision_at_k


def _small():
    # row 0: truth {1, 3}; scores 3:0.9, 1:0.8, 2:0.8 (tie: label 1 ranks before label 2)
    # row 1: truth {0};    scores 2:0.9, 0:0.1
    # row 2: no truth;     scores 4:0.5
    truth = sp.csr_matrix(np.array([[0, 1, 0, 1, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=np.float32))
    pred = sp.csr_matrix(np.array([[0, 0.8, 0.8, 0.9, 0], [0.1, 0, 0.9, 0, 0], [0, 0, 0, 0, 0.5]], dtype=np.float32))
    return pred, truth


def test_hand_example():
    pred, truth = _small()
    got = evaluate(pred, truth, k=(1, 2, 3, 5), metrics=["P"])
    assert got["P@1"] == pytest.approx(100 * (1 + 0 + 0) / 3)
    assert got["P@2"] == pytest.approx(100 * (2 / 2 + 1 / 2 + 0) / 3)  # 50.0; a wrong tie-break gives 33.3
    assert got["P@3"] == pytest.approx(100 * (2 / 3 + 1 / 3 + 0) / 3)
    # k=5: row 0 has 3 predictions, row 1 two, row 2 one: missing slots are misses (denominator 5).
    assert got["P@5"] == pytest.approx(100 * (2 / 5 + 1 / 5 + 0) / 3)


def test_components_are_per_row():
    pred, truth = _small()
    ranked = rank_truth(pred, truth, 5)
    num, den = components(ranked, 2)
    np.testing.assert_allclose(num, [1.0, 0.5, 0.0])
    np.testing.assert_allclose(den, [1.0, 1.0, 1.0])
    assert precision_at_k(ranked, 2) == pytest.approx(0.5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_napkinxc(ref, seed):
    p = ref.make_problem(seed)
    ranked = ref.reference_ranking(p.predictions, p.filter, 5)
    expected = ref.napkin("P", ref.true_lists(p.truth), ranked, 5)
    got = evaluate(p.predictions, p.truth, k=ref.K, filter=p.filter, metrics=["P"])
    np.testing.assert_allclose([got[f"P@{k}"] for k in ref.K], expected, rtol=0, atol=1e-9)


def test_filter_removes_a_correct_prediction():
    truth = sp.csr_matrix(np.array([[1, 1, 0, 0]], dtype=np.float32))
    pred = sp.csr_matrix(np.array([[0.9, 0.1, 0.5, 0]], dtype=np.float32))
    flt = sp.csr_matrix(np.array([[1, 0, 0, 0]], dtype=np.float32))
    assert evaluate(pred, truth, k=1, metrics=["P"])["P@1"] == 100.0
    # Label 0 is filtered out of the predictions (not out of the truth): label 2 moves to rank 1.
    assert evaluate(pred, truth, k=(1, 2), filter=flt, metrics=["P"]) == {"P@1": 0.0, "P@2": 50.0}
