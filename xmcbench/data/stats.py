"""Dataset statistics shown by ``xmcbench datasets info`` and stored in a prepared cache's meta.json.

Pure functions of the label matrices and text lengths:

- queries per split, labels, positives (non-zeros);
- average labels per query (per split) and average training queries per label (the XC
  repository's "avg. points per label": training positives / labels);
- head / torso / tail label counts by training positives, as UniDEC defines them: head > 100,
  torso 11..100 (the "10-100" band without 10, which belongs to the tail), tail <= 10 (labels
  with no training query are tail too, and are also counted on their own);
- empty rows (queries without labels), labels without training queries, test labels never seen
  in training, empty texts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

HEAD_MIN_POSITIVES = 101  # head: > 100 training positives
TAIL_MAX_POSITIVES = 10  # tail: <= 10 training positives
HEAD, TORSO, TAIL = 0, 1, 2


_COUNT_CHUNK = 1 << 22


def label_counts(labels: sp.csr_matrix, n_labels: int) -> np.ndarray:
    """Positives per label (column non-zeros), int64 of length ``n_labels``.

    Counted in chunks: bincount widens int32 indices to intp first, and on a whole 1.3M-label
    train split that fresh 370 MB copy cost more than the counting (0.4 s a split, 0.2 s in chunks).
    """
    indices = np.asarray(labels.indices)
    if indices.size and (indices.min() < 0 or indices.max() >= n_labels):
        raise ValueError(f"label indices must lie in 0..{n_labels - 1}, got {indices.min()}..{indices.max()}")
    counts = np.zeros(n_labels, dtype=np.int64)
    for start in range(0, indices.size, _COUNT_CHUNK):
        counts += np.bincount(indices[start : start + _COUNT_CHUNK], minlength=n_labels)
    return counts


@dataclass(frozen=True)
class SplitLabels:
    """What the statistics need of a split's label matrix: its row pointers and positives per label.

    ``prepare`` builds it while it streams a split to disk, without ever holding the matrix.
    """

    indptr: np.ndarray  # (queries + 1,) int64
    label_counts: np.ndarray  # (labels,) int64

    @classmethod
    def of(cls, labels: sp.csr_matrix) -> SplitLabels:
        return cls(np.asarray(labels.indptr, dtype=np.int64), label_counts(labels, labels.shape[1]))

    @property
    def n_queries(self) -> int:
        return len(self.indptr) - 1

    @property
    def positives(self) -> int:
        return int(self.indptr[-1])


def _split_labels(labels: SplitLabels | sp.csr_matrix) -> SplitLabels:
    return labels if isinstance(labels, SplitLabels) else SplitLabels.of(sp.csr_matrix(labels))


def label_frequency_groups(train_counts: np.ndarray) -> np.ndarray:
    """HEAD (0) / TORSO (1) / TAIL (2) per label from its number of training positives."""
    counts = np.asarray(train_counts)
    groups = np.full(counts.shape, TORSO, dtype=np.int8)
    groups[counts >= HEAD_MIN_POSITIVES] = HEAD
    groups[counts <= TAIL_MAX_POSITIVES] = TAIL
    return groups


def split_stats(labels: SplitLabels | sp.csr_matrix, text_lengths: np.ndarray) -> dict:
    """Statistics of one split: ``labels`` (n_queries, n_labels), ``text_lengths`` bytes per query text."""
    labels = _split_labels(labels)
    per_query = np.diff(labels.indptr)
    n, positives = labels.n_queries, labels.positives
    return {
        "queries": int(n),
        "positives": positives,
        "avg_labels_per_query": float(positives / n) if n else 0.0,
        "max_labels_per_query": int(per_query.max()) if n else 0,
        "empty_rows": int(np.count_nonzero(per_query == 0)),
        "empty_texts": int(np.count_nonzero(np.asarray(text_lengths) == 0)),
    }


def dataset_stats(
    train: SplitLabels | sp.csr_matrix,
    test: SplitLabels | sp.csr_matrix,
    train_text_lengths: np.ndarray,
    test_text_lengths: np.ndarray,
    label_text_lengths: np.ndarray,
) -> dict:
    """All statistics of a dataset as a JSON-ready dict (see module docstring)."""
    train, test = _split_labels(train), _split_labels(test)
    train_counts, test_counts = train.label_counts, test.label_counts
    n_labels = len(train_counts)
    if len(test_counts) != n_labels:
        raise ValueError(f"train and test have {n_labels} and {len(test_counts)} labels; they must share one label set")
    groups = label_frequency_groups(train_counts)
    return {
        "labels": int(n_labels),
        "train": split_stats(train, train_text_lengths),
        "test": split_stats(test, test_text_lengths),
        "avg_queries_per_label": float(train.positives / n_labels) if n_labels else 0.0,
        "label_groups": {
            "head": int(np.count_nonzero(groups == HEAD)),
            "torso": int(np.count_nonzero(groups == TORSO)),
            "tail": int(np.count_nonzero(groups == TAIL)),
        },
        "labels_without_train_queries": int(np.count_nonzero(train_counts == 0)),
        "test_labels_unseen_in_train": int(np.count_nonzero((test_counts > 0) & (train_counts == 0))),
        "label_empty_texts": int(np.count_nonzero(np.asarray(label_text_lengths) == 0)),
    }


def stats_rows(stats: dict) -> list[tuple[str, str]]:
    """``(name, value)`` rows for a terminal table of ``dataset_stats`` output."""
    rows = [("labels", f"{stats['labels']:,}")]
    for split in ("train", "test"):
        s = stats[split]
        rows += [
            (f"{split} queries", f"{s['queries']:,}"),
            (f"{split} avg labels / query", f"{s['avg_labels_per_query']:.2f}"),
            (f"{split} max labels / query", f"{s['max_labels_per_query']:,}"),
            (f"{split} queries without labels", f"{s['empty_rows']:,}"),
            (f"{split} empty texts", f"{s['empty_texts']:,}"),
        ]
    g = stats["label_groups"]
    rows += [
        ("avg train queries / label", f"{stats['avg_queries_per_label']:.2f}"),
        ("head labels (>100 train positives)", f"{g['head']:,}"),
        ("torso labels (11-100)", f"{g['torso']:,}"),
        ("tail labels (<=10)", f"{g['tail']:,}"),
        ("labels without train queries", f"{stats['labels_without_train_queries']:,}"),
        ("test labels unseen in train", f"{stats['test_labels_unseen_in_train']:,}"),
        ("labels with empty text", f"{stats['label_empty_texts']:,}"),
    ]
    return rows
