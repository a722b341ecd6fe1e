"""The in-batch label pool against a plain Python loop reference, and its accounting."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import sparse

from xmcbench.errors import XmcbenchError
from xmcbench.sampling.pool import PoolAccounting, build_label_pool
from xmcbench.sampling.positives import sample_positives
from xmcbench.sampling.shortlist import sample_hard_negatives


def _random_labels(n, n_labels, seed):
    rng = np.random.default_rng(seed)
    dense = rng.random((n, n_labels)) < rng.uniform(0.0, 0.3, size=(n, 1))  # some rows empty, some heavy
    return sparse.csr_matrix(dense.astype(np.float32))


def _reference(labels, rows, positives, negatives):
    members = set()
    for arr in (positives, negatives):
        members |= {int(x) for x in arr.ravel() if x >= 0}
    pool = sorted(members)
    targets = np.zeros((len(rows), len(pool)), dtype=bool)
    for i, r in enumerate(rows):
        owned = set(labels[r].indices.tolist())
        for j, label in enumerate(pool):
            targets[i, j] = label in owned
    return np.array(pool, dtype=np.int64), targets


@pytest.mark.parametrize("seed", range(4))
def test_matches_loop_reference(seed):
    labels = _random_labels(80, 120, seed)
    rng = np.random.default_rng(seed)
    rows = rng.choice(80, size=24, replace=False)
    positives = sample_positives(labels, rows, 3, rng)
    shortlist = np.stack([rng.choice(120, size=15, replace=False) for _ in rows])
    negatives = sample_hard_negatives(shortlist, labels[rows], 4, rng)
    pool = build_label_pool(labels, rows, positives, negatives)
    ref_labels, ref_targets = _reference(labels, rows, positives, negatives)
    np.testing.assert_array_equal(pool.labels, ref_labels)
    np.testing.assert_array_equal(pool.targets, ref_targets)
    np.testing.assert_array_equal(pool.tensors()["targets"].numpy(), ref_targets)
    np.testing.assert_array_equal(pool.tensors()["labels"].numpy(), ref_labels)
    assert pool.size == ref_labels.size
    # slots point back at the sampled labels
    np.testing.assert_array_equal(np.where(pool.positive_slots >= 0, pool.labels[pool.positive_slots], -1), positives)
    np.testing.assert_array_equal(np.where(pool.negative_slots >= 0, pool.labels[pool.negative_slots], -1), negatives)
    np.testing.assert_array_equal(pool.positives_in_pool, ref_targets.sum(1))
    np.testing.assert_array_equal(pool.sampled_positives, (positives >= 0).sum(1))
    np.testing.assert_array_equal(pool.hard_negatives, (negatives >= 0).sum(1))
    # every sampled positive is a target of its own row; no hard negative is
    b = np.repeat(np.arange(len(rows))[:, None], positives.shape[1], axis=1)
    assert pool.targets[b[positives >= 0], pool.positive_slots[positives >= 0]].all()
    b = np.repeat(np.arange(len(rows))[:, None], negatives.shape[1], axis=1)
    assert not pool.targets[b[negatives >= 0], pool.negative_slots[negatives >= 0]].any()


def test_another_querys_sample_is_a_positive_of_every_query_that_owns_it():
    # query 0 owns {1, 2}, query 1 owns {2, 3}; each sampled one label only
    labels = sparse.csr_matrix(np.array([[0, 1, 1, 0, 0], [0, 0, 1, 1, 0]], dtype=np.float32))
    pool = build_label_pool(labels, np.array([0, 1]), np.array([[1], [2]]), np.array([[3], [4]]))
    np.testing.assert_array_equal(pool.labels, [1, 2, 3, 4])
    # label 2 was sampled for query 1 but is a positive of query 0 too; label 3, query 0's hard
    # negative, is an unsampled positive of query 1 (UniDEC's "extra" positives).
    np.testing.assert_array_equal(pool.targets, [[True, True, False, False], [False, True, True, False]])
    np.testing.assert_array_equal(pool.positives_in_pool, [2, 2])


def test_without_hard_negatives_and_with_empty_rows():
    labels = sparse.csr_matrix(np.array([[1, 0, 0], [0, 0, 0]], dtype=np.float32))
    pool = build_label_pool(labels, np.array([0, 1]), np.array([[0, -1], [-1, -1]]))
    np.testing.assert_array_equal(pool.labels, [0])
    np.testing.assert_array_equal(pool.targets, [[True], [False]])
    assert pool.negative_slots.shape == (2, 0)
    t = pool.tensors()
    assert t["labels"].dtype == torch.int64 and t["targets"].dtype == torch.bool and t["targets"].shape == (2, 1)


def test_label_out_of_range_is_an_error():
    labels = sparse.csr_matrix(np.eye(2, 3, dtype=np.float32))
    with pytest.raises(XmcbenchError, match="only 3 labels"):
        build_label_pool(labels, np.array([0]), np.array([[5]]))


def test_accounting_summary():
    labels = sparse.csr_matrix(np.array([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 1]], dtype=np.float32))
    acc = PoolAccounting()
    acc.update(build_label_pool(labels, np.array([0, 1]), np.array([[0], [1]]), np.array([[2], [3]])))
    acc.update(build_label_pool(labels, np.array([2]), np.array([[3]])))
    s = acc.summary()
    assert s["steps"] == 2 and s["batch_size_mean"] == 1.5 and s["batch_size_max"] == 2
    assert s["pool_size_mean"] == (4 + 1) / 2 and s["pool_size_max"] == 4
    assert s["positives_in_pool_per_query_mean"] == (2 + 2 + 1) / 3 and s["positives_in_pool_per_query_max"] == 2
    assert s["sampled_positives_per_query_mean"] == 1.0
    assert s["hard_negatives_per_query_mean"] == 2 / 3
    restored = PoolAccounting()
    restored.load_state_dict(acc.state_dict())
    assert restored.summary() == s


def test_cap_pool_negatives_keeps_every_positive_and_reports_the_uncapped_size():
    from xmcbench.sampling import cap_pool_negatives

    positives = np.array([[0, 1], [1, -1], [2, 3]])
    negatives = np.array([[4, 5, 6], [5, 7, 0], [8, 9, 4]])  # 0 is also a positive (of another query)
    rng = np.random.default_rng(0)
    capped, uncapped = cap_pool_negatives(positives, negatives, 7, rng)
    assert uncapped == 10  # {0, 1, 2, 3} ∪ {4, 5, 6, 7, 8, 9}
    kept = set(positives[positives >= 0].tolist()) | set(capped[capped >= 0].tolist())
    assert len(kept) == 7 and {0, 1, 2, 3} <= kept
    assert capped[1, 2] == 0  # a negative that is some query's positive stays (it is in the pool anyway)
    # a dropped label is dropped everywhere it was drawn
    assert all((capped[negatives == label] == -1).all() for label in range(4, 10) if label not in kept)
    same, n = cap_pool_negatives(positives, negatives, None, rng)
    assert n == 10 and (same == negatives).all()
    tiny, _ = cap_pool_negatives(positives, negatives, 3, rng)  # below the positives: no negative-only label left
    assert set(tiny[tiny >= 0].tolist()) <= {0, 1, 2, 3}
