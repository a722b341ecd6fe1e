"""Shared pieces of the dual-encoder methods (DEXML, UniDEC, PRIME).

Not a method: the helpers every supervised method's ``fit`` calls, so that each method file
keeps only what makes it that method (its loss, heads and pool). Queries and labels go through
one shared-weight encoder Φ; texts are tokenised once into memory-mapped caches; batches follow
NGAME's negative-mining-aware clustering schedule; the model is checkpointed every epoch.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from pydantic import Field
from scipy import sparse

from xmcbench.data.tokenized import TokenCache
from xmcbench.errors import XmcbenchError
from xmcbench.methods.base import MethodConfig, RunContext, TrainTask
from xmcbench.progress import task as progress_task
from xmcbench.search import SearchBackend
from xmcbench.train.length_groups import GROUP_COST, group_cost_for, length_groups

log = logging.getLogger("xmcbench.train")


class DualEncoderConfig(MethodConfig):
    """Settings shared by the dual-encoder methods (each method's Config extends this)."""

    # random; clustered: NGAME's growing clusters concatenated and cut into batches;
    # one_cluster_per_batch: UniDEC's batches, each exactly one cluster of ~batch_size queries,
    # clustered from epoch 0 and re-clustered every ``recluster_every`` epochs (cluster_size and
    # cluster_start_epoch do not apply).
    batching: Literal["random", "clustered", "one_cluster_per_batch"] = "clustered"
    cluster_size: int = Field(default=8, ge=1)  # queries per cluster when clustering starts
    cluster_start_epoch: int = Field(default=10, ge=0)  # NGAME: random batches before epoch 10
    recluster_every: int = Field(default=5, ge=1)  # NGAME: re-cluster every 5 epochs
    encode_batch_size: int = Field(default=256, gt=0)  # no-grad encoding (refreshes, predict)
    search_backend: SearchBackend = "auto"  # faiss on CPU when installed, torch on CUDA (xmcbench.search)


def build_encoder(recipe, *, dropout: float = 0.0, projection_dim: int | None = None, normalize: bool | None = None):
    from xmcbench.encoders import TextEncoder

    e = recipe.encoder
    return TextEncoder(
        e.name,
        pooling=e.pooling,
        normalize=e.normalize if normalize is None else normalize,
        max_length=e.max_length,
        revision=e.revision,
        projection_dim=projection_dim,
        dropout=dropout,
    )


def build_encoder_from(folder, recipe):
    """Load an encoder saved by ``TextEncoder.save`` (its projection comes back with it)."""
    from xmcbench.encoders import TextEncoder

    e = recipe.encoder
    return TextEncoder(str(folder), pooling=e.pooling, normalize=e.normalize, max_length=e.max_length)


@dataclass
class TokenisedTask:
    """Token caches of the training queries and of the labels."""

    queries: TokenCache
    labels: TokenCache


def tokenise(encoder, task: TrainTask, recipe, progress: bool) -> TokenisedTask:
    from xmcbench.data.tokenized import TokenCache

    e = recipe.encoder
    label_len = e.label_max_length or e.max_length
    encoder.check_length(label_len, "encoder.label_max_length")
    queries = TokenCache.build_or_load(
        task.train_texts,
        encoder.tokenizer,
        e.max_length,
        (task.dataset_name, "train", "query"),
        version=task.dataset_version,
        progress=progress,
    )
    labels = TokenCache.build_or_load(
        task.label_texts,
        encoder.tokenizer,
        label_len,
        (task.dataset_name, "labels", "title"),
        version=task.dataset_version,
        progress=progress,
    )
    return TokenisedTask(queries, labels)


def embed(encoder, cache, indices: np.ndarray, device: str) -> torch.Tensor:
    """Φ of the cached texts ``indices`` -> (b, d), with a graph when grad is enabled.

    A large enough batch is encoded in a few groups of similar token length, each padded only to
    its own longest text (``xmcbench.train.length_groups``), and put back in the order of
    ``indices``: the same embeddings and gradients as one forward pass, for less padding.
    """
    idx = np.asarray(indices, dtype=np.int64).ravel()  # (b,)
    groups = embed_groups(encoder, np.asarray(cache.lengths[idx]), device)
    if len(groups) == 1:  # exactly the one forward pass of an unsplit batch
        batch = cache.batch(indices)
        return encoder(batch["input_ids"].to(device), batch["attention_mask"].to(device))
    parts = []
    for rows in groups:
        batch = cache.batch(idx[rows])
        parts.append(encoder(batch["input_ids"].to(device), batch["attention_mask"].to(device)))  # (b_g, d)
    grouped = torch.cat(parts)  # (b, d) in the groups' order
    order = np.concatenate(groups)  # (b,) position in indices of each grouped row
    back = np.empty_like(order)
    back[order] = np.arange(order.size)  # (b,) grouped row of each position in indices
    return grouped[torch.from_numpy(back).to(grouped.device)]  # (b, d)


def embed_groups(encoder, lengths: np.ndarray, device: str) -> list[np.ndarray]:
    """The length groups ``embed`` encodes a batch of token ``lengths`` in (positions into ``lengths``)."""
    # On CPU an extra forward pass of MiniLM costs about as much as 64 tokens (length_groups.GROUP_COST,
    # scaled to other models by group_cost_for), so groups of 16 rows can pay. On a GPU they cost far
    # more than the padding they save: each group is a new (rows, length) shape for the attention
    # kernels, which are set up again per shape. H200, DistilBERT, bf16, paper batches at 100k labels
    # (benchmarks/results/train-gpu-h200-2.json, -length-groups.json): UniDEC 0.485 s a step with groups
    # of at least 256 rows, 0.061 s in one pass; PRIME 1.385 s and 0.467 s. So a GPU batch is one pass.
    if torch.device(device).type == "cuda":
        return [np.arange(len(lengths))]
    return length_groups(lengths, min_rows=16, group_cost=_group_cost(encoder))


_GROUP_COSTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _group_cost(encoder) -> float:
    """The fixed cost of one more forward pass of ``encoder``, in tokens (counted once per encoder)."""
    try:
        if encoder not in _GROUP_COSTS:
            weights = sum(p.numel() for p in encoder.parameters())
            embedding = sum(p.numel() for name, p in encoder.named_parameters() if "embeddings." in name)
            _GROUP_COSTS[encoder] = group_cost_for(weights, embedding)
        return _GROUP_COSTS[encoder]
    except (AttributeError, TypeError):  # a callable that is no module, or cannot be weakly referenced
        return GROUP_COST


@torch.no_grad()
def encode_all(
    encoder,
    cache,
    device: str,
    precision: str,
    batch_size: int,
    *,
    rows: np.ndarray | None = None,
    progress: bool = False,
    description: str = "encode",
) -> np.ndarray:
    """Φ of every cached text (or of ``rows``) without a graph -> (N, d) float32, length-sorted batches."""
    from xmcbench.train import autocast

    was_training = encoder.training
    encoder.eval()
    rows = np.arange(len(cache)) if rows is None else np.asarray(rows)
    order = rows[np.argsort(np.asarray(cache.lengths[rows]), kind="stable")]
    position = np.empty(len(cache), dtype=np.int64)
    position[rows] = np.arange(rows.size)
    out = np.empty((rows.size, encoder.dim), dtype=np.float32)
    with progress_task(description, rows.size, enabled=progress) as advance:
        for start in range(0, order.size, batch_size):
            idx = order[start : start + batch_size]
            with autocast(device, precision):
                emb = embed(encoder, cache, idx, device)  # (b, d)
            out[position[idx]] = emb.float().cpu().numpy()
            advance(idx.size)
    encoder.train(was_training)
    return out


def labelled_rows(labels: sparse.csr_matrix | None) -> np.ndarray:
    """Training queries with at least one (visible) positive: the only ones a supervised loss can use."""
    if labels is None:
        raise XmcbenchError("this method is supervised: it needs training labels (supervision full or few_shot)")
    rows = np.flatnonzero(np.diff(labels.indptr) > 0)
    if rows.size == 0:
        raise XmcbenchError("no training query has a visible label; check the supervision settings")
    return rows


def warn_clipped(key: str, asked, used, reason: str, seen: set[str] | None = None) -> None:
    """Log that the recipe's ``key`` asked ``asked`` but the data lets the run use only ``used``, and why.

    ``reason`` reads after the value ("is more than the 60 labels"). With ``seen`` (a per-run set)
    a key warns once however often its site is reached (per step, per cycle).
    """
    if seen is not None:
        if key in seen:
            return
        seen.add(key)
    log.warning("%s %s %s: the run uses %s", key, _number(asked), reason, _number(used))


def _number(value) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def clip_shortlist(key: str, k: int, n_labels: int) -> int:
    """The shortlist length a run can use: at most the label count (said once when the recipe asks more)."""
    if k > n_labels:
        warn_clipped(key, k, n_labels, f"is more than the {n_labels:,} labels")
    return min(k, n_labels)


def check_hard_negatives(key: str, m: int, labels: sparse.csr_matrix) -> None:
    """Say when some training query has fewer than ``m`` labels that are not its positives.

    ``sample_hard_negatives`` then draws every label it has left (-1 pads the rest), so those
    queries get fewer than ``m``; the recorded ``hard_negatives_per_query`` is the mean drawn.
    """
    if m == 0 or labels.shape[0] == 0:
        return
    left = int(labels.shape[1] - np.diff(labels.indptr).max())
    if m > left:
        warn_clipped(
            key,
            m,
            f"as few as {left:,} for those queries",
            f"is more than the {left:,} labels left after the positives of some training queries",
        )


def make_sampler(
    config: DualEncoderConfig,
    n_queries: int,
    batch_size: int,
    seed: int,
    drop_last: bool = False,
    epochs: int | None = None,
):
    """The epoch's batches and the clustering schedule; ``epochs`` (the run's) lets it say when
    NGAME's growing clusters would outgrow the training queries.

    The recorded batch size is the returned sampler's ``max_batch_size``: the batch that runs.
    """
    from xmcbench.sampling import ClusterBatchSampler, ClusterSchedule, RandomBatchSampler

    if batch_size > n_queries:
        if drop_last:  # every batch would be the ragged last one: an epoch of no steps, a model never trained
            raise XmcbenchError(
                f"training.batch_size {batch_size:,} is more than the {n_queries:,} training queries with labels, "
                f"and across GPUs the incomplete last batch is dropped, so no step would run; "
                f"set training.batch_size to at most {n_queries:,}"
            )
        log.warning(
            "training.batch_size %s is more than the %s training queries with labels: each step takes all of them",
            f"{batch_size:,}",
            f"{n_queries:,}",
        )
    if config.batching == "random":
        return RandomBatchSampler(n_queries, batch_size, seed=seed, drop_last=drop_last), None
    if config.batching == "one_cluster_per_batch":
        # UniDEC Algorithm 1: clusters of size N/|𝔅| from the first epoch, never grown.
        schedule = ClusterSchedule(cluster_size=batch_size, start_epoch=0, every=config.recluster_every, grow_at=())
        sampler = ClusterBatchSampler(n_queries, batch_size, seed=seed, drop_last=drop_last, one_batch_per_cluster=True)
        if sampler.max_batch_size > batch_size:  # 2-means makes a power of two of clusters, at most one per query
            warn_clipped(
                "training.batch_size",
                batch_size,
                f"batches of up to {sampler.max_batch_size:,} ({n_queries:,} queries in {len(sampler):,} clusters)",
                f"cannot cut the {n_queries:,} training queries with labels into one balanced cluster per batch, "
                "a power of two of them",
            )
        return sampler, schedule
    schedule = ClusterSchedule(
        cluster_size=config.cluster_size, start_epoch=config.cluster_start_epoch, every=config.recluster_every
    )
    if config.batching == "clustered" and epochs:
        _check_cluster_growth(config, schedule, n_queries, epochs)
    return ClusterBatchSampler(n_queries, batch_size, seed=seed, drop_last=drop_last), schedule


def _check_cluster_growth(config: DualEncoderConfig, schedule, n_queries: int, epochs: int) -> None:
    """Say (once, before training) when NGAME's clusters would hold more queries than there are."""
    for epoch in range(epochs):
        size = schedule.cluster_size_at(epoch)
        if size is not None and size > n_queries:
            grown = (
                ""
                if size == config.cluster_size
                else f" (grown to {size:,} from epoch {epoch + 1} by NGAME's curriculum)"
            )
            warn_clipped(
                "method.cluster_size",
                config.cluster_size,
                f"one cluster of all {n_queries:,} from epoch {epoch + 1}",
                f"{grown} is more than the {n_queries:,} training queries with labels".lstrip(),
            )
            return


def recluster(sampler, schedule, epoch: int, query_emb: np.ndarray, seed: int, device: str) -> None:
    """Balanced hierarchical 2-means of the current query embeddings (NGAME), when the schedule says so."""
    from xmcbench.sampling import balanced_kmeans
    from xmcbench.train.distributed import all_gather_objects

    step = schedule(epoch)
    clusters = balanced_kmeans(query_emb, cluster_size=step.cluster_size, seed=seed + epoch, device=device)
    # Under torchrun every rank must cut the same batches: all take rank 0's clusters.
    sampler.set_clusters(all_gather_objects(clusters)[0])


def clustering_due(schedule, epoch: int, sampler) -> bool:
    if schedule is None:
        return False
    step = schedule(epoch)
    # A resumed run whose sampler has no clusters yet must build them even off-schedule.
    return step.cluster_size is not None and (step.recluster or sampler.n_clusters is None)


def predict_topk(
    encoder,
    texts: Sequence[str],
    label_emb: np.ndarray,
    k: int,
    ctx: RunContext,
    batch_size: int,
    backend: str = "torch",
) -> sparse.csr_matrix:
    """Exact maximum-inner-product search of the queries' Φ against ``label_emb`` (L, d)."""
    from xmcbench.search.exact import exact_topk

    queries = encoder.encode(
        texts,
        batch_size=batch_size,
        device=ctx.device,
        progress=ctx.progress,
        description="encode queries",
        precision=ctx.precision,
    )  # (N, d)
    return exact_topk(queries, label_emb, k, device=ctx.device, backend=backend)


def target_mask(
    labels: sparse.csr_matrix,
    rows: np.ndarray,
    columns: range | None = None,
    device: str = "cpu",
    as_sparse: bool = False,
) -> torch.Tensor:
    """(b, L or |columns|) bool: every positive of each query (all-negatives regime); with
    ``as_sparse``, the same mask as a sparse COO tensor (what the blockwise decoupled softmax reads)."""
    block = labels[rows]
    if columns is not None:
        block = block[:, columns.start : columns.stop]
    block = block.tocoo()
    return cell_mask(block.row, block.col, block.shape, device, as_sparse)


def cell_mask(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], device, as_sparse: bool) -> torch.Tensor:
    """(shape) bool, True at the (rows[i], cols[i]) cells: dense, or a sparse COO tensor of those cells."""
    r = torch.from_numpy(np.asarray(rows, dtype=np.int64))
    c = torch.from_numpy(np.asarray(cols, dtype=np.int64))
    if as_sparse:
        values = torch.ones(r.numel(), dtype=torch.bool)
        # (checked: an out-of-range cell is an error here, not a crash in the loss)
        return torch.sparse_coo_tensor(torch.stack([r, c]), values, tuple(shape), check_invariants=True).to(device)
    out = torch.zeros(tuple(shape), dtype=torch.bool, device=device)
    out[r.to(device), c.to(device)] = True
    return out


def split_validation(rows: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Carve a seeded validation split out of the training rows (the test split is never looked at)."""
    if fraction <= 0:
        return rows, rows[:0]
    rng = np.random.default_rng([seed, 7919])
    n_val = max(1, int(round(fraction * rows.size)))
    if n_val >= rows.size:  # nothing left to train on: said here, not by the sampler as "0 queries"
        raise XmcbenchError(
            f"training.validation_fraction {fraction:g} of the {rows.size:,} training queries with labels leaves "
            "none to train on; lower it (0.05 is typical) or set it to 0 for no validation split"
        )
    perm = rng.permutation(rows.size)
    return np.sort(rows[perm[n_val:]]), np.sort(rows[perm[:n_val]])


def save_array(path, array: np.ndarray) -> None:
    """np.save through a temporary file, so a killed run never leaves a truncated array."""
    tmp = path.with_name(f".{path.name}.tmp.npy")
    np.save(tmp, np.asarray(array))
    tmp.replace(path)


def load_array(path) -> np.ndarray | None:
    return np.load(path) if path.exists() else None
