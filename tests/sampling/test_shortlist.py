"""Hard-negative shortlists (exact top-k) and sampling negatives from them."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from scipy import sparse

from xmcbench import paths
from xmcbench.errors import XmcbenchError
from xmcbench.sampling import shortlist as shortlist_module
from xmcbench.sampling.shortlist import ShortlistSchedule, build_shortlist, sample_hard_negatives


def _emb(n, n_labels, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)).astype(np.float32), rng.standard_normal((n_labels, d)).astype(np.float32)


def _random_csr(n, n_labels, per_row, seed):
    rng = np.random.default_rng(seed)
    rows, cols = [], []
    for i in range(n):
        c = rng.choice(n_labels, size=rng.integers(0, per_row + 1), replace=False)
        rows += [i] * len(c)
        cols += list(c)
    return sparse.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(n, n_labels))


def test_shortlist_is_exact_topk_best_first():
    q, l = _emb(50, 300)
    got = build_shortlist(q, l, k=20, device="cpu", query_chunk=7)
    assert got.shape == (50, 20) and got.dtype == np.int32
    scores = q.astype(np.float64) @ l.T.astype(np.float64)
    np.testing.assert_array_equal(got, np.argsort(-scores, axis=1, kind="stable")[:, :20])


def test_ties_go_to_the_lower_label_and_memory_maps_are_read(tmp_path):
    rng = np.random.default_rng(8)
    q = rng.integers(-1, 2, size=(20, 6)).astype(np.float32)  # integer scores: exact, many ties
    l = rng.integers(-1, 2, size=(30, 6)).astype(np.float32)
    np.save(tmp_path / "q.npy", q)
    np.save(tmp_path / "l.npy", l)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's "non-writable array" warning
        got = build_shortlist(
            np.load(tmp_path / "q.npy", mmap_mode="r"), np.load(tmp_path / "l.npy", mmap_mode="r"), k=12, device="cpu"
        )
    scores = q @ l.T
    labels = np.broadcast_to(np.arange(30), scores.shape)
    want = np.stack([np.lexsort((labels[i], -scores[i]))[:12] for i in range(20)])
    np.testing.assert_array_equal(got, want)


def test_excluded_pairs_are_never_shortlisted():
    q, l = _emb(40, 100, seed=1)
    exclude = _random_csr(40, 100, per_row=30, seed=2)
    got = build_shortlist(q, l, k=10, exclude=exclude, device="cpu")
    scores = q.astype(np.float64) @ l.T.astype(np.float64)
    scores[exclude.nonzero()] = -np.inf
    np.testing.assert_array_equal(got, np.argsort(-scores, axis=1, kind="stable")[:, :10])
    assert not exclude[np.repeat(np.arange(40), 10), got.ravel()].any()


def test_short_rows_are_padded():
    q, l = _emb(5, 8, seed=3)
    got = build_shortlist(q, l, k=12, device="cpu")
    assert (got[:, 8:] == -1).all() and (np.sort(got[:, :8], axis=1) == np.arange(8)).all()
    exclude = sparse.csr_matrix(np.eye(5, 8, dtype=np.float32))
    got = build_shortlist(q, l, k=8, exclude=exclude, device="cpu")
    assert (got[:, 7] == -1).all() and (got[:, :7] >= 0).all()


def test_written_atomically_to_path_and_memory_mapped(tmp_path):
    q, l = _emb(30, 60, seed=4)
    path = tmp_path / "run" / "shortlist.npy"
    got = build_shortlist(q, l, k=5, path=path, device="cpu")
    assert isinstance(got, np.memmap)
    np.testing.assert_array_equal(got, build_shortlist(q, l, k=5, device="cpu"))
    assert sorted(os.listdir(path.parent)) == ["shortlist.npy"]  # no temp file left behind


def test_large_shortlists_go_to_a_memory_map(monkeypatch):
    monkeypatch.setattr(shortlist_module, "MEMMAP_THRESHOLD_BYTES", 0)
    q, l = _emb(30, 60, seed=5)
    got = build_shortlist(q, l, k=5, device="cpu")
    assert isinstance(got, np.memmap)
    assert str(paths.cache_dir()) in str(got.filename)
    assert os.listdir(paths.cache_dir() / "shortlists") == []  # anonymous: unlinked once mapped
    np.testing.assert_array_equal(np.asarray(got), build_shortlist(q, l, k=5, device="cpu", query_chunk=3))


def test_bad_shapes_are_errors():
    q, l = _emb(4, 10)
    with pytest.raises(XmcbenchError, match="dimension"):
        build_shortlist(q, l[:, :3], k=2)
    with pytest.raises(XmcbenchError, match="exclusion matrix"):
        build_shortlist(q, l, k=2, exclude=sparse.csr_matrix((3, 10), dtype=np.float32))


def test_hard_negatives_come_from_the_shortlist_and_are_never_positive():
    positives = _random_csr(64, 200, per_row=8, seed=6)
    shortlist = np.stack([np.random.default_rng(i).choice(200, size=30, replace=False) for i in range(64)])
    # Put some positives into the shortlist, as search without exclusion does.
    for i in range(64):
        pos = positives[i].indices
        shortlist[i, : min(5, pos.size)] = pos[:5]
    out = sample_hard_negatives(shortlist, positives, 6, np.random.default_rng(0))
    assert out.shape == (64, 6)
    for i in range(64):
        assert len(set(out[i])) == 6
        assert set(out[i]) <= set(shortlist[i]) - set(positives[i].indices)
    again = sample_hard_negatives(shortlist, positives, 6, np.random.default_rng(0))
    np.testing.assert_array_equal(out, again)


def test_hard_negatives_are_uniform_over_the_usable_shortlist():
    positives = sparse.csr_matrix(([1.0, 1.0], ([0, 0], [3, 7])), shape=(1, 50))
    shortlist = np.array([[3, 10, 11, 7, 12, 13, 14, 15, -1]])
    n = 20000
    out = sample_hard_negatives(
        np.repeat(shortlist, n, axis=0), sparse.vstack([positives] * n).tocsr(), 2, np.random.default_rng(1)
    )
    freq = np.bincount(out.ravel(), minlength=50)
    assert set(np.flatnonzero(freq)) == {10, 11, 12, 13, 14, 15}
    expected = 2 / 6
    assert np.abs(freq[10:16] / n - expected).max() < 4 * np.sqrt(expected * (1 - expected) / n)


def test_short_shortlists_are_filled_with_random_non_positives():
    positives = _random_csr(20, 40, per_row=10, seed=7)
    shortlist = np.full((20, 4), -1)
    shortlist[:, 0] = 5
    out = sample_hard_negatives(shortlist, positives, 8, np.random.default_rng(2))
    for i in range(20):
        pos = set(positives[i].indices)
        assert len(set(out[i])) == 8 and (out[i] >= 0).all() and not (set(out[i]) & pos)
        if 5 not in pos:
            assert 5 in out[i]


def test_tiny_label_space_pads_with_minus_one():
    positives = sparse.csr_matrix(np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=np.float32))
    out = sample_hard_negatives(np.full((2, 3), -1), positives, 3, np.random.default_rng(0))
    assert sorted(out[0][out[0] >= 0]) == [3, 4] and (out[0] == -1).sum() == 1
    assert (out[1] == -1).all()


def test_zero_negatives_and_bad_input():
    positives = _random_csr(3, 10, per_row=2, seed=0)
    assert sample_hard_negatives(np.zeros((3, 4)), positives, 0, np.random.default_rng(0)).shape == (3, 0)
    with pytest.raises(XmcbenchError, match="rows of positives"):
        sample_hard_negatives(np.zeros((2, 4)), positives, 1, np.random.default_rng(0))


def test_shortlist_schedule():
    s = ShortlistSchedule(refresh_every=5)
    assert [e for e in range(16) if s.due(e)] == [0, 5, 10, 15]
    s = ShortlistSchedule(refresh_every=3, start_epoch=2)
    assert [e for e in range(10) if s.due(e)] == [2, 5, 8]
    with pytest.raises(XmcbenchError):
        ShortlistSchedule(refresh_every=0)


def test_failed_build_leaves_no_file(monkeypatch, tmp_path):
    monkeypatch.setattr(shortlist_module, "MEMMAP_THRESHOLD_BYTES", 0)
    calls = {"n": 0}
    real = shortlist_module.exact_topk

    def fail_second_chunk(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("out of memory")
        return real(*args, **kwargs)

    monkeypatch.setattr(shortlist_module, "exact_topk", fail_second_chunk)
    q, l = _emb(30, 60, seed=9)
    with pytest.raises(RuntimeError):
        build_shortlist(q, l, k=5, device="cpu", query_chunk=10)
    assert os.listdir(paths.cache_dir() / "shortlists") == []
    calls["n"] = 0
    with pytest.raises(RuntimeError):
        build_shortlist(q, l, k=5, device="cpu", query_chunk=10, path=tmp_path / "out" / "s.npy")
    assert os.listdir(tmp_path / "out") == []
