"""Balanced hierarchical 2-means: balance, partition, determinism and recovery of planted clusters."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from xmcbench.errors import XmcbenchError
from xmcbench.sampling.clustering import balanced_kmeans, n_clusters_for_size


def _check_partition(clusters, n):
    flat = np.concatenate(clusters)
    assert flat.size == n
    np.testing.assert_array_equal(np.sort(flat), np.arange(n))
    sizes = [len(c) for c in clusters]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("n,n_clusters", [(1, 1), (7, 4), (8, 8), (1000, 16), (999, 64), (513, 2), (300, 256)])
def test_clusters_partition_and_are_balanced(n, n_clusters):
    emb = np.random.default_rng(n).standard_normal((n, 12)).astype(np.float32)
    clusters = balanced_kmeans(emb, n_clusters, seed=1)
    assert len(clusters) == n_clusters
    assert all(c.dtype == np.int64 for c in clusters)
    _check_partition(clusters, n)


def test_same_seed_same_clusters_and_input_untouched():
    emb = np.random.default_rng(0).standard_normal((600, 16)).astype(np.float32)
    before = emb.copy()
    a = balanced_kmeans(emb, 32, seed=3)
    b = balanced_kmeans(emb, 32, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    np.testing.assert_array_equal(emb, before)


def test_accepts_torch_and_half_precision():
    emb = np.random.default_rng(0).standard_normal((200, 8)).astype(np.float32)
    ref = balanced_kmeans(emb, 8, seed=0)
    from_torch = balanced_kmeans(torch.from_numpy(emb), 8, seed=0)
    assert all(np.array_equal(x, y) for x, y in zip(ref, from_torch))
    _check_partition(balanced_kmeans(emb.astype(np.float16), 8, seed=0), 200)


def test_accepts_read_only_memory_maps(tmp_path):
    emb = np.random.default_rng(0).standard_normal((100, 8)).astype(np.float16)
    np.save(tmp_path / "emb.npy", emb)
    mapped = np.load(tmp_path / "emb.npy", mmap_mode="r")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's "non-writable array" warning
        got = balanced_kmeans(mapped, 4, seed=0)
    assert all(np.array_equal(x, y) for x, y in zip(got, balanced_kmeans(emb, 4, seed=0)))


def _blobs(n_blobs: int, per_blob: int, dim: int, noise: float, seed: int):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n_blobs, dim))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    truth = np.repeat(np.arange(n_blobs), per_blob)
    emb = centers[truth] + noise * rng.standard_normal((truth.size, dim)) / np.sqrt(dim)
    perm = rng.permutation(truth.size)  # planted clusters must not be contiguous in the input
    return emb[perm].astype(np.float32), truth[perm]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_planted_clusters(seed):
    emb, truth = _blobs(n_blobs=16, per_blob=40, dim=64, noise=0.3, seed=seed)
    clusters = balanced_kmeans(emb, 16, seed=seed)
    for c in clusters:
        assert np.unique(truth[c]).size == 1, "a found cluster mixes planted clusters"
    assert sorted(np.unique(truth[c])[0] for c in clusters) == list(range(16))


def test_clusters_are_tighter_than_random_groups():
    emb, _ = _blobs(n_blobs=64, per_blob=20, dim=32, noise=1.0, seed=5)  # heavily overlapping blobs
    x = emb / np.linalg.norm(emb, axis=1, keepdims=True)

    def mean_sim_to_centroid(groups):
        total = 0.0
        for g in groups:
            total += np.linalg.norm(x[g].sum(0))
        return total / len(x)

    found = mean_sim_to_centroid(balanced_kmeans(emb, 64, seed=0))
    random_groups = np.array_split(np.random.default_rng(0).permutation(len(x)), 64)
    assert found > mean_sim_to_centroid(random_groups) + 0.2


def test_cluster_size_picks_smallest_power_of_two():
    assert n_clusters_for_size(1000, 100) == 16
    assert n_clusters_for_size(1024, 64) == 16
    assert n_clusters_for_size(10, 100) == 1
    assert n_clusters_for_size(5, 1) == 4  # capped: every cluster needs a point
    emb = np.random.default_rng(0).standard_normal((1000, 8)).astype(np.float32)
    clusters = balanced_kmeans(emb, cluster_size=100)
    assert len(clusters) == 16 and max(len(c) for c in clusters) <= 100


def test_bad_arguments_are_errors():
    emb = np.zeros((10, 4), dtype=np.float32)
    with pytest.raises(XmcbenchError, match="power of two"):
        balanced_kmeans(emb, 6)
    with pytest.raises(XmcbenchError, match="every cluster needs a point"):
        balanced_kmeans(emb, 16)
    with pytest.raises(XmcbenchError, match="exactly one"):
        balanced_kmeans(emb)
    with pytest.raises(XmcbenchError, match="exactly one"):
        balanced_kmeans(emb, 2, cluster_size=5)
    with pytest.raises(XmcbenchError, match=r"\(N, d\)"):
        balanced_kmeans(np.zeros(10, dtype=np.float32), 2)
