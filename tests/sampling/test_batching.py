"""Batch samplers: permutations, NGAME cluster batches, exact resume, and the cluster schedule."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from xmcbench.errors import XmcbenchError
from xmcbench.sampling.batching import ClusterBatchSampler, ClusterSchedule, ClusterStep, RandomBatchSampler


def _epoch(sampler, epoch):
    sampler.set_epoch(epoch)
    return [b.copy() for b in sampler]


def test_random_batches_cover_every_query_once_per_epoch():
    sampler = RandomBatchSampler(103, batch_size=10, seed=4)
    assert len(sampler) == 11
    for epoch in range(3):
        batches = _epoch(sampler, epoch)
        assert [len(b) for b in batches] == [10] * 10 + [3]
        np.testing.assert_array_equal(np.sort(np.concatenate(batches)), np.arange(103))
    sampler.set_epoch(1)
    epoch1 = np.concatenate(sampler.batches())  # all batches of the epoch, consumed or not
    sampler.set_epoch(0)
    assert not np.array_equal(np.concatenate(sampler.batches()), epoch1)
    again = RandomBatchSampler(103, batch_size=10, seed=4)
    np.testing.assert_array_equal(np.concatenate(_epoch(again, 1)), epoch1)
    assert list(again) == [], "a finished epoch yields nothing more until the next set_epoch"


def test_drop_last():
    sampler = RandomBatchSampler(103, batch_size=10, seed=0, drop_last=True)
    batches = _epoch(sampler, 0)
    assert len(sampler) == len(batches) == 10 and all(len(b) == 10 for b in batches)
    with pytest.raises(XmcbenchError, match="no batch"):
        RandomBatchSampler(5, batch_size=10, drop_last=True)


def test_cluster_batches_are_whole_shuffled_clusters():
    rng = np.random.default_rng(0)
    clusters = np.array_split(rng.permutation(64), 16)  # 16 clusters of 4
    sampler = ClusterBatchSampler(64, batch_size=8, seed=1)
    sampler.set_clusters(clusters)
    owner = np.empty(64, dtype=int)
    for c, members in enumerate(clusters):
        owner[members] = c
    orders = []
    for epoch in range(3):
        batches = _epoch(sampler, epoch)
        assert len(batches) == 8
        for b in batches:  # each batch is exactly two whole clusters
            ids, counts = np.unique(owner[b], return_counts=True)
            assert ids.size == 2 and (counts == 4).all()
        orders.append([owner[b[0]] for b in batches])
        np.testing.assert_array_equal(np.sort(np.concatenate(batches)), np.arange(64))
    assert orders[0] != orders[1], "cluster order must be reshuffled every epoch"


def test_no_clusters_means_random_batches():
    plain = RandomBatchSampler(50, batch_size=7, seed=3)
    clustered = ClusterBatchSampler(50, batch_size=7, seed=3)
    np.testing.assert_array_equal(np.concatenate(_epoch(plain, 2)), np.concatenate(_epoch(clustered, 2)))
    clustered.set_clusters(np.array_split(np.arange(50), 5))
    clustered.set_clusters(None)
    np.testing.assert_array_equal(np.concatenate(_epoch(plain, 3)), np.concatenate(_epoch(clustered, 3)))


@pytest.mark.parametrize("with_clusters", [False, True])
def test_resume_continues_with_the_same_remaining_batches(with_clusters):
    def make():
        s = ClusterBatchSampler(97, batch_size=8, seed=11)
        return s

    reference = make()
    if with_clusters:
        reference.set_clusters(np.array_split(np.random.default_rng(2).permutation(97), 12))
    reference.set_epoch(5)
    full = [b.copy() for b in reference]

    interrupted = make()
    if with_clusters:
        interrupted.set_clusters(np.array_split(np.random.default_rng(2).permutation(97), 12))
    interrupted.set_epoch(5)
    it = iter(interrupted)
    done = [next(it).copy() for _ in range(4)]
    state = copy.deepcopy(interrupted.state_dict())  # e.g. saved with the checkpoint after step 4

    resumed = make()  # a fresh process knows nothing but the checkpoint
    resumed.load_state_dict(state)
    assert resumed.epoch_in_progress
    resumed.set_epoch(5)  # the training loop re-enters the epoch: must not restart it
    rest = [b.copy() for b in resumed]
    assert len(done) + len(rest) == len(full)
    for a, b in zip(done + rest, full):
        np.testing.assert_array_equal(a, b)
    resumed.set_epoch(6)
    reference.set_epoch(6)
    for a, b in zip(resumed, reference):
        np.testing.assert_array_equal(a, b)


def test_state_survives_torch_save(tmp_path):
    s = ClusterBatchSampler(20, batch_size=4, seed=0)
    s.set_clusters(np.array_split(np.arange(20), 4))
    next(iter(s))
    torch.save(s.state_dict(), tmp_path / "s.pt")
    t = ClusterBatchSampler(20, batch_size=4, seed=0)
    t.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))  # no pickled numpy inside
    assert t.consumed == 1 and t.n_clusters == 4


def test_resume_with_other_settings_is_refused():
    state = RandomBatchSampler(10, batch_size=2).state_dict()
    with pytest.raises(XmcbenchError, match="batch_size"):
        RandomBatchSampler(10, batch_size=3).load_state_dict(state)
    with pytest.raises(XmcbenchError, match="RandomBatchSampler"):
        ClusterBatchSampler(10, batch_size=2).load_state_dict(state)


def test_bad_clusters_and_mid_epoch_changes_are_refused():
    s = ClusterBatchSampler(10, batch_size=2)
    with pytest.raises(XmcbenchError, match="exactly once"):
        s.set_clusters([np.arange(5), np.arange(4, 10)])
    with pytest.raises(XmcbenchError, match="exactly once"):
        s.set_clusters([np.arange(9)])
    next(iter(s))
    with pytest.raises(XmcbenchError, match="middle of epoch"):
        s.set_clusters([np.arange(10)])


def test_usable_as_dataloader_batch_sampler():
    data = torch.arange(30).float()
    sampler = ClusterBatchSampler(30, batch_size=6, seed=0)
    sampler.set_clusters(np.array_split(np.arange(30), 5))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data), batch_sampler=sampler)
    seen = torch.cat([b[0] for b in loader])
    assert sorted(seen.long().tolist()) == list(range(30))


def test_ngame_schedule():
    schedule = ClusterSchedule(cluster_size=8)
    assert schedule(0) == ClusterStep(recluster=False, cluster_size=None)
    assert schedule(9) == ClusterStep(recluster=False, cluster_size=None)
    # The first clusters have the configured size: growth at the start epoch does not double it.
    assert schedule(10) == ClusterStep(recluster=True, cluster_size=8)
    assert [schedule(e).recluster for e in range(11, 15)] == [False] * 4
    assert schedule(15) == ClusterStep(recluster=True, cluster_size=8)
    assert schedule(20) == ClusterStep(recluster=True, cluster_size=16)
    assert schedule(24) == ClusterStep(recluster=False, cluster_size=16)
    assert schedule(25) == ClusterStep(recluster=True, cluster_size=32)
    assert schedule(199).cluster_size == 8 * 2**7
    assert schedule(300).cluster_size == 8 * 2**8


def test_prime_released_cluster_size_starts_at_four():
    """PRIME's released config: sampling_init_cluster_size 4 from epoch 10 means 4, not 8."""
    schedule = ClusterSchedule(cluster_size=4, start_epoch=10, every=5)
    assert schedule(10).cluster_size == 4
    assert schedule(20).cluster_size == 8


def test_one_cluster_per_batch_yields_whole_clusters():
    """UniDEC: each batch is exactly one cluster, all of them once per epoch, resumable."""
    from xmcbench.sampling import balanced_kmeans, n_clusters_for_size

    n, batch = 1000, 60
    emb = np.random.default_rng(0).normal(size=(n, 8)).astype(np.float32)
    sampler = ClusterBatchSampler(n, batch, seed=3, one_batch_per_cluster=True)
    assert len(sampler) == n_clusters_for_size(n, batch) == 32  # 1000 / 60 -> 16.7 -> 32 clusters
    before = list(sampler)  # random order, cut into 32 near-equal batches
    assert len(before) == 32 and sum(b.size for b in before) == n
    clusters = balanced_kmeans(emb, cluster_size=batch, seed=0, device="cpu")
    sampler.set_epoch(1)
    sampler.set_clusters(clusters)
    batches = list(sampler)
    as_sets = sorted(tuple(sorted(b.tolist())) for b in batches)
    assert as_sets == sorted(tuple(sorted(c.tolist())) for c in clusters)
    # resume after 5 batches of epoch 2
    sampler.set_epoch(2)
    it = iter(sampler)
    first = [next(it) for _ in range(5)]
    state = sampler.state_dict()
    fresh = ClusterBatchSampler(n, batch, seed=3, one_batch_per_cluster=True)
    fresh.load_state_dict(state)
    rest = list(fresh)
    full = ClusterBatchSampler(n, batch, seed=3, one_batch_per_cluster=True)
    full.load_state_dict({**state, "consumed": 0})
    assert [b.tolist() for b in first + rest] == [b.tolist() for b in full]
    with pytest.raises(XmcbenchError, match="clusters"):
        ClusterBatchSampler(n, batch, one_batch_per_cluster=True).set_clusters(
            clusters[:4] + [np.concatenate(clusters[4:])]
        )


def test_unidec_batching_schedule_clusters_from_epoch_zero():
    from xmcbench.methods.dual_encoder import make_sampler
    from xmcbench.methods.unidec import UnidecConfig

    sampler, schedule = make_sampler(UnidecConfig(), 294_805, 576, seed=0)
    assert len(sampler) == 512  # Table 2: |Q_B| = 576 = 294,805 / 512
    assert schedule(0).cluster_size == 576 and schedule(0).recluster
    assert [schedule(e).recluster for e in range(1, 6)] == [False, False, False, False, True]  # every τ = 5
    assert schedule(149).cluster_size == 576  # never grows


@pytest.mark.parametrize("batching", ["random", "clustered", "one_cluster_per_batch"])
def test_a_batch_larger_than_the_training_set(batching, caplog):
    """One process: said, and each step takes every query. Across GPUs (the ragged last batch
    dropped) no step would run, so it is refused."""
    import logging

    from xmcbench.methods.dexml import DexmlConfig
    from xmcbench.methods.dual_encoder import make_sampler

    config = DexmlConfig(batching=batching)
    with caplog.at_level(logging.WARNING, logger="xmcbench.train"):
        sampler, _ = make_sampler(config, 400, 100_000, seed=0)
    assert "training.batch_size 100,000 is more than the 400 training queries" in caplog.text
    if batching == "random":
        assert [len(b) for b in sampler] == [400]
    with pytest.raises(XmcbenchError, match="no step would run; set training.batch_size to at most 400"):
        make_sampler(config, 400, 100_000, seed=0, drop_last=True)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="xmcbench.train"):
        make_sampler(config, 400, 400, seed=0, drop_last=True)
    assert caplog.text == ""


def test_schedule_options():
    schedule = ClusterSchedule(cluster_size=4, start_epoch=2, every=3, grow_at=(4,), max_cluster_size=6)
    steps = [schedule(e) for e in range(9)]
    assert [s.cluster_size for s in steps] == [None, None, 4, 4, 6, 6, 6, 6, 6]
    # re-cluster every 3 epochs from 2, and when the size grows at 4
    assert [s.recluster for s in steps] == [False, False, True, False, True, True, False, False, True]
    with pytest.raises(XmcbenchError):
        ClusterSchedule(every=0)
