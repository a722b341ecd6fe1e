"""PSnDCG@k: hand-computed example and agreement with napkinXC."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.metrics import evaluate, rank_truth
from xmcbench.metrics.psndcg import components

W = np.array([1.0, 2.0, 3.0, 4.0, 5.0])


def test_hand_example():
    # row 0: truth {1, 3}, ranking 3, 1; row 1: truth {0}, ranking 2, 0; row 2: no truth.
    truth = sp.csr_matrix(np.array([[0, 1, 0, 1, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=np.float32))
    pred = sp.csr_matrix(np.array([[0, 0.8, 0.8, 0.9, 0], [0.1, 0, 0.9, 0, 0], [0, 0, 0, 0, 0.5]], dtype=np.float32))
    d2 = 1 / math.log2(3)
    idcg0, idcg1 = 1 + d2, 1.0
    num0 = (4 + 2 * d2) / idcg0  # labels 3 then 1, both true
    den0 = (4 + 2 * d2) / idcg0  # ideal: weights 4 then 2
    num1 = (1 * d2) / idcg1  # label 0 at rank 2
    den1 = 1.0 / idcg1
    got = evaluate(pred, truth, k=2, inv_propensity=W, metrics=["PSnDCG"])
    assert got["PSnDCG@2"] == pytest.approx(100 * (num0 + num1) / (den0 + den1))
    num, den = components(rank_truth(pred, truth, 2, inv_propensity=W), 2)
    np.testing.assert_allclose(num, [num0, num1, 0.0])
    np.testing.assert_allclose(den, [den0, den1, 0.0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_napkinxc(ref, seed):
    p = ref.make_problem(seed)
    ranked = ref.reference_ranking(p.predictions, p.filter, 5)
    expected = ref.napkin("PSnDCG", ref.true_lists(p.truth), ranked, 5, p.inv_propensity)
    got = evaluate(
        p.predictions, p.truth, k=ref.K, inv_propensity=p.inv_propensity, filter=p.filter, metrics=["PSnDCG"]
    )
    np.testing.assert_allclose([got[f"PSnDCG@{k}"] for k in ref.K], expected, rtol=0, atol=1e-9)
