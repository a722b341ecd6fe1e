"""Hard negatives: a shortlist of the top-k labels of every training query, and sampling from it.

UniDEC (Kharbanda et al., 2024) and DEXML's hard-negative regime mine negatives by exact search
of the label embeddings for every training query: H_i = top_k(<Φ(x_i), Φ(z_l)>), refreshed every
τ epochs; each step draws η of them per query, never a positive of that query. UniDEC finds it
best to keep |H| = η·τ, so that over one refresh interval the draws cover the shortlist; DEXML
uses k = 100.

The shortlist is an (N, k) int32 array (labels by decreasing score, -1 where a query has fewer
than k candidates), memory-mapped from a ``.npy`` file when it is large: 2M queries x 100 is
800 MB.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy import sparse

from xmcbench import paths
from xmcbench.errors import XmcbenchError
from xmcbench.progress import task
from xmcbench.sampling._csr import check_csr, isin_sorted, pair_keys, row_entries
from xmcbench.search import exact_topk

__all__ = ["ShortlistSchedule", "build_shortlist", "sample_hard_negatives"]

# Shortlists larger than this go to a memory-mapped file even when no path is given.
MEMMAP_THRESHOLD_BYTES = 1 << 30


@dataclass(frozen=True)
class ShortlistSchedule:
    """Rebuild the shortlist every ``refresh_every`` epochs from ``start_epoch`` (0-based)."""

    refresh_every: int
    start_epoch: int = 0

    def __post_init__(self) -> None:
        if self.refresh_every < 1:
            raise XmcbenchError(f"the shortlist refresh interval must be >= 1 epoch; got {self.refresh_every}")

    def due(self, epoch: int) -> bool:
        return epoch >= self.start_epoch and (epoch - self.start_epoch) % self.refresh_every == 0


def _rows_best_first(scores: sparse.csr_matrix, k: int) -> np.ndarray:
    """(n, k) int32 label ids of a top-k CSR, by decreasing score (ties: lower id), -1 padded."""
    n = scores.shape[0]
    counts = np.diff(scores.indptr)
    rows = np.repeat(np.arange(n), counts)
    slot = np.arange(scores.nnz) - np.repeat(scores.indptr[:-1], counts)  # position within its row
    values = np.full((n, k), -np.inf, dtype=np.float64)
    ids = np.full((n, k), -1, dtype=np.int32)
    values[rows, slot] = scores.data
    ids[rows, slot] = scores.indices
    # CSR rows are sorted by label, so a stable sort on -score breaks ties by the lower label.
    order = np.argsort(-values, axis=1, kind="stable")
    return np.take_along_axis(ids, order, axis=1)


def build_shortlist(
    query_emb: np.ndarray | torch.Tensor,
    label_emb: np.ndarray | torch.Tensor,
    k: int = 100,
    *,
    exclude: sparse.csr_matrix | None = None,
    path: str | Path | None = None,
    device: str | torch.device | None = None,
    query_chunk: int = 65536,
    progress: bool = False,
) -> np.ndarray:
    """Exact top-k labels by inner product for every query -> (N, k) int32, best first.

    Args:
        query_emb: (N, d) query embeddings.
        label_emb: (L, d) label embeddings.
        k: shortlist length (UniDEC: η·τ; DEXML: 100).
        exclude: optional (N, L) CSR of pairs never to shortlist, typically the training
            positives, so every shortlisted label is a true negative (UniDEC's H_i ∩ P_i = ∅).
        path: write the shortlist to this ``.npy`` (atomically) and return it memory-mapped.
            Without a path, shortlists over 1 GiB go to a temporary file under the cache folder.
        device: where to compute the scores (default: CUDA when available, else CPU).
        query_chunk: queries searched (and written) per call of ``exact_topk``, which bounds
            its own memory further.

    Rows hold -1 where fewer than k labels are left (k > L, or exclusions).
    """
    n, d = query_emb.shape
    n_labels, d_labels = label_emb.shape
    if d != d_labels:
        raise XmcbenchError(f"query embeddings have dimension {d} but label embeddings {d_labels}")
    if k < 1:
        raise XmcbenchError(f"shortlist length k must be >= 1; got {k}")
    if exclude is not None:
        check_csr(exclude, "the exclusion matrix of build_shortlist")
        if exclude.shape != (n, n_labels):
            raise XmcbenchError(f"exclusion matrix has shape {exclude.shape}; expected {(n, n_labels)}")
    device = (
        torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    # Moved once: exact_topk would otherwise copy all label embeddings to the device per chunk.
    labels = (
        label_emb if isinstance(label_emb, torch.Tensor) else torch.from_numpy(np.array(label_emb, dtype=np.float32))
    )
    labels = labels.to(device=device, dtype=torch.float32)
    out, tmp_path, final_path = _open_output(n, k, path)
    try:
        with task("hard-negative shortlist", n, enabled=progress) as advance:
            for start in range(0, n, query_chunk):
                end = min(start + query_chunk, n)
                queries = query_emb[start:end]
                if not isinstance(queries, torch.Tensor):  # a copy: memory maps may be read-only
                    queries = np.array(queries, dtype=np.float32)
                scores = exact_topk(
                    queries,
                    labels,
                    k,
                    device=device,
                    exclude=None if exclude is None else exclude[start:end],
                )
                out[start:end] = _rows_best_first(scores, k)
                advance(end - start)
        if tmp_path is None:
            return out
        out.flush()
        del out
        os.replace(tmp_path, final_path)
    except BaseException:
        for leftover in (tmp_path, final_path if path is None else None):
            if leftover is not None:
                leftover.unlink(missing_ok=True)
        raise
    result = np.load(final_path, mmap_mode="r")
    if path is None:  # an anonymous file: the mapping keeps it alive (POSIX) after the unlink
        try:
            final_path.unlink()
        except OSError:
            pass
    return result


def _open_output(n: int, k: int, path: str | Path | None) -> tuple[np.ndarray, Path | None, Path | None]:
    """An in-memory array, or a memory-mapped temp ``.npy`` beside its final path."""
    if path is None and n * k * 4 <= MEMMAP_THRESHOLD_BYTES:
        return np.empty((n, k), dtype=np.int32), None, None
    if path is None:
        folder = paths.cache_dir() / "shortlists"
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="shortlist-", suffix=".npy", dir=folder)
        os.close(fd)
        final = Path(name)
    else:
        final = Path(path)
        final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.int32, shape=(n, k))
    return out, tmp, final


def sample_hard_negatives(
    shortlist_rows: np.ndarray,
    positives: sparse.csr_matrix,
    m: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """(b, m) int64: m distinct negatives per query drawn uniformly from its shortlist row.

    Args:
        shortlist_rows: (b, k) the batch's shortlist rows (-1 entries are ignored).
        positives: (b, L) CSR, the batch's rows of the training label matrix; a positive of a
            query is never drawn as its negative, even if the shortlist holds it.
        m: negatives per query (UniDEC's η).
        rng: numpy Generator (see ``step_rng``).

    When a row has fewer than m usable shortlist labels, the rest are uniform random labels that
    are neither positives of the query nor already drawn for it; -1 only where the label space
    has no such label left.
    """
    check_csr(positives, "the positives given to sample_hard_negatives")
    cand = np.asarray(shortlist_rows, dtype=np.int64)
    if cand.ndim != 2:
        raise XmcbenchError(f"shortlist rows must be a (b, k) array; got shape {cand.shape}")
    b, k = cand.shape
    n_labels = positives.shape[1]
    if positives.shape[0] != b:
        raise XmcbenchError(f"{positives.shape[0]} rows of positives for {b} shortlist rows")
    if m < 0:
        raise XmcbenchError(f"the number of hard negatives per query must be >= 0; got {m}")
    out = np.full((b, m), -1, dtype=np.int64)
    if m == 0 or b == 0:
        return out

    if cand.size and cand.max() >= n_labels:
        raise XmcbenchError(
            f"the shortlist holds label id {int(cand.max())} but there are only {n_labels} labels; "
            "rebuild the shortlist with this dataset's label embeddings"
        )
    seg, cols, _ = row_entries(positives, np.arange(b))
    pos_keys = np.sort(pair_keys(seg, cols, n_labels))
    # Shortlist order does not matter to a uniform draw; sorted rows give sorted pair keys and
    # make repeated labels adjacent (a repeat is dropped: negatives of a query are distinct).
    cand = np.sort(cand, axis=1)
    usable = cand >= 0
    usable[:, 1:] &= cand[:, 1:] != cand[:, :-1]
    # Drop positives: look each positive up among the usable (row, label) keys, which are
    # strictly increasing in row-major order (fewer, cache-friendly searches than the reverse).
    flat = np.flatnonzero(usable)
    keys = pair_keys(flat // k, cand.ravel()[flat], n_labels)
    if keys.size:
        at = np.minimum(np.searchsorted(keys, pos_keys), keys.size - 1)
        np.put(usable, flat[at[keys[at] == pos_keys]], False)

    # Uniform without replacement: random keys, usable ones first, keep the m smallest.
    keys = np.where(usable, rng.random((b, k)), 2.0)
    if m < k:
        take = np.argpartition(keys, m - 1, axis=1)[:, :m]  # (b, m), the m smallest keys
    else:
        take = np.argsort(keys, axis=1)  # (b, k)
    picked = np.take_along_axis(cand, take, axis=1)
    ok = np.take_along_axis(usable, take, axis=1)
    out[:, : take.shape[1]] = np.where(ok, picked, -1)

    if (out < 0).any():
        _fill_random(out, pos_keys, n_labels, rng)
    return out


def _fill_random(
    out: np.ndarray, pos_keys: np.ndarray, n_labels: int, rng: np.random.Generator, rounds: int = 16
) -> None:
    """Fill the -1 slots of ``out`` (b, m) in place with random non-positive labels new to the row."""
    b, _ = out.shape
    for _ in range(rounds):
        slot_r, slot_c = np.nonzero(out < 0)
        if slot_r.size == 0:
            return
        draw = rng.integers(0, n_labels, size=slot_r.size)
        key = pair_keys(slot_r, draw, n_labels)
        have_r, have_c = np.nonzero(out >= 0)
        taken = np.sort(pair_keys(have_r, out[have_r, have_c], n_labels))
        ok = ~isin_sorted(key, pos_keys) & ~isin_sorted(key, taken)
        # Two slots of one row may draw the same label: keep the first.
        _, first = np.unique(key, return_index=True)
        unique = np.zeros(key.size, dtype=bool)
        unique[first] = True
        ok &= unique
        out[slot_r[ok], slot_c[ok]] = draw[ok]
    # Rows that still lack labels have few non-positives left: draw from the exact complement.
    for r in np.unique(np.nonzero(out < 0)[0]):
        lo, hi = np.searchsorted(pos_keys, [r * n_labels, (r + 1) * n_labels])
        used = np.concatenate([pos_keys[lo:hi] - r * n_labels, out[r][out[r] >= 0]])
        free = np.setdiff1d(np.arange(n_labels), used)
        slots = np.flatnonzero(out[r] < 0)
        fill = rng.permutation(free)[: slots.size]
        out[r, slots[: fill.size]] = fill
