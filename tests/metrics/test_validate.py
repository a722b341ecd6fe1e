"""Hostile matrices and parameters: every one is a one-line XmcbenchError, never a silent miss or a crash."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.errors import XmcbenchError
from xmcbench.metrics import (
    evaluate,
    evaluate_with_ci,
    inv_propensity,
    label_frequencies,
    paired_bootstrap,
    top_k,
)
from xmcbench.metrics.validate import check_number, check_sparse


def corrupt(shape=(3, 5), data=(1.0, 0.5, 0.2), indices=(0, 1, 2), indptr=(0, 1, 2, 3), fmt=sp.csr_matrix):
    """A matrix whose arrays are set after construction, as a buggy writer or a user could leave them."""
    m = fmt(shape, dtype=np.float32)
    m.data = np.asarray(data, dtype=np.float32)
    m.indices = np.asarray(indices, dtype=np.int32)
    m.indptr = np.asarray(indptr, dtype=np.int32)
    return m


TRUTH = sp.csr_matrix(np.eye(3, 5, dtype=np.float32))


@pytest.mark.parametrize(
    "matrix, message",
    [
        (corrupt(indices=(0, -1, 2)), r"label id -1 in row 1 is out of range 0\.\.4"),
        (corrupt(indices=(0, 1, 5)), r"label id 5 in row 2 is out of range"),
        (corrupt(indptr=(0, 2, 1, 3)), r"indptr decreases at row 1"),
        (corrupt(indptr=(1, 2, 3, 3)), r"indptr runs from 1"),
        (corrupt(indptr=(0, 1, 2, 2)), r"indptr runs from 0 to 2 .* \(3\)"),
        (corrupt(indptr=(0, 1, 3)), r"indptr has 3 entries .* needs 4"),
        (corrupt(data=(1.0, 0.5)), r"3 label ids but 2 values"),
        (corrupt(data=(1.0, np.nan, 0.2)), r"NaN value in row 1"),
        (sp.csr_matrix(np.array([[1, 0, 0, 0, 0]] * 3, dtype=np.complex64)), r"values have type complex64"),
        (sp.coo_matrix((np.ones(2), (np.array([0, 0]), np.array([1, 1]))), shape=(3, 5)), r"stored twice"),
    ],
    ids=[
        "negative-id",
        "id-too-large",
        "indptr-decreasing",
        "indptr-start",
        "indptr-end",
        "indptr-length",
        "data-length",
        "nan-score",
        "complex",
        "coo-repeat",
    ],
)
def test_corrupt_predictions_raise_one_clear_error(matrix, message):
    with pytest.raises(XmcbenchError, match=message) as info:
        evaluate(matrix, TRUTH)
    assert str(info.value).startswith("predictions: ") and "\n" not in str(info.value)


def test_corrupt_coo_and_csc_are_checked_before_conversion():
    coo = sp.coo_matrix((3, 5), dtype=np.float32)
    coo.row, coo.col, coo.data = np.array([0, 1]), np.array([1, -3]), np.ones(2, np.float32)
    with pytest.raises(XmcbenchError, match="label id -3"):
        evaluate(coo, TRUTH)
    csc = corrupt(indices=(0, 1, 7), indptr=(0, 1, 2, 3, 3, 3), fmt=sp.csc_matrix)
    with pytest.raises(XmcbenchError, match=r"row id 7 in column 2"):
        evaluate(csc, TRUTH)


def test_truth_filter_and_training_labels_are_validated_too():
    good = sp.csr_matrix(np.eye(3, 5, dtype=np.float32))
    with pytest.raises(XmcbenchError, match=r"^truth: label id -1"):
        evaluate(good, corrupt(indices=(0, -1, 2)))
    with pytest.raises(XmcbenchError, match=r"^truth: infinite value"):
        evaluate(good, corrupt(data=(1.0, np.inf, 1.0)))
    with pytest.raises(XmcbenchError, match=r"^filter: indptr decreases"):
        evaluate(good, good, filter=corrupt(indptr=(0, 2, 1, 3)))
    with pytest.raises(XmcbenchError, match=r"^training labels: label id 9"):
        inv_propensity(corrupt(indices=(0, 9, 1)), 0.55, 1.5)
    with pytest.raises(XmcbenchError, match="training labels"):
        label_frequencies(corrupt(data=(1.0, np.nan, 1.0)))


def test_infinite_scores_stay_valid_and_rank_at_the_ends():
    pred = corrupt(data=(-np.inf, np.inf, np.inf), indices=(0, 3, 1), indptr=(0, 2, 3, 3))
    got = evaluate(pred, TRUTH, k=(1, 2), metrics=["P@1", "R@1", "R@2"])
    assert got == {"P@1": pytest.approx(100 / 3), "R@1": pytest.approx(100 / 3), "R@2": pytest.approx(200 / 3)}


@pytest.mark.parametrize(
    "a, b",
    [
        (math.nan, 1.5),
        (0.55, math.inf),
        (math.inf, 1.5),
        (0.55, -math.inf),
        (1e308, 1.5),
        (1000.0, 1e300),
        ("x", 1.5),
        (0.55, -2.0),
    ],
)
def test_bad_propensity_parameters_are_refused(a, b):
    with pytest.raises(XmcbenchError, match="propensity"):
        inv_propensity(TRUTH, a, b)


def test_non_finite_inverse_propensities_are_refused():
    w = np.ones(5)
    w[2] = np.nan
    with pytest.raises(XmcbenchError, match="inv_propensity has NaN or infinite"):
        evaluate(TRUTH, TRUTH, inv_propensity=w)


def test_huge_k_is_exact_and_bounded_by_the_number_of_labels():
    rng = np.random.default_rng(0)
    pred = sp.random(20, 6, density=0.5, format="csr", random_state=1, dtype=np.float32)
    truth = sp.csr_matrix((rng.random((20, 6)) < 0.3).astype(np.float32))
    w = inv_propensity(truth, 0.55, 1.5)
    at_l = evaluate(pred, truth, k=6, inv_propensity=w)
    huge = 10**12
    got = evaluate(pred, truth, k=huge, inv_propensity=w)  # would need terabytes if anything were O(k)
    for family in ("nDCG", "R", "PSP", "PSnDCG"):  # normalised by the best possible: constant past L
        assert got[f"{family}@{huge}"] == pytest.approx(at_l[f"{family}@6"])
    assert got[f"P@{huge}"] == pytest.approx(at_l["P@6"] * 6 / huge)  # the denominator is k
    assert set(evaluate_with_ci(pred, truth, k=10**30, n_boot=5)) == {
        "P@" + str(10**30),
        "nDCG@" + str(10**30),
        "R@" + str(10**30),
    }
    assert set(paired_bootstrap(pred, pred, truth, k=huge, n_boot=5)) == {f"P@{huge}", f"nDCG@{huge}", f"R@{huge}"}


def test_top_k_pads_a_little_but_refuses_an_absurd_k():
    pred = sp.csr_matrix(np.eye(3, 5, dtype=np.float32))
    assert top_k(pred, 6).shape == (3, 6)
    with pytest.raises(XmcbenchError, match=r"k=1000000000000 is far above the number of labels \(5\)"):
        top_k(pred, 10**12)
    # padding beyond one ranking chunk (128k slots) but far from absurd: 20,000 rows x 10 slots past L
    many = sp.random(20_000, 90, density=0.05, format="csr", dtype=np.float32, random_state=0)
    ranked = top_k(many, 100)
    assert ranked.shape == (20_000, 100) and (ranked[:, 90:] == -1).all()


def test_check_sparse_accepts_every_format_of_a_valid_matrix():
    dense = np.array([[0, 1.5, 0], [2, 0, 0]], dtype=np.float32)
    for fmt in ("csr", "csc", "coo", "lil", "dok", "dia", "bsr"):
        got = check_sparse(sp.csr_matrix(dense).asformat(fmt), "m")
        assert isinstance(got, sp.csr_matrix) and np.array_equal(got.toarray(), dense)
    assert check_sparse(sp.csr_array(dense), "m").shape == (2, 3)
    with pytest.raises(XmcbenchError, match="expected a scipy.sparse matrix"):
        check_sparse(dense, "m")


def test_check_number():
    assert check_number("0.5", "--A") == 0.5
    with pytest.raises(XmcbenchError, match=r"^--B: must be a finite number > 0; got nan"):
        check_number(math.nan, "--B", low=0, low_open=True)
    with pytest.raises(XmcbenchError, match=r">= 1"):
        check_number(0, "x", low=1)


def test_evaluate_by_group_validates_training_labels():
    from xmcbench.metrics import evaluate_by_group

    with pytest.raises(XmcbenchError, match=r"^training labels: label id -1"):
        evaluate_by_group(TRUTH, TRUTH, corrupt(indices=(0, -1, 2)))
    with pytest.raises(XmcbenchError, match="training labels must be a scipy.sparse matrix"):
        evaluate_by_group(TRUTH, TRUTH, [[1, 0]])
