"""Training batches: random, or negative-mining-aware from clusters of similar queries (NGAME).

NGAME (Dahiya et al., WSDM 2023) makes in-batch negatives hard by batching similar queries
together: the training queries are split into balanced clusters (``balanced_kmeans`` on their
embeddings), the cluster order is shuffled every epoch, the clusters are concatenated and the
sequence is cut into fixed-size batches. Clusters start small and grow over training (a
curriculum: NGAME halves the number of clusters at epochs 10, 20, 25, 50, 75, 100, 125, 150 and
200, and re-clusters every 5 epochs from epoch 10 on embeddings from a memory bank). Before the
first clustering, batches are random.

UniDEC (Section 2.1, Algorithm 1) uses the clusters differently: each batch is exactly one
cluster of N/|𝔅| queries, with |𝔅| clusters built from the first epoch and rebuilt every τ
epochs (no growth, no concatenation). ``ClusterBatchSampler(..., one_batch_per_cluster=True)``
does that: an epoch yields the clusters themselves in a shuffled order, and its length is the
cluster count, the smallest power of two whose clusters hold at most ``batch_size`` queries
(LF-AmazonTitles-131K: 294,805 queries, batch 576 -> 512 clusters of 575-576).

Both samplers are deterministic functions of (seed, epoch, clusters) and remember how many
batches of the current epoch they have handed out, so ``state_dict()`` saved after a training
step and ``load_state_dict()`` on a fresh sampler continue with exactly the remaining batches.
They yield int64 index arrays and can be given to a torch ``DataLoader`` as ``batch_sampler``.

Typical loop::

    sampler = ClusterBatchSampler(n_queries, batch_size=1024, seed=0)
    schedule = ClusterSchedule()
    for epoch in range(start_epoch, epochs):
        sampler.set_epoch(epoch)
        step = schedule(epoch)
        if step.recluster and not sampler.epoch_in_progress:
            sampler.set_clusters(balanced_kmeans(bank.embeddings, cluster_size=step.cluster_size))
        for batch in sampler:
            ...
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from xmcbench.errors import XmcbenchError

__all__ = ["ClusterBatchSampler", "ClusterSchedule", "ClusterStep", "NGAME_GROW_AT", "RandomBatchSampler"]

# Epochs at which NGAME halves the number of clusters (doubles the cluster size).
NGAME_GROW_AT = (10, 20, 25, 50, 75, 100, 125, 150, 200)


class RandomBatchSampler:
    """Every epoch, a fresh random permutation of the queries cut into ``batch_size`` pieces."""

    def __init__(self, n_queries: int, batch_size: int, seed: int = 0, drop_last: bool = False):
        if n_queries < 1:
            raise XmcbenchError(f"a batch sampler needs at least one query; got n_queries={n_queries}")
        if batch_size < 1:
            raise XmcbenchError(f"batch_size must be >= 1; got {batch_size}")
        if seed < 0:
            raise XmcbenchError(f"seed must be >= 0; got {seed}")
        if drop_last and batch_size > n_queries:
            raise XmcbenchError(
                f"batch_size {batch_size} is larger than the {n_queries} training queries and drop_last "
                "is set, so an epoch would have no batch; lower the batch size"
            )
        self.n_queries = int(n_queries)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self._consumed = 0  # batches of ``epoch`` already handed out

    # -- epoch bookkeeping ---------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` (a no-op when it is the current one, so a resumed epoch continues)."""
        if epoch != self.epoch:
            self.epoch = int(epoch)
            self._consumed = 0

    def __len__(self) -> int:
        """Batches per epoch."""
        if self.drop_last:
            return self.n_queries // self.batch_size
        return -(-self.n_queries // self.batch_size)

    @property
    def consumed(self) -> int:
        """Batches of the current epoch handed out so far."""
        return self._consumed

    @property
    def max_batch_size(self) -> int:
        """The largest batch an epoch holds: ``batch_size``, or every query when there are fewer."""
        return min(self.batch_size, self.n_queries)

    @property
    def epoch_in_progress(self) -> bool:
        """True between the first and the last batch of an epoch (e.g. right after a resume)."""
        return 0 < self._consumed < len(self)

    def _rng(self) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.epoch])

    def epoch_order(self) -> np.ndarray:
        """(N,) int64: the order in which the current epoch visits the queries."""
        return self._rng().permutation(self.n_queries).astype(np.int64)

    def batches(self) -> list[np.ndarray]:
        """All batches of the current epoch (from its start, whatever has been consumed)."""
        order = self.epoch_order()
        return [order[i * self.batch_size : (i + 1) * self.batch_size] for i in range(len(self))]

    def __iter__(self) -> Iterator[np.ndarray]:
        order = self.epoch_order()
        while self._consumed < len(self):
            b = self._consumed
            self._consumed += 1
            yield order[b * self.batch_size : (b + 1) * self.batch_size]

    # -- checkpointing -------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Everything needed to continue this epoch exactly (save it after the step)."""
        return {
            "kind": type(self).__name__,
            "n_queries": self.n_queries,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "drop_last": self.drop_last,
            "epoch": self.epoch,
            "consumed": self._consumed,
        }

    def load_state_dict(self, state: dict) -> None:
        for key in ("n_queries", "batch_size", "drop_last"):
            if state.get(key) != getattr(self, key):
                raise XmcbenchError(
                    f"cannot resume the batch sampler: the checkpoint has {key}={state.get(key)!r} but this run "
                    f"has {key}={getattr(self, key)!r}; resume with the recipe the checkpoint was made with"
                )
        if state.get("kind") != type(self).__name__:
            raise XmcbenchError(
                f"cannot resume a {type(self).__name__} from a {state.get('kind')} checkpoint; "
                "resume with the recipe the checkpoint was made with"
            )
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self._consumed = int(state["consumed"])


class ClusterBatchSampler(RandomBatchSampler):
    """NGAME batches: shuffle the cluster order, concatenate the clusters, cut fixed-size batches.

    Random batches (``RandomBatchSampler``) until ``set_clusters`` is called. With
    ``one_batch_per_cluster`` (UniDEC) every batch is one whole cluster instead, there are
    ``n_clusters_for_size(n_queries, batch_size)`` batches per epoch, and before any clusters are
    set the random order is cut into that many near-equal batches.
    """

    def __init__(
        self,
        n_queries: int,
        batch_size: int,
        seed: int = 0,
        drop_last: bool = False,
        one_batch_per_cluster: bool = False,
    ):
        super().__init__(n_queries, batch_size, seed, drop_last)
        self._flat: np.ndarray | None = None  # (N,) the clusters one after the other
        self._sizes: np.ndarray | None = None  # (C,) their sizes
        self.one_batch_per_cluster = bool(one_batch_per_cluster)
        if self.one_batch_per_cluster:
            from xmcbench.sampling.clustering import n_clusters_for_size

            self.n_batches = n_clusters_for_size(self.n_queries, self.batch_size)

    def __len__(self) -> int:
        if self.one_batch_per_cluster:
            return self.n_batches
        return super().__len__()

    @property
    def max_batch_size(self) -> int:
        if self.one_batch_per_cluster:  # balanced clusters (and the random cuts before them) differ by <= 1
            return -(-self.n_queries // self.n_batches)
        return super().max_batch_size

    def _cuts(self) -> np.ndarray:
        """(n_batches + 1,) batch boundaries in ``epoch_order()`` for one-cluster-per-batch epochs."""
        if self._sizes is None:  # random order cut into near-equal pieces, as many as there will be clusters
            return np.linspace(0, self.n_queries, self.n_batches + 1).round().astype(np.int64)
        perm = self._rng().permutation(self._sizes.size)  # the same shuffled order epoch_order uses
        return np.concatenate([[0], np.cumsum(self._sizes[perm])])

    def batches(self) -> list[np.ndarray]:
        if not self.one_batch_per_cluster:
            return super().batches()
        order, cuts = self.epoch_order(), self._cuts()
        return [order[cuts[i] : cuts[i + 1]] for i in range(len(self))]

    def __iter__(self) -> Iterator[np.ndarray]:
        if not self.one_batch_per_cluster:
            yield from super().__iter__()
            return
        order, cuts = self.epoch_order(), self._cuts()
        while self._consumed < len(self):
            b = self._consumed
            self._consumed += 1
            yield order[cuts[b] : cuts[b + 1]]

    @property
    def n_clusters(self) -> int | None:
        return None if self._sizes is None else int(self._sizes.size)

    def set_clusters(self, clusters: Sequence[np.ndarray] | None) -> None:
        """Use ``clusters`` (a partition of range(n_queries)) from the next epoch's batches on.

        ``None`` goes back to random batches. Changing clusters in the middle of an epoch would
        change batches already promised to a resumed run, so it is refused.
        """
        if self.epoch_in_progress:
            raise XmcbenchError(
                f"cannot change clusters in the middle of epoch {self.epoch} ({self._consumed} of {len(self)} "
                "batches done); call set_clusters before the epoch's first batch (check epoch_in_progress)"
            )
        if clusters is None:
            self._flat = self._sizes = None
            return
        sizes = np.array([len(c) for c in clusters], dtype=np.int64)
        if self.one_batch_per_cluster and sizes.size != self.n_batches:
            raise XmcbenchError(
                f"one batch per cluster needs {self.n_batches} clusters (N/batch_size rounded up to a power of two); "
                f"got {sizes.size}: cluster with cluster_size=batch_size"
            )
        flat = (
            np.concatenate([np.asarray(c, dtype=np.int64).ravel() for c in clusters])
            if len(clusters)
            else np.empty(0, np.int64)
        )
        if flat.size != self.n_queries or (
            flat.size
            and (
                flat.min() < 0 or flat.max() >= self.n_queries or np.bincount(flat, minlength=self.n_queries).max() != 1
            )
        ):
            raise XmcbenchError(
                f"clusters must hold every query index 0..{self.n_queries - 1} exactly once; got {flat.size} indices "
                f"in {sizes.size} clusters"
            )
        self._flat, self._sizes = flat, sizes

    def epoch_order(self) -> np.ndarray:
        if self._flat is None:
            return super().epoch_order()
        sizes = self._sizes
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        perm = self._rng().permutation(sizes.size)  # the shuffled cluster order
        # Concatenate flat[starts[c] : starts[c] + sizes[c]] for c in perm, without a Python loop.
        new_sizes = sizes[perm]
        new_starts = np.concatenate([[0], np.cumsum(new_sizes)[:-1]])
        shift = np.repeat(starts[perm] - new_starts, new_sizes)
        return self._flat[np.arange(self.n_queries) + shift]

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["one_batch_per_cluster"] = self.one_batch_per_cluster
        # Tensors, not numpy arrays, so that torch.load(weights_only=True) accepts the checkpoint.
        state["clusters_flat"] = None if self._flat is None else torch.from_numpy(self._flat.copy())
        state["cluster_sizes"] = None if self._sizes is None else torch.from_numpy(self._sizes.copy())
        return state

    def load_state_dict(self, state: dict) -> None:
        if bool(state.get("one_batch_per_cluster", False)) != self.one_batch_per_cluster:
            raise XmcbenchError(
                "cannot resume: the checkpoint and this run disagree on one batch per cluster; "
                "resume with the recipe the checkpoint was made with"
            )
        super().load_state_dict(state)
        flat, sizes = state.get("clusters_flat"), state.get("cluster_sizes")
        self._flat = None if flat is None else np.array(torch.as_tensor(flat).numpy(), dtype=np.int64)
        self._sizes = None if sizes is None else np.array(torch.as_tensor(sizes).numpy(), dtype=np.int64)


@dataclass(frozen=True)
class ClusterStep:
    """What the schedule asks for at one epoch."""

    recluster: bool  # build new clusters before this epoch's batches
    cluster_size: int | None  # queries per cluster at most; None: random batches


@dataclass(frozen=True)
class ClusterSchedule:
    """NGAME's curriculum: when to (re-)cluster and how large clusters are, per 0-based epoch.

    ``cluster_size`` is the size of the first clusters (at ``start_epoch``); it doubles at each
    epoch of ``grow_at`` after ``start_epoch`` already reached (NGAME halves the cluster count
    there), up to ``max_cluster_size``. A growth epoch equal to ``start_epoch`` does not double
    the first size: a recipe's ``cluster_size`` is the size it gets (PRIME's released config says
    4 and means 4, not 8). Batches
    are random before ``start_epoch``; from it on, the queries are re-clustered every ``every``
    epochs and whenever the size grows. The initial size is a recipe choice (NGAME's public
    code takes it as a command-line option).
    """

    cluster_size: int = 8
    start_epoch: int = 10
    every: int = 5
    grow_at: tuple[int, ...] = NGAME_GROW_AT
    max_cluster_size: int | None = None

    def __post_init__(self) -> None:
        if self.cluster_size < 1:
            raise XmcbenchError(f"cluster_size must be >= 1; got {self.cluster_size}")
        if self.every < 1:
            raise XmcbenchError(f"re-clustering interval must be >= 1 epoch; got {self.every}")
        if self.start_epoch < 0:
            raise XmcbenchError(f"start_epoch must be >= 0; got {self.start_epoch}")

    def cluster_size_at(self, epoch: int) -> int | None:
        if epoch < self.start_epoch:
            return None
        size = self.cluster_size * 2 ** sum(1 for g in self.grow_at if self.start_epoch < g <= epoch)
        return size if self.max_cluster_size is None else min(size, self.max_cluster_size)

    def __call__(self, epoch: int) -> ClusterStep:
        size = self.cluster_size_at(epoch)
        if size is None:
            return ClusterStep(recluster=False, cluster_size=None)
        recluster = (epoch - self.start_epoch) % self.every == 0 or size != self.cluster_size_at(epoch - 1)
        return ClusterStep(recluster=recluster, cluster_size=size)
