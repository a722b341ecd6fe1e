"""Dataset statistics on hand-made matrices whose answers are counted by hand."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.data import stats
from xmcbench.data.stats import HEAD, TAIL, TORSO, dataset_stats, label_frequency_groups, stats_rows


def _csr(rows: list[list[int]], n_labels: int) -> sp.csr_matrix:
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.array([i for r in rows for i in r], dtype=np.int64)
    return sp.csr_matrix((np.ones(len(indices), dtype=np.float32), indices, indptr), shape=(len(rows), n_labels))


def test_group_thresholds():
    counts = np.array([0, 1, 10, 11, 100, 101, 5000])
    assert label_frequency_groups(counts).tolist() == [TAIL, TAIL, TAIL, TORSO, TORSO, HEAD, HEAD]


def test_tiny_dataset_stats():
    # 5 labels; label 0 in 3 train rows, label 1 in 1, labels 2-3 never in train, label 4 in 1
    train = _csr([[0, 1], [0], [], [0, 4]], 5)
    test = _csr([[2], [0, 3], []], 5)
    stats = dataset_stats(train, test, np.array([3, 0, 5, 2]), np.array([1, 1, 0]), np.array([4, 0, 0, 2, 1]))
    assert stats["labels"] == 5
    assert stats["train"] == {
        "queries": 4,
        "positives": 5,
        "avg_labels_per_query": 1.25,
        "max_labels_per_query": 2,
        "empty_rows": 1,
        "empty_texts": 1,
    }
    assert stats["test"] == {
        "queries": 3,
        "positives": 3,
        "avg_labels_per_query": 1.0,
        "max_labels_per_query": 2,
        "empty_rows": 1,
        "empty_texts": 1,
    }
    assert stats["avg_queries_per_label"] == 1.0  # 5 train positives / 5 labels
    assert stats["label_groups"] == {"head": 0, "torso": 0, "tail": 5}
    assert stats["labels_without_train_queries"] == 2
    assert stats["test_labels_unseen_in_train"] == 2  # labels 2 and 3
    assert stats["label_empty_texts"] == 2


def test_head_and_torso_counts():
    rows = [[0]] * 101 + [[1]] * 11 + [[2]] * 10
    train = _csr(rows, 4)
    stats = dataset_stats(train, _csr([[3]], 4), np.ones(len(rows)), np.ones(1), np.ones(4))
    assert stats["label_groups"] == {"head": 1, "torso": 1, "tail": 2}


def test_rows_for_display():
    train = _csr([[0, 1]], 2)
    rows = dict(stats_rows(dataset_stats(train, train, np.ones(1), np.ones(1), np.ones(2))))
    assert rows["train queries"] == "1" and rows["train avg labels / query"] == "2.00"
    assert rows["head labels (>100 train positives)"] == "0" and rows["tail labels (<=10)"] == "2"


def test_label_counts_across_chunks(monkeypatch):
    rng = np.random.default_rng(0)
    labels = sp.random(500, 40, density=0.2, format="csr", random_state=rng)
    expected = np.bincount(labels.indices, minlength=40)
    for chunk in (1, 7, 1 << 22):
        monkeypatch.setattr(stats, "_COUNT_CHUNK", chunk)
        counts = stats.label_counts(labels, 40)
        assert counts.dtype == np.int64 and counts.tolist() == expected.tolist()
    assert stats.label_counts(sp.csr_matrix((3, 5)), 5).tolist() == [0] * 5
    with pytest.raises(ValueError, match=r"label indices must lie in 0\.\.39, got 47\.\.47"):
        stats.label_counts(sp.csr_matrix(([1.0], ([0], [47])), shape=(1, 48)), 40)
