"""PSP@k: a ratio of dataset sums; hand-computed examples and agreement with napkinXC."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.metrics import evaluate, rank_truth
from xmcbench.metrics.psp import components

W = np.array([1.0, 2.0, 3.0, 4.0, 5.0])


def _small():
    # row 0: truth {1, 3}, ranking 3, 1, 2; row 1: truth {0}, ranking 2, 0; row 2: no truth.
    truth = sp.csr_matrix(np.array([[0, 1, 0, 1, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=np.float32))
    pred = sp.csr_matrix(np.array([[0, 0.8, 0.8, 0.9, 0], [0.1, 0, 0.9, 0, 0], [0, 0, 0, 0, 0.5]], dtype=np.float32))
    return pred, truth


def test_hand_example_is_a_ratio_of_sums():
    pred, truth = _small()
    got = evaluate(pred, truth, k=(1, 2), inv_propensity=W, metrics=["PSP"])
    # k=1: numerators w3 (row 0), 0 (row 1); best: max(w1, w3) = 4, w0 = 1.
    assert got["PSP@1"] == pytest.approx(100 * 4 / (4 + 1))  # a mean of per-row ratios would give 50
    # k=2: numerators (4 + 2)/2, (0 + 1)/2; best (4 + 2)/2, 1/2.
    assert got["PSP@2"] == pytest.approx(100.0)


def test_components():
    pred, truth = _small()
    num, den = components(rank_truth(pred, truth, 2, inv_propensity=W), 2)
    np.testing.assert_allclose(num, [3.0, 0.5, 0.0])
    np.testing.assert_allclose(den, [3.0, 0.5, 0.0])


def test_best_ranking_uses_largest_weights_first():
    truth = sp.csr_matrix(np.array([[1, 1, 1, 0, 0]], dtype=np.float32))
    pred = sp.csr_matrix(np.array([[0.9, 0, 0, 0, 0]], dtype=np.float32))
    w = np.array([1.5, 7.0, 3.0, 1.0, 1.0])
    got = evaluate(pred, truth, k=(1, 2), inv_propensity=w, metrics=["PSP"])
    assert got["PSP@1"] == pytest.approx(100 * 1.5 / 7.0)
    assert got["PSP@2"] == pytest.approx(100 * 1.5 / (7.0 + 3.0))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_napkinxc(ref, seed):
    p = ref.make_problem(seed)
    ranked = ref.reference_ranking(p.predictions, p.filter, 5)
    expected = ref.napkin("PSP", ref.true_lists(p.truth), ranked, 5, p.inv_propensity)
    got = evaluate(p.predictions, p.truth, k=ref.K, inv_propensity=p.inv_propensity, filter=p.filter, metrics=["PSP"])
    np.testing.assert_allclose([got[f"PSP@{k}"] for k in ref.K], expected, rtol=0, atol=1e-9)


def test_needs_propensity():
    pred, truth = _small()
    with pytest.raises(Exception, match="inverse propensities"):
        evaluate(pred, truth, metrics=["PSP"])
