"""Head / torso / tail: group boundaries, restricted and contribution modes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.errors import XmcbenchError
from xmcbench.metrics import evaluate, evaluate_by_group, label_groups


def _train_with_counts(counts):
    """Training matrix whose label l appears in exactly counts[l] rows."""
    n = max(counts) + 1
    dense = np.zeros((n, len(counts)), dtype=np.float32)
    for label, c in enumerate(counts):
        dense[:c, label] = 1
    return sp.csr_matrix(dense)


def test_boundaries():
    train = _train_with_counts([0, 1, 10, 11, 100, 101, 500])
    g = label_groups(train)
    assert g["tail"].tolist() == [True, True, True, False, False, False, False]
    assert g["torso"].tolist() == [False, False, False, True, True, False, False]
    assert g["head"].tolist() == [False, False, False, False, False, True, True]


def _problem():
    # labels 0, 1 head (200 training rows), 2, 3 tail (2 training rows)
    train = _train_with_counts([200, 200, 2, 2])
    truth = sp.csr_matrix(np.array([[1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]], dtype=np.float32))
    pred = sp.csr_matrix(np.array([[0.9, 0.8, 0.7, 0.0], [0.2, 0.9, 0.0, 0.1], [0.9, 0.0, 0.5, 0.4]], dtype=np.float32))
    return pred, truth, train


def test_restricted_mode_by_hand():
    pred, truth, train = _problem()
    got = evaluate_by_group(pred, truth, train, k=1, metrics=["P"])
    # head: rows 0 and 1 have head labels; predictions restricted to labels {0, 1}: row 0 -> 0 (hit),
    # row 1 -> 1 (hit).
    assert got["head"] == {"labels": 2, "rows": 2, "scores": {"P@1": 100.0}}
    # tail: rows 0 and 2; predictions restricted to {2, 3}: row 0 -> 2 (hit), row 2 -> 2 (miss).
    assert got["tail"] == {"labels": 2, "rows": 2, "scores": {"P@1": 50.0}}
    assert got["torso"] == {"labels": 0, "rows": 0, "scores": {}}


def test_contribution_mode_adds_up_to_overall_precision(ref):
    p = ref.make_problem(3)
    overall = evaluate(p.predictions, p.truth, k=(1, 3, 5), filter=p.filter, metrics=["P"])
    groups = evaluate_by_group(
        p.predictions, p.truth, p.train, k=(1, 3, 5), filter=p.filter, metrics=["P"], mode="contribution"
    )
    for name, value in overall.items():
        assert sum(g["scores"][name] for g in groups.values()) == pytest.approx(value)
    assert all(g["rows"] == p.truth.shape[0] for g in groups.values())


def test_restricted_mode_equals_evaluating_the_restricted_problem(ref):
    p = ref.make_problem(5)
    groups = evaluate_by_group(
        p.predictions, p.truth, p.train, k=(1, 3), inv_propensity=p.inv_propensity, filter=p.filter
    )
    for name, keep in label_groups(p.train).items():
        t = p.truth.tocoo()
        t_kept = sp.csr_matrix((t.data[keep[t.col]], (t.row[keep[t.col]], t.col[keep[t.col]])), shape=t.shape)
        rows = np.flatnonzero(t_kept.getnnz(axis=1) > 0)
        src = p.predictions[rows].tocoo()  # stored zero scores stay stored through COO
        on = keep[src.col]
        pred_kept = sp.csr_matrix((src.data[on], (src.row[on], src.col[on])), shape=src.shape)
        assert groups[name]["rows"] == rows.size and groups[name]["labels"] == keep.sum()
        if rows.size:
            expected = evaluate(
                pred_kept, t_kept[rows], k=(1, 3), inv_propensity=p.inv_propensity, filter=p.filter[rows]
            )
            assert groups[name]["scores"] == pytest.approx(expected)


def test_bad_mode_and_shape():
    pred, truth, train = _problem()
    with pytest.raises(XmcbenchError, match="mode"):
        evaluate_by_group(pred, truth, train, mode="deciles")
    with pytest.raises(XmcbenchError, match="same label set"):
        evaluate_by_group(pred, truth, sp.csr_matrix((5, 7)))
