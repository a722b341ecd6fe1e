"""Sampling for dual-encoder training: batches, positives, hard negatives and the label pool.

- ``balanced_kmeans`` (clustering.py): balanced hierarchical 2-means of embeddings.
- ``ClusterBatchSampler`` / ``RandomBatchSampler`` / ``ClusterSchedule`` (batching.py): NGAME's
  negative-mining-aware batches and its cluster-size curriculum.
- ``sample_positives`` (positives.py): ≤ β positives per query, uniform or ∝ inverse propensity.
- ``build_shortlist`` / ``sample_hard_negatives`` / ``ShortlistSchedule`` (shortlist.py).
- ``build_label_pool`` / ``PoolAccounting`` (pool.py): the in-batch label pool and its targets.
- ``step_rng`` (seeding.py): generators that make resumed runs draw the same samples.
"""

from xmcbench.sampling.batching import (
    NGAME_GROW_AT,
    ClusterBatchSampler,
    ClusterSchedule,
    ClusterStep,
    RandomBatchSampler,
)
from xmcbench.sampling.clustering import balanced_kmeans, n_clusters_for_size
from xmcbench.sampling.pool import LabelPool, PoolAccounting, build_label_pool, cap_pool_negatives
from xmcbench.sampling.positives import sample_positives
from xmcbench.sampling.seeding import step_rng
from xmcbench.sampling.shortlist import ShortlistSchedule, build_shortlist, sample_hard_negatives

__all__ = [
    "NGAME_GROW_AT",
    "ClusterBatchSampler",
    "ClusterSchedule",
    "ClusterStep",
    "LabelPool",
    "PoolAccounting",
    "RandomBatchSampler",
    "ShortlistSchedule",
    "balanced_kmeans",
    "build_label_pool",
    "build_shortlist",
    "cap_pool_negatives",
    "n_clusters_for_size",
    "sample_hard_negatives",
    "sample_positives",
    "step_rng",
]
