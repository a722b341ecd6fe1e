"""MACLR's multi-scale adaptive clustering (Xiong et al., NAACL 2022, Sec. 4.2.1, Algorithm 1).

During the first half of Stage I the ICT pairs are grouped by K-means of the instance (context)
embeddings, and pairs in one cluster are positives of each other (SupCon, Eq. 2). The number of
clusters starts at K0 and doubles every T_K steps (coarse → fine, a curriculum); assignments
are recomputed from the current encoder every T_update steps. From T_total / 2 on, every
instance is its own cluster, which turns Eq. 2 into Eq. 1.

Algorithm 1 lines 7-14, with steps counted from 1: after step t, if t mod T_K = 0 and
t < T_total/2 then K ← 2K; if t mod T_update = 0 and t < T_total/2, re-cluster with the current K.
So the clustering used *at* step t is the one computed at the last multiple of T_update before
t (or the initial one), with K = K0 · 2^{⌊t_refresh / T_K⌋} at that refresh. K never exceeds the
number of instances (K-means cannot make more clusters than points).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xmcbench.search.faiss_loader import faiss_or_error

__all__ = ["MultiScaleSchedule", "kmeans_assign"]


@dataclass(frozen=True)
class MultiScaleSchedule:
    k0: int  # initial number of clusters (paper: 2048)
    t_k: int  # steps between doublings of K (paper: 10,000)
    t_update: int  # steps between re-clusterings (paper: 5,000)
    total_steps: int  # T_total of Stage I (paper: 100,000)
    n_instances: int

    def __post_init__(self) -> None:
        if self.k0 < 1 or self.t_k < 1 or self.t_update < 1 or self.total_steps < 1:
            raise ValueError("k0, t_k, t_update and total_steps must all be >= 1")
        if self.k0 > self.n_instances:
            raise ValueError(
                f"K0 = {self.k0} clusters is more than the {self.n_instances} instances to cluster; lower method.k0"
            )

    @property
    def clustering_steps(self) -> int:
        """Steps 1..clustering_steps use cluster positives; later steps are plain ICT (Eq. 1)."""
        return self.total_steps // 2

    def requested_clusters(self, step: int) -> int:
        """K after ``step`` completed steps as Algorithm 1 line 7 doubles it, before the cap."""
        doublings = min(step, max(self.clustering_steps - 1, 0)) // self.t_k
        return int(self.k0 * (2**doublings))

    def n_clusters(self, step: int) -> int:
        """K after ``step`` completed steps (Algorithm 1 line 7), capped at the number of instances."""
        return min(self.requested_clusters(step), self.n_instances)

    def first_capped_refresh(self) -> int | None:
        """The first re-clustering step whose K the cap lowers (None: the cap never applies)."""
        for step in range(self.t_update, self.clustering_steps, self.t_update):
            if self.requested_clusters(step) > self.n_instances:
                return step
        return None

    def refresh_due(self, step: int) -> bool:
        """Whether the assignment is recomputed after ``step`` completed steps (line 10)."""
        return step > 0 and step % self.t_update == 0 and step < self.clustering_steps

    def clustering_active(self, step: int) -> bool:
        """Whether step ``step`` (1-based) still uses the cluster assignment (lines 13-14)."""
        return step <= self.clustering_steps


def kmeans_assign(embeddings: np.ndarray, k: int, seed: int, niter: int = 20) -> np.ndarray:
    """(N,) cluster id of each row of ``embeddings`` (N, d) by faiss K-means (inner-product space
    when rows are normalised: faiss uses L2, which ranks normalised rows the same way)."""
    faiss = faiss_or_error("MACLR's multi-scale clustering runs faiss K-means")
    x = np.ascontiguousarray(embeddings, dtype=np.float32)
    n = x.shape[0]
    if k >= n:
        return np.arange(n, dtype=np.int64)
    if k <= 1:
        return np.zeros(n, dtype=np.int64)
    km = faiss.Kmeans(
        x.shape[1],
        int(k),
        niter=niter,
        seed=int(seed) % (2**31 - 1),
        verbose=False,
        max_points_per_centroid=max(256, -(-n // k)),
    )  # never subsample: every point is assigned
    km.train(x)
    _, assign = km.index.search(x, 1)
    return assign.ravel().astype(np.int64)
