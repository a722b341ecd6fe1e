"""The in-batch label pool: which labels a step scores, and which of them each query owns.

With in-batch negatives (NGAME, UniDEC, PRIME, DEXML's hard-negative regime) a step scores the
batch's queries against a pool of labels: the union of the positives sampled for every query
(and any hard negatives). The target of a query is every pool label that is *any* positive of
it, looked up in the full training label matrix, not only the ones sampled for it — so a label
sampled for another query, or drawn as another query's hard negative, is never treated as a
negative of a query it also belongs to. UniDEC (Section 3.1) writes this as

    P_i^B = P̂_i ∪ ( ⋃_{j ∈ Q_B, j ≠ i} (P̂_j ∪ Ĥ_j) ∩ P_i ),   i.e.  P_i^B = P_i ∩ L_B.

Everything is vectorised (one ``np.unique`` and one ``searchsorted`` over the batch's stored
labels), so a batch of thousands of head queries with thousands of positives each costs
milliseconds. ``PoolAccounting`` aggregates the per-step figures every method must report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy import sparse

from xmcbench.errors import XmcbenchError
from xmcbench.sampling._csr import check_csr, row_entries

__all__ = ["LabelPool", "PoolAccounting", "build_label_pool", "cap_pool_negatives"]


@dataclass
class LabelPool:
    """One step's label pool (P labels) for a batch of b queries.

    The targets are kept as coordinates: a dense (b, P) mask can be large (8192 queries x 50,000
    labels is 400 MB), so it is built only where it is used, ideally on the GPU (``tensors``).
    """

    labels: np.ndarray  # (P,) int64 sorted label ids
    target_rows: np.ndarray  # (T,) int64 query (batch row) of each (query, pool label) positive pair
    target_cols: np.ndarray  # (T,) int64 pool column of that pair
    positive_slots: np.ndarray  # (b, β) int64 pool column of each sampled positive, -1 padding
    negative_slots: np.ndarray  # (b, m) int64 pool column of each hard negative, -1 padding
    sampled_positives: np.ndarray  # (b,) int64 sampled positives per query
    hard_negatives: np.ndarray  # (b,) int64 hard negatives drawn per query

    @property
    def size(self) -> int:
        return int(self.labels.size)

    @property
    def n_queries(self) -> int:
        return int(self.positive_slots.shape[0])

    @property
    def targets(self) -> np.ndarray:
        """(b, P) bool: pool label is a positive of the query (built on each access)."""
        out = np.zeros((self.n_queries, self.size), dtype=bool)
        out[self.target_rows, self.target_cols] = True
        return out

    @property
    def positives_in_pool(self) -> np.ndarray:
        """(b,) int64 |P_i ∩ L_B|: every positive of the query that the pool holds."""
        return np.bincount(self.target_rows, minlength=self.n_queries).astype(np.int64)

    def tensors(self, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        """``labels`` (P,) long and ``targets`` (b, P) bool, built directly on ``device``."""
        targets = torch.zeros((self.n_queries, self.size), dtype=torch.bool, device=device)
        rows = torch.from_numpy(self.target_rows).to(device)
        cols = torch.from_numpy(self.target_cols).to(device)
        targets[rows, cols] = True
        return {"labels": torch.from_numpy(self.labels).to(device), "targets": targets}


def build_label_pool(
    labels: sparse.csr_matrix,
    rows: np.ndarray,
    positives: np.ndarray,
    hard_negatives: np.ndarray | None = None,
) -> LabelPool:
    """Pool = unique union of ``positives`` and ``hard_negatives``; targets from the full ``labels``.

    Args:
        labels: (N, L) CSR of training labels (stored entries are positives).
        rows: (b,) the batch's query indices into ``labels``.
        positives: (b, β) sampled positives, -1 padded (``sample_positives``).
        hard_negatives: optional (b, m) hard negatives, -1 padded (``sample_hard_negatives``).
    """
    check_csr(labels, "the label matrix given to build_label_pool")
    rows = np.asarray(rows, dtype=np.int64).ravel()
    b = rows.size
    n_labels = labels.shape[1]
    positives = np.asarray(positives, dtype=np.int64).reshape(b, -1)
    negatives = (
        np.full((b, 0), -1, dtype=np.int64)
        if hard_negatives is None
        else np.asarray(hard_negatives, dtype=np.int64).reshape(b, -1)
    )
    for name, arr in (("sampled positives", positives), ("hard negatives", negatives)):
        if arr.size and arr.max() >= n_labels:
            raise XmcbenchError(f"{name} hold label id {int(arr.max())} but there are only {n_labels} labels")

    members = np.concatenate([positives[positives >= 0], negatives[negatives >= 0]])
    pool = np.unique(members)  # (P,) sorted

    # Every stored positive of every batch query that the pool holds becomes a target.
    seg, cols, _ = row_entries(labels, rows)
    at = np.searchsorted(pool, cols)
    hit = at < pool.size
    hit[hit] = pool[at[hit]] == cols[hit]
    return LabelPool(
        labels=pool,
        target_rows=seg[hit],
        target_cols=at[hit],
        positive_slots=np.where(positives >= 0, np.searchsorted(pool, positives), -1),
        negative_slots=np.where(negatives >= 0, np.searchsorted(pool, negatives), -1),
        sampled_positives=(positives >= 0).sum(axis=1, dtype=np.int64),
        hard_negatives=(negatives >= 0).sum(axis=1, dtype=np.int64),
    )


def cap_pool_negatives(
    positives: np.ndarray, hard_negatives: np.ndarray, max_pool_size: int | None, rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    """Drop hard negatives so that the pool (their union with the positives) has at most ``max_pool_size`` labels.

    UniDEC's Table 2 gives |L_B| as a setting (1,500 on LF-Amazon-131K, 3,000 vs 4,000 for UniDEC vs
    SupConDE on LF-AmazonTitles-1.3M at the same β = 1, η = 6), smaller than the union of
    Algorithm 1 would be, so the paper's pool is capped; how is not reported. Here every sampled
    positive stays (it carries the loss terms) and a uniformly drawn subset of the distinct
    negative-only labels fills the rest; a dropped label is dropped for every query that drew it.

    Args:
        positives: (b, β) sampled positives, -1 padded.
        hard_negatives: (b, η) hard negatives, -1 padded.
        max_pool_size: the cap; None keeps the whole union.
        rng: generator of the draw.

    Returns:
        (b, η) negatives with the dropped ones set to -1, and the uncapped pool size.
    """
    positives = np.asarray(positives, dtype=np.int64)
    negatives = np.asarray(hard_negatives, dtype=np.int64)
    pos_labels = np.unique(positives[positives >= 0])  # (P+,)
    neg_only = np.setdiff1d(negatives[negatives >= 0], pos_labels)  # (N-,) sorted, unique
    uncapped = int(pos_labels.size + neg_only.size)
    if max_pool_size is None or uncapped <= max_pool_size:
        return negatives, uncapped
    room = max(int(max_pool_size) - int(pos_labels.size), 0)
    kept = np.sort(rng.choice(neg_only, size=room, replace=False)) if room else neg_only[:0]
    drop = (negatives >= 0) & ~np.isin(negatives, pos_labels) & ~np.isin(negatives, kept)
    return np.where(drop, -1, negatives), uncapped


@dataclass
class PoolAccounting:
    """Running totals of the label-pool figures a run reports (mean / max over steps and queries)."""

    steps: int = 0
    queries: int = 0
    pool_size_sum: int = 0
    pool_size_max: int = 0
    batch_size_max: int = 0
    positives_in_pool_sum: int = 0
    positives_in_pool_max: int = 0
    sampled_positives_sum: int = 0
    hard_negatives_sum: int = 0

    def update(self, pool: LabelPool) -> None:
        b = pool.n_queries
        in_pool = pool.positives_in_pool
        self.steps += 1
        self.queries += b
        self.pool_size_sum += pool.size
        self.pool_size_max = max(self.pool_size_max, pool.size)
        self.batch_size_max = max(self.batch_size_max, b)
        self.positives_in_pool_sum += int(in_pool.sum())
        self.positives_in_pool_max = max(self.positives_in_pool_max, int(in_pool.max(initial=0)))
        self.sampled_positives_sum += int(pool.sampled_positives.sum())
        self.hard_negatives_sum += int(pool.hard_negatives.sum())

    def summary(self) -> dict[str, float | int]:
        """Flat figures for a run record's accounting section."""
        steps, queries = max(self.steps, 1), max(self.queries, 1)
        return {
            "steps": self.steps,
            "batch_size_mean": self.queries / steps,
            "batch_size_max": self.batch_size_max,
            "pool_size_mean": self.pool_size_sum / steps,
            "pool_size_max": self.pool_size_max,
            "positives_in_pool_per_query_mean": self.positives_in_pool_sum / queries,
            "positives_in_pool_per_query_max": self.positives_in_pool_max,
            "sampled_positives_per_query_mean": self.sampled_positives_sum / queries,
            "hard_negatives_per_query_mean": self.hard_negatives_sum / queries,
        }

    def state_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def load_state_dict(self, state: dict) -> None:
        unknown = set(state) - set(self.__dataclass_fields__)
        if unknown:
            raise XmcbenchError(f"cannot resume pool accounting: unknown fields {sorted(unknown)} in the checkpoint")
        for key, value in state.items():
            setattr(self, key, int(value))
