"""R@k: hand-computed examples and agreement with napkinXC."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.metrics import evaluate


def test_hand_example():
    # row 0: truth {1, 3}, ranking 3, 1, 2; row 1: truth {0}, ranking 2, 0; row 2: no truth.
    truth = sp.csr_matrix(np.array([[0, 1, 0, 1, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=np.float32))
    pred = sp.csr_matrix(np.array([[0, 0.8, 0.8, 0.9, 0], [0.1, 0, 0.9, 0, 0], [0, 0, 0, 0, 0.5]], dtype=np.float32))
    got = evaluate(pred, truth, k=(1, 2, 100), metrics=["R"])
    assert got["R@1"] == pytest.approx(100 * (1 / 2 + 0 + 0) / 3)
    assert got["R@2"] == pytest.approx(100 * (2 / 2 + 1 + 0) / 3)  # the row without labels counts 0
    assert got["R@100"] == pytest.approx(100 * 2 / 3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_napkinxc(ref, seed):
    p = ref.make_problem(seed)
    ranked = ref.reference_ranking(p.predictions, p.filter, 10)
    expected = ref.napkin("R", ref.true_lists(p.truth), ranked, 10)
    got = evaluate(p.predictions, p.truth, k=range(1, 11), filter=p.filter, metrics=["R"])
    np.testing.assert_allclose([got[f"R@{k}"] for k in range(1, 11)], expected, rtol=0, atol=1e-9)


def test_single_metric_request():
    p_truth = sp.csr_matrix(np.eye(3, dtype=np.float32))
    scores = sp.csr_matrix(np.array([[0.1, 0.9, 0.5], [0.9, 0.1, 0.5], [0.1, 0.2, 0.3]], dtype=np.float32))
    # Ranks of the true label: 3, 3, 1.
    assert evaluate(scores, p_truth, metrics=["R@2"]) == {"R@2": pytest.approx(100 / 3)}
