"""Inverse propensities (Jain et al. 2016): hand computation and agreement with napkinXC."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.errors import XmcbenchError
from xmcbench.metrics import inv_propensity, label_frequencies


def test_hand_computed():
    # 4 training rows; label 0 in 3 rows, label 1 in 1 row, label 2 in none.
    train = sp.csr_matrix(np.array([[1, 0, 0], [1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=np.float32))
    A, B = 0.55, 1.5
    c = (math.log(4) - 1) * (B + 1) ** A
    expected = [1 + c * (3 + B) ** -A, 1 + c * (1 + B) ** -A, 1 + c * (0 + B) ** -A]
    np.testing.assert_allclose(inv_propensity(train, A, B), expected, rtol=1e-15)


def test_rare_labels_weigh_more():
    train = sp.csr_matrix(np.array([[1, 1, 0], [1, 0, 0], [1, 0, 0], [1, 0, 0], [0, 0, 0]] * 20, dtype=np.float32))
    w = inv_propensity(train, 0.6, 2.6)
    assert w[2] > w[1] > w[0] > 1.0


@pytest.mark.parametrize(("A", "B"), [(0.55, 1.5), (0.6, 2.6), (0.5, 0.4)])
def test_matches_napkinxc(A, B):
    import napkinxc.metrics as nm

    rng = np.random.default_rng(0)
    train = sp.csr_matrix((rng.random((500, 80)) < rng.random(80) ** 2).astype(np.float64))
    np.testing.assert_allclose(inv_propensity(train, A, B), nm.Jain_et_al_inverse_propensity(train, A, B), rtol=1e-13)


def test_training_labels_are_binarised():
    weighted = sp.csr_matrix(np.array([[2.5, 0], [1, 1], [0, 0]], dtype=np.float32))
    assert label_frequencies(weighted).tolist() == [2, 1]


def test_empty_training_set_is_an_error():
    with pytest.raises(XmcbenchError, match="at least one training row"):
        inv_propensity(sp.csr_matrix((0, 5)), 0.55, 1.5)


@pytest.mark.parametrize("n_rows", [1, 2])
def test_fewer_than_three_training_rows_are_refused(n_rows):
    # ln(2) - 1 < 0 would make the weights negative: PSP@1 0 where P@1 is 50
    with pytest.raises(XmcbenchError, match=rf"at least 3 training rows \(ln N > 1\); got {n_rows}"):
        inv_propensity(sp.csr_matrix(np.eye(n_rows, 5, dtype=np.float32)), 0.55, 1.5)
    assert (inv_propensity(sp.csr_matrix(np.eye(3, 5, dtype=np.float32)), 0.55, 1.5) >= 1).all()
