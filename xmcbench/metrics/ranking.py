"""From a score matrix to rankings: filtering, top-k, and where each true label lands.

Every metric in this package is a function of *which true labels appear at which rank* in each
row's ranking. This module computes that once, vectorised, and hands the metrics a
:class:`RankedTruth` (the true pairs found in the top ``k_max``, with their ranks, plus the
ground truth itself), from which each metric module builds its per-row numerators and
denominators.

Conventions (shared by every metric, pyxclib/napkinXC-compatible):

* **Predictions** are a CSR matrix (n, L) of scores. Every *stored* entry is a prediction, whatever
  its value (0 and negative scores included: inner products can be negative); absent entries are
  not predicted. A dense (n, L) array means every label is scored. NaN scores are an error
  (±inf are scores: they rank first / last); a label scored twice in one row is an error.
* **Ranking** is by score, descending; **ties are broken by the lower label index** (a stable,
  documented rule, not an accident of a sort). ``-0.0`` and ``0.0`` tie. float32 scores are
  compared exactly; float64 scores too (ranked by their 64-bit integer image with the few lowest
  mantissa bits given up to the position, then the rare rows where that merged distinct scores
  are re-ranked exactly). Any real dtype ranks exactly: float16 as float32, longdouble as itself,
  integers and bools as float64 (integers beyond ±2^53, which float64 would merge, by their rank).
* **Filter** pairs (the LF datasets' reciprocal/self pairs) are removed from the predictions
  *before* top-k, so the next prediction moves up. They are never removed from the ground truth.
* **Rows with fewer than k predictions** simply have fewer ranked labels: the missing slots are
  misses (the metric's denominator does not shrink). Any k >= 1 is valid, also above the number
  of labels L (P@k then still divides by k); work and memory are bounded by L, not by k.
* **Inputs are validated in full** (:mod:`xmcbench.metrics.validate`): corrupt ``indptr``,
  negative or out-of-range label ids, NaN scores, non-finite labels and propensities are errors,
  never silent misses.
* **Ground truth is binarised**: every stored non-zero entry is a relevant label; explicit zeros
  are dropped; repeated entries count once.

How it is fast: rows are processed in chunks laid out as a dense (rows, longest row) block of
int64 keys ``order(score) << 32 | position << 1 | is_true``. ``order`` is a monotone integer
image of ``-score`` (for float64, the key is the 64-bit image with its lowest bits replaced by
``position << 1 | is_true``: see :func:`_descending_order64`); ``position`` is the entry's place in its CSR row (rows are kept sorted by
label, so a lower position is a lower label: the tie-break is built into the key); ``is_true``
marks predictions that are true labels, found beforehand by a vectorised binary search of every
true pair inside its row. One ``np.partition``/``np.sort`` per chunk ranks every row at once,
and the low bit of the sorted keys says where the hits are. When all rows have the same number
of predictions (the usual top-k output) the block is a reshape, not a copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from xmcbench.errors import XmcbenchError
from xmcbench.metrics.validate import check_int, check_sparse, check_values

__all__ = [
    "RankedTruth",
    "as_predictions",
    "as_truth",
    "discounts",
    "find_in_rows",
    "rank_truth",
    "rank_truth_in_blocks",
    "top_k",
]

_PAD = np.int64(np.iinfo(np.int64).max - 1)  # key of an empty or filtered slot: sorts last, low bit 0
_LOW31 = np.int64(0x7FFFFFFF)
_LOW32 = np.int64(0xFFFFFFFF)
_HIGH, _LOW = (1, 0) if np.little_endian else (0, 1)  # int32 halves of an int64, by memory order
# Dense slots per chunk: 128k int64 keys = 1 MB, so that a chunk stays in the CPU's cache through
# every pass over it (keys, partition, sort, hit scan). 64 MB chunks went to memory at each pass:
# ranking 200k rows x 100 took 0.56 s with them and 0.42 s with these (2-core AMD EPYC).
_CHUNK_ENTRIES = 1 << 17
_MAX_PADDING = 1 << 23  # -1 slots past the last label that top_k allocates before it calls k absurd: 64 MB
_ORDER_STEP = 1 << 16  # float64 scores turned into keys per slice: 2 x 512 KB, within L2
_EXACT_INT = 1 << 53  # integers up to this size are exact in float64


# ---------------------------------------------------------------------------------------------
# input normalisation


def as_predictions(predictions, name: str = "predictions") -> sp.csr_matrix:
    """Predictions as a canonical float CSR (sorted labels, no repeats); dense arrays keep every entry."""
    if isinstance(predictions, np.ndarray):
        predictions = np.asarray(predictions)  # np.matrix would ravel to a (1, n) matrix
        if predictions.ndim != 2:
            raise XmcbenchError(f"{name} must be a 2-D (queries x labels) score matrix; got shape {predictions.shape}")
        n, n_labels = predictions.shape
        check_values(predictions.ravel(), np.arange(n + 1) * n_labels, name, allow_inf=True)
        # Every cell of a dense matrix is a score, zeros included: build the CSR by hand.
        matrix = sp.csr_matrix(
            (
                predictions.ravel(),
                np.tile(np.arange(n_labels, dtype=np.int64), n),
                np.arange(n + 1, dtype=np.int64) * n_labels,
            ),
            shape=(n, n_labels),
        )
    elif sp.issparse(predictions):
        matrix = check_sparse(predictions, name, allow_inf=True, allow_repeats=False)
    else:
        raise XmcbenchError(
            f"{name} must be a scipy.sparse matrix or a 2-D numpy array; got {type(predictions).__name__}"
        )
    if not np.issubdtype(matrix.dtype, np.floating):
        matrix = _integer_scores_as_float(matrix)
    if not matrix.has_canonical_format:
        matrix = matrix.copy()
        matrix.sort_indices()
        rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
        dup = np.flatnonzero((rows[1:] == rows[:-1]) & (matrix.indices[1:] == matrix.indices[:-1]))
        if dup.size:
            raise XmcbenchError(
                f"{name}: label {matrix.indices[dup[0]]} is scored twice in row {rows[dup[0]]}; "
                "keep one score per (query, label)"
            )
        matrix.has_canonical_format = True
    return matrix


def _integer_scores_as_float(matrix: sp.csr_matrix) -> sp.csr_matrix:
    """Integer or bool scores as float64 in the same order: beyond 2^53, float64 would merge distinct
    integers into ties, so such scores are replaced by their rank among the matrix's values (exact)."""
    data = matrix.data
    if data.size and data.dtype.kind in "iu" and (data.max() > _EXACT_INT or data.min() < -_EXACT_INT):
        _, rank = np.unique(data, return_inverse=True)  # sorted distinct values: ties stay ties
        return sp.csr_matrix((rank.astype(np.float64), matrix.indices, matrix.indptr), shape=matrix.shape)
    return matrix.astype(np.float64)


def as_truth(truth, name: str = "truth") -> sp.csr_matrix:
    """Ground truth as a canonical binary CSR: stored non-zeros are relevant, repeats count once."""
    if isinstance(truth, np.ndarray):
        truth = np.asarray(truth)  # np.matrix would ravel to a (1, n) matrix
        if truth.ndim != 2:
            raise XmcbenchError(f"{name} must be a 2-D (queries x labels) matrix; got shape {truth.shape}")
        check_values(truth.ravel(), np.arange(truth.shape[0] + 1) * truth.shape[1], name, allow_inf=False)
        # From the non-zero cells, not sp.csr_matrix(truth): scipy has no float16 matrices.
        rows, cols = np.nonzero(truth)
        matrix = sp.csr_matrix((np.ones(rows.size, dtype=np.float32), (rows, cols)), shape=truth.shape)
    elif sp.issparse(truth):
        matrix = check_sparse(truth, name)
    else:
        raise XmcbenchError(f"{name} must be a scipy.sparse matrix or a 2-D numpy array; got {type(truth).__name__}")
    if not matrix.has_canonical_format or (matrix.nnz and not np.all(matrix.data != 0)):
        matrix = matrix.copy()
        matrix.data = (matrix.data != 0).astype(np.float32)  # binarise first: weights never cancel out
        matrix.sum_duplicates()  # a repeated entry is one label
        matrix.eliminate_zeros()
        matrix.data[:] = 1.0
    return matrix


# ---------------------------------------------------------------------------------------------
# chunked dense keys


def _descending_order(scores: np.ndarray) -> np.ndarray:
    """New int32 array whose ascending order is the descending order of float32 (or narrower) ``scores``.

    Ties stay ties; the order is exact.
    """
    order = np.negative(scores.astype(np.float32, copy=False))
    order += np.float32(0.0)  # turns -0.0 into 0.0 so that they tie
    order = order.view(np.int32)
    # IEEE-754 floats order like sign-magnitude integers: flip the magnitude bits of negatives.
    flip = order >> 31
    flip &= 0x7FFFFFFF
    order ^= flip
    return order


def _descending_order64(scores: np.ndarray, shift: int) -> np.ndarray:
    """New int64 array ordered like ``-float64(scores)``, its lowest ``shift`` bits cleared.

    The 64-bit image of a float is monotone (as for :func:`_descending_order`), and clearing low
    bits keeps it monotone: distinct scores may merge, never swap. The freed bits then hold the
    key's ``position << 1 | is_true``. With a row of width w, ``shift`` is about log2(w) + 1, so
    scores merge only within 2^(shift - 52) of each other (2^-44 at w = 100, 2^-32 at w = 500k),
    against float32's 2^-24; :func:`_rank_block_exact` repairs the rows where a merge matters.
    Wider-than-float64 scores (longdouble) are rounded to float64 first, monotone too.
    """
    with np.errstate(over="ignore"):  # longdouble beyond float64's range: ±inf, still in order
        scores = scores.astype(np.float64, copy=False)
    order = np.empty(scores.size, dtype=np.int64)
    as_float = order.view(np.float64)
    flip = np.empty(min(scores.size, _ORDER_STEP), dtype=np.int64)
    keep = ~np.int64((1 << shift) - 1)
    # Slices that stay in the CPU cache through all six passes: 2x faster than whole-array passes.
    for start in range(0, scores.size, _ORDER_STEP):
        end = min(start + _ORDER_STEP, scores.size)
        o, f = order[start:end], flip[: end - start]
        np.negative(scores[start:end], out=as_float[start:end])
        as_float[start:end] += 0.0  # -0.0 -> 0.0: they tie
        np.right_shift(o, 63, out=f)
        f &= np.int64(0x7FFF_FFFF_FFFF_FFFF)
        o ^= f  # IEEE-754 floats order like sign-magnitude integers: flip the magnitude of negatives
        o &= keep
    return order


def _key_shift(width: int) -> int:
    """Low bits that ``position << 1 | is_true`` needs in a row of ``width`` slots."""
    return max(1, (width - 1).bit_length()) + 1


def _chunks(lengths: np.ndarray, budget: int):
    """Consecutive row ranges [start, end) whose (rows x longest row) stays within ``budget``."""
    n = lengths.size
    mean = max(1, int(lengths.mean())) if n else 1
    start = 0
    while start < n:
        window = np.maximum(lengths[start : start + min(n - start, 4 * max(1, budget // mean))], 1)
        cost = np.maximum.accumulate(window) * np.arange(1, window.size + 1)
        count = max(1, int(np.searchsorted(cost, budget, side="right")))
        yield start, start + count
        start += count


# ---------------------------------------------------------------------------------------------
# ranking machinery


def find_in_rows(matrix: sp.csr_matrix, rows: np.ndarray, labels: np.ndarray, block: int = 1 << 16) -> np.ndarray:
    """Entry index of each (row, label) among ``matrix``'s stored entries, or -1 where absent.

    A branchless binary search inside each row, all pairs at once (rows must have sorted
    indices): ceil(log2(longest row)) vectorised steps, with no (row * L + label) key array over
    all entries. Pairs go ``block`` at a time so that the rows they probe stay in the CPU cache
    from one step to the next.
    """
    indptr, indices = matrix.indptr, matrix.indices
    rows = np.asarray(rows, dtype=np.int64)
    labels = np.asarray(labels)
    out = np.full(rows.size, -1, dtype=np.int64)
    if indices.size == 0 or rows.size == 0:
        return out
    last = indices.size - 1
    for start in range(0, rows.size, block):
        r, x = rows[start : start + block], labels[start : start + block]
        base = indptr[r].astype(np.int64)  # invariant: the answer, if any, is in [base, base + length)
        length = (indptr[r + 1] - indptr[r]).astype(np.int32)
        for _ in range(int(length.max()).bit_length()):
            half = length >> 1
            probe = base + half
            # Move right when the probed label is <= the wanted one; lanes with length <= 1 stay put.
            base = np.where(indices[np.minimum(probe, last)] <= x, probe, base)
            length -= half
        found = (length > 0) & (indices[np.minimum(base, last)] == x)
        out[start : start + block] = np.where(found, base, -1)
    return out


@dataclass
class _Chunk:
    start: int  # first row
    end: int  # one past the last row
    sorted_keys: np.ndarray  # (rows, min(k, width)) int64 keys of each row's top k, best first


def _ranked_chunks(
    predictions: sp.csr_matrix, k: int, true_entries: np.ndarray | None, removed_entries: np.ndarray | None, budget: int
):
    """Yield each chunk's top-k keys. ``true_entries`` / ``removed_entries`` are sorted CSR entry indices."""
    lengths = np.diff(predictions.indptr)
    for start, end in _chunks(lengths, budget):
        first, last = int(predictions.indptr[start]), int(predictions.indptr[end])
        rows, size = end - start, last - first
        counts = lengths[start:end]
        width = int(counts.max()) if rows else 0

        # 1. Keys: order(score) << 32 | position << 1 | is_true, laid out as (rows, width). The
        #    two 32-bit halves are written directly (no 64-bit shifts); the low half is unsigned,
        #    so the int64 compares as (order, position, is_true). float64 keys are the 64-bit
        #    order with position << 1 | is_true in its lowest ``shift`` bits instead.
        data = predictions.data[first:last]
        wide = data.dtype.itemsize > 4
        shift = _key_shift(max(width, 1))
        uniform = width > 0 and counts.min() == width  # all rows equally long: the usual top-k output
        if wide:
            flat = _descending_order64(data, shift)
            if uniform:
                block = flat.reshape(rows, width)
                block |= np.arange(width, dtype=np.int64) << 1
        elif uniform:
            block = np.empty((rows, width), dtype=np.int64)
            halves = block.view(np.int32).reshape(rows, width, 2)
            halves[:, :, _HIGH] = _descending_order(data).reshape(rows, width)
            halves[:, :, _LOW] = np.arange(width, dtype=np.int32) << 1
            flat = block.ravel()
        else:
            flat = np.zeros(size, dtype=np.int64)
            flat.view(np.int32).reshape(size, 2)[:, _HIGH] = _descending_order(data)
        if true_entries is not None:
            lo, hi = np.searchsorted(true_entries, [first, last])
            flat[true_entries[lo:hi] - first] |= 1
        if not uniform:
            block = np.empty((rows, max(width, 1)), dtype=np.int64)
            filled = np.arange(block.shape[1]) < counts[:, None]  # (rows, width), CSR order row-major
            block[filled] = flat
            block |= np.arange(block.shape[1], dtype=np.int64) << 1
            block[~filled] = _PAD
        if removed_entries is not None:
            lo, hi = np.searchsorted(removed_entries, [first, last])
            gone = removed_entries[lo:hi] - first
            row_first = predictions.indptr[start:end].astype(np.int64) - first
            gone_row = np.searchsorted(row_first, gone, side="right") - 1
            block[gone_row, gone - row_first[gone_row]] = _PAD

        # 2. Rank every row at once: partition off the top k, sort only those.
        take = min(k, block.shape[1])
        if wide:
            row_first = predictions.indptr[start:end].astype(np.int64) - first
            yield _Chunk(start, end, _rank_block_exact(block, take, shift, data, row_first))
            continue
        if take < block.shape[1]:
            block = np.partition(block, take - 1, axis=1)[:, :take]
        yield _Chunk(start, end, np.sort(block, axis=1))


def _rank_block_exact(block: np.ndarray, take: int, shift: int, data: np.ndarray, row_first: np.ndarray) -> np.ndarray:
    """Sorted top-``take`` keys of each row of ``block``, float64 keys (:func:`_descending_order64`)
    turned into the usual layout (high half unused; position, padding and low bit as usual).

    The truncated order is monotone, so the ranking is exact except inside a group of keys with
    equal order whose scores differ. Such a group matters only if it reaches the top ``take``:
    either it lies within the top ``take + 1`` (adjacent pairs there are compared exactly) or it
    straddles the cut (its members all over the row are compared). Only those rows are re-ranked
    exactly (:func:`_rerank_exact`).
    """
    rows, width = block.shape
    position_mask = np.int64((1 << (shift - 1)) - 1)
    see = min(take + 1, width)
    top = np.partition(block, see - 1, axis=1)[:, :see] if see < width else block
    top = np.sort(top, axis=1)
    high = top >> shift

    def value(r: np.ndarray, keys: np.ndarray) -> np.ndarray:
        return data[row_first[r] + ((keys >> 1) & position_mask)]

    # Equal orders next to each other; padding (which sorts last) is never part of a group.
    same = high[:, 1:] == high[:, :-1]
    bad = [np.zeros(0, dtype=np.int64)]
    if same.any():  # usually not, and a nonzero() over the whole block costs more than the rest
        r, c = np.nonzero(same)
        real = top[r, c + 1] != _PAD
        r, c = r[real], c[real]
        bad.append(r[value(r, top[r, c]) != value(r, top[r, c + 1])])
        # The group at the cut may continue past the visible top take + 1.
        cut = r[c == take - 1] if see > take else r[:0]
        if cut.size:
            sub = block[cut]
            rr, cc = np.nonzero(((sub >> shift) == high[cut, take - 1][:, None]) & (sub != _PAD))
            ref = value(cut, top[cut, take - 1])
            bad.append(cut[rr[value(cut[rr], sub[rr, cc]) != ref[rr]]])
    bad_rows = np.unique(np.concatenate(bad))
    # Whole rows, sorted (the top already is, when it spans the row), before ``out`` overwrites them.
    redo = (top if see == width else block)[bad_rows]
    out = np.ascontiguousarray(top[:, :take])
    padded = np.flatnonzero(out[:, -1] == _PAD)  # padding sorts last: only these rows have any
    pads = out[padded] == _PAD
    out &= np.int64((1 << shift) - 1)  # position << 1 | is_true
    if padded.size:
        out[padded] = np.where(pads, _PAD, out[padded])
    if bad_rows.size:
        if see < width:
            redo.sort(axis=1)
        out[bad_rows] = _rerank_exact(redo, take, shift, lambda keys: value(bad_rows[:, None], keys))
    return out


def _rerank_exact(sub: np.ndarray, take: int, shift: int, value) -> np.ndarray:
    """Exact sorted top-``take`` keys (usual layout) of sorted rows of float64 keys whose truncation merged scores.

    Sorted by the truncated key, each run of equal truncated orders (a group) is contiguous, and
    the exact order only needs each group sorted by the bits the truncation cleared, then by
    position. So a second sort by ``group << 2 shift | cleared bits << shift | position << 1 |
    is_true`` (3 shift - 1 bits: rows up to 2^20 wide) ranks exactly; wider rows, and scores wider
    than float64 (whose cleared bits say too little), take a lexsort of the exact scores.
    ``value(keys)`` gives the exact score of each key of ``sub``.
    """
    low = np.int64((1 << shift) - 1)
    real = sub != _PAD
    padded = not real[:, -1].all()  # padding sorts last
    exact = np.where(real, value(np.where(real, sub, 0)), 0.0) if padded else value(sub)  # padding: any number
    group = np.zeros(sub.shape, dtype=np.int64)
    high = sub >> shift
    np.cumsum(high[:, 1:] != high[:, :-1], axis=1, out=group[:, 1:])
    if 3 * shift - 1 <= 63 and exact.dtype.itemsize <= 8:
        cleared = _descending_order64(exact.ravel(), 0).reshape(sub.shape) & low
        order = np.sort((group << (2 * shift)) | (cleared << shift) | (sub & low), axis=1)[:, :take] & low
    else:
        index = np.lexsort((sub & low, -exact + 0.0, group), axis=1)[:, :take]  # + 0.0: -0.0 and 0.0 tie
        order = np.take_along_axis(sub, index, axis=1) & low
    # Padding is its own last group in both sorts, so it keeps its columns.
    return np.where(real[:, :take], order, _PAD) if padded else order


def _hit_slots(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of the keys whose low bit (is_true) is set, row-major."""
    if np.little_endian and keys.flags.c_contiguous:
        low = keys.view(np.uint8)[:, ::8] & 1  # the lowest byte only: 8x less memory traffic
    else:
        low = (keys & 1).astype(np.uint8)
    return np.divmod(np.flatnonzero(low.view(bool)), keys.shape[1])


def _positions(keys: np.ndarray) -> np.ndarray:
    """Position-in-row encoded in keys (meaningless for padding)."""
    return (keys >> 1) & _LOW31


def _check_shapes(predictions: sp.csr_matrix, truth: sp.csr_matrix | None, filter) -> sp.csr_matrix | None:
    if truth is not None and predictions.shape != truth.shape:
        raise XmcbenchError(
            f"predictions have shape {predictions.shape} but the ground truth has shape {truth.shape}; "
            "they must have one row per test query and one column per label, in the same order"
        )
    if filter is None:
        return None
    f = as_truth(filter, name="filter")
    if f.shape != predictions.shape:
        raise XmcbenchError(
            f"the filter has shape {f.shape} but predictions have shape {predictions.shape}; "
            "use the filter file of the same split (test) and label set"
        )
    return f


# ---------------------------------------------------------------------------------------------
# public API


def _prepare(predictions, truth, filter):
    predictions = as_predictions(predictions)
    truth = None if truth is None else as_truth(truth)
    filter = _check_shapes(predictions, truth, filter)
    removed = None
    if filter is not None and filter.nnz:
        f_rows = np.repeat(np.arange(filter.shape[0], dtype=np.int64), np.diff(filter.indptr))
        entries = find_in_rows(predictions, f_rows, filter.indices)
        removed = np.sort(entries[entries >= 0])
    return predictions, truth, removed


def top_k(predictions, k: int, *, filter=None, chunk_entries: int = _CHUNK_ENTRIES) -> np.ndarray:
    """Each row's top-k labels as an (n, k) int64 array, best first, padded with -1.

    Filter pairs are removed first; ties go to the lower label index; rows with fewer than k
    (remaining) predictions are padded with -1. A k so far above the number of labels that the
    padding alone would exceed 8M slots (64 MB) is refused (XmcbenchError), not allocated.
    """
    k = check_int(k, "k")
    predictions, _, removed = _prepare(predictions, None, filter)
    n, n_labels = predictions.shape
    if k > n_labels and n * (k - n_labels) > _MAX_PADDING:  # only -1 padding past L: refuse an absurd amount
        raise XmcbenchError(f"k={k} is far above the number of labels ({n_labels}); ask for k <= {n_labels}")
    out = np.full((predictions.shape[0], k), -1, dtype=np.int64)
    row_first = predictions.indptr.astype(np.int64)
    for chunk in _ranked_chunks(predictions, k, None, removed, chunk_entries):
        keys = chunk.sorted_keys
        valid = keys != _PAD
        entries = row_first[chunk.start : chunk.end, None] + _positions(keys)
        labels = predictions.indices[np.where(valid, entries, 0)] if predictions.nnz else entries
        out[chunk.start : chunk.end, : keys.shape[1]] = np.where(valid, labels, -1)
    return out


class _cached:
    """``functools.cached_property`` without its lock: before Python 3.12 that lock is one per class,
    so the row blocks ranked on threads would compute their cached statistics one at a time. Each
    instance belongs to one block (one thread), so no lock is needed."""

    def __init__(self, func):
        self.func = func
        self.__doc__ = func.__doc__

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.func(instance)  # found there from now on
        return value


def discounts(k: int) -> np.ndarray:
    """(k,) DCG position discounts 1 / log2(j + 2) for 0-based positions j."""
    return 1.0 / np.log2(np.arange(k) + 2.0)


@dataclass(frozen=True)
class RankedTruth:
    """Which true labels each row ranked where: everything the @k metrics need.

    ``hit_*`` arrays list the true (row, label) pairs found in their row's top ``k_max``, sorted by
    rank (0-based). ``true_*`` arrays list every true pair (row-major) and ``n_true`` counts them
    per row. ``inv_propensity`` (L,) is optional; the ``ps_*`` statistics need it.

    The methods return per-row (n_rows,) sums (cached: do not modify them); metric modules
    combine them into per-row numerators and denominators (see :mod:`xmcbench.metrics.precision`
    and siblings).
    """

    n_rows: int
    n_labels: int
    k_max: int
    hit_row: np.ndarray  # (hits,) int64
    hit_rank: np.ndarray  # (hits,) int64, ascending
    hit_label: np.ndarray  # (hits,) int64
    true_row: np.ndarray  # (pairs,) int64
    true_label: np.ndarray  # (pairs,) int64
    n_true: np.ndarray  # (n_rows,) int64
    inv_propensity: np.ndarray | None = field(default=None, repr=False)
    # (labels by descending weight, each label's place in that order): the same for every row block
    # of one evaluation, so it is computed once and shared (None: computed here when first needed)
    weight_order: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    def _check_k(self, k: int) -> int:
        """``k`` capped at the number of labels: no row ranks or holds more, so every statistic at a
        larger k equals the one at L, and memory stays O(L) however large k is."""
        if not 1 <= k <= self.k_max:
            raise ValueError(f"k={k} is outside 1..{self.k_max}; rank the truth with a larger k_max")
        return min(k, self.n_labels)

    @_cached
    def _cache(self) -> dict:
        return {}

    def _sum_top(self, name: str, k: int, values=None) -> np.ndarray:
        """(n_rows,) per-row sum of ``values()`` (aligned with the hits; None counts) over hits ranked < k.

        Hits are sorted by rank, so "rank < k" is a prefix, summed in that order: a row's value at k
        is the same bits whichever other k are asked for (a sum continued from a smaller k's would
        group the additions otherwise). Cached per k; callers must not modify the returned arrays.
        """
        k = self._check_k(k)
        cache = self._cache.setdefault(name, {})
        if k not in cache:
            hi = int(np.searchsorted(self.hit_rank, k))
            weights = None
            if values is not None:  # computed once per statistic, on first use
                if name + ":values" not in self._cache:
                    self._cache[name + ":values"] = values()
                weights = self._cache[name + ":values"][:hi]
            sums = np.bincount(self.hit_row[:hi], weights=weights, minlength=self.n_rows)  # int64 without weights
            cache[k] = sums if sums.dtype == np.float64 else sums.astype(np.float64)
        return cache[k]

    # --- plain statistics -------------------------------------------------------------------

    def hits(self, k: int) -> np.ndarray:
        """(n_rows,) number of true labels among the top k predictions."""
        return self._sum_top("hits", k)

    def dcg(self, k: int) -> np.ndarray:
        """(n_rows,) sum over true labels ranked j < k of 1 / log2(j + 2)."""
        return self._sum_top("dcg", k, lambda: discounts(min(self.k_max, self.n_labels))[self.hit_rank])

    def ideal_dcg(self, k: int) -> np.ndarray:
        """(n_rows,) best possible DCG@k: sum_{j < min(k, |y|)} 1 / log2(j + 2); 0 for rows without labels."""
        k = min(k, self.n_labels)  # n_true <= L: the same sum, without an O(k) array
        cumulative = np.concatenate(([0.0], np.cumsum(discounts(k))))
        return cumulative[np.minimum(self.n_true, k)]

    # --- propensity-scored statistics -------------------------------------------------------

    def _weights(self) -> np.ndarray:
        if self.inv_propensity is None:
            raise ValueError("propensity-scored metrics need inv_propensity; pass it to rank_truth")
        return self.inv_propensity

    @_cached
    def _hit_weights(self) -> np.ndarray:
        return self._weights()[self.hit_label]

    def ps_gain(self, k: int) -> np.ndarray:
        """(n_rows,) sum of inverse propensities of the true labels in the top k."""
        return self._sum_top("ps_gain", k, lambda: self._hit_weights)

    def ps_dcg(self, k: int) -> np.ndarray:
        """(n_rows,) sum over true labels ranked j < k of w_label / log2(j + 2)."""
        return self._sum_top(
            "ps_dcg", k, lambda: self._hit_weights * discounts(min(self.k_max, self.n_labels))[self.hit_rank]
        )

    @_cached
    def _ideal(self) -> np.ndarray:
        """(pairs,) the true labels' weights grouped by row (row-major), each row's in descending
        order: row r's ideal PS ranking is ``_ideal[row_start[r] : row_start[r] + n_true[r]]``."""
        w = self._weights()
        # Rank labels by weight once (exact, float64); then sort (row, weight rank) packed in one
        # int64. The pairs are already grouped by row, so the stable sort (a merge sort that
        # exploits existing runs) is fast.
        by_weight, weight_rank = self.weight_order if self.weight_order is not None else weight_order(w)
        packed = np.sort((self.true_row << 32) | weight_rank[self.true_label], kind="stable")
        return w[by_weight[packed & _LOW32]]

    def _sum_ideal(self, name: str, k: int, discounted: bool) -> np.ndarray:
        """(n_rows,) sum of the k largest weights of each row's true labels (discounted: w / log2(j + 2)).

        Built place by place from the nearest smaller cached k, adding the weight at place j to
        the rows that have more than j true labels — in the same order as a per-row loop would.
        """
        k = self._check_k(k)
        cache = self._cache.setdefault(name, {0: np.zeros(self.n_rows)})
        if k not in cache:
            below = max(x for x in cache if x < k)
            total = cache[below].copy()
            discount = discounts(k)
            for j in range(below, k):
                rows, add = self._ideal_place(j)
                if rows.size == 0:
                    break
                total[rows] += add * discount[j] if discounted else add
            cache[k] = total
        return cache[k]

    def _ideal_place(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows with more than j true labels, the (j+1)-th largest weight of each): shared by the
        plain and the discounted ideal sums, which walk the same places."""
        places = self._cache.setdefault("ideal_places", {})
        if j not in places:
            rows = np.flatnonzero(self.n_true > j)
            places[j] = rows, self._ideal[self._row_start[rows] + j]
        return places[j]

    @_cached
    def _row_start(self) -> np.ndarray:
        """(n_rows,) where each row's true pairs start in the row-major ``true_*`` arrays."""
        return np.concatenate(([0], np.cumsum(self.n_true)))[:-1]

    def best_ps_gain(self, k: int) -> np.ndarray:
        """(n_rows,) the k largest inverse propensities among the row's true labels, summed."""
        return self._sum_ideal("best_ps_gain", k, discounted=False)

    def best_ps_dcg(self, k: int) -> np.ndarray:
        """(n_rows,) PSDCG@k of the ideal ranking (true labels by descending inverse propensity)."""
        return self._sum_ideal("best_ps_dcg", k, discounted=True)


def weight_order(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(labels by descending weight, ties to the lower label; each label's place in that order)."""
    by_weight = np.argsort(-weights, kind="stable")
    weight_rank = np.empty(weights.size, dtype=np.int64)
    weight_rank[by_weight] = np.arange(weights.size)
    return by_weight, weight_rank


def _order_small(values: np.ndarray, bound: int) -> np.ndarray:
    """Stable argsort of non-negative integers below ``bound`` (a radix sort for 8/16-bit types)."""
    dtype = np.uint8 if bound <= 1 << 8 else np.uint16 if bound <= 1 << 16 else np.int64
    return np.argsort(values.astype(dtype), kind="stable")


def _check_weights(inv_propensity, n_labels: int) -> np.ndarray:
    """(L,) float64 inverse propensities: finite, non-negative, one per label (a (1, L) or (L, 1) array is
    accepted, as pyxclib ravels its argument; any other 2-D shape is a mistake, not a vector)."""
    try:
        weights = np.asarray(inv_propensity, dtype=np.float64)
    except (TypeError, ValueError):
        raise XmcbenchError("inv_propensity must be an (L,) array of numbers") from None
    if weights.ndim > 2 or (weights.ndim == 2 and min(weights.shape) > 1):
        raise XmcbenchError(f"inv_propensity must be an (L,) array, one weight per label; got shape {weights.shape}")
    weights = weights.ravel()
    if weights.size != n_labels:
        raise XmcbenchError(
            f"inv_propensity has {weights.size} entries but there are {n_labels} labels; "
            "compute it from the training labels of the same dataset"
        )
    if weights.size and not np.isfinite(weights).all():
        raise XmcbenchError(
            "inv_propensity has NaN or infinite weights; compute it with xmcbench.metrics.inv_propensity "
            "from finite A and B"
        )
    if weights.size and weights.min() < 0:  # a negative weight would make PSP a signed sum, not a score
        raise XmcbenchError(
            f"inv_propensity has negative weights (label {int(np.argmin(weights))}: {weights.min():g}); "
            "compute it with xmcbench.metrics.inv_propensity"
        )
    return weights


def rank_truth(
    predictions,
    truth,
    k_max: int,
    *,
    filter=None,
    inv_propensity: np.ndarray | None = None,
    chunk_entries: int = _CHUNK_ENTRIES,
) -> RankedTruth:
    """Rank each row's predictions (filter removed, ties to the lower label) and find the true labels.

    Args:
        predictions: (n, L) CSR of scores (or a dense array: every label scored).
        truth: (n, L) ground truth; stored non-zeros are relevant.
        k_max: the largest k any metric will ask for.
        filter: optional (n, L) matrix of (row, label) pairs to remove from the predictions.
        inv_propensity: optional (L,) inverse propensities for the PS metrics.
        chunk_entries: dense slots per chunk (memory bound); tests shrink it to exercise chunking.
    """
    ((_, rank),) = rank_truth_in_blocks(
        predictions, truth, k_max, blocks=1, filter=filter, inv_propensity=inv_propensity, chunk_entries=chunk_entries
    )
    return rank()


def rank_truth_in_blocks(
    predictions,
    truth,
    k_max: int,
    *,
    blocks: int,
    filter=None,
    inv_propensity: np.ndarray | None = None,
    chunk_entries: int = _CHUNK_ENTRIES,
    min_block_entries: int = 1 << 20,
) -> list[tuple[int, Callable[[], RankedTruth]]]:
    """:func:`rank_truth` of consecutive row blocks: (first row, a function that ranks that block).

    The inputs are checked once, here; each block is then ranked on its own (in its own thread, say:
    numpy releases the GIL in the work), and its per-row statistics are exactly those rows' statistics
    of one :func:`rank_truth` over all rows. Blocks hold about equally many predictions; there are
    fewer than ``blocks`` when the rows are few, and one when there are under ``min_block_entries``
    predictions a block (a thread costs more than it saves on small inputs).
    """
    k_max = check_int(k_max, "k")
    predictions, truth, removed = _prepare(predictions, truth, filter)
    if inv_propensity is not None:
        inv_propensity = _check_weights(inv_propensity, truth.shape[1])
    n = truth.shape[0]
    # cuts at about equal numbers of predictions (a dense matrix: equal numbers of rows)
    blocks = max(1, min(blocks, predictions.nnz // max(1, min_block_entries)))
    wanted = np.linspace(0, predictions.nnz, blocks + 1)[1:-1]
    cuts = np.unique(np.concatenate(([0], np.searchsorted(predictions.indptr, wanted), [n])))
    # blocks share one weight order; one block computes it only if a PS statistic asks for it
    order = weight_order(inv_propensity) if inv_propensity is not None and len(cuts) > 2 else None

    def ranker(start: int, end: int) -> Callable[[], RankedTruth]:
        def rank() -> RankedTruth:
            first, last = int(predictions.indptr[start]), int(predictions.indptr[end])
            mine = None
            if removed is not None:
                lo, hi = np.searchsorted(removed, [first, last])
                mine = removed[lo:hi] - first
            return _rank_checked(
                _row_block(predictions, start, end), _row_block(truth, start, end), k_max, mine,
                inv_propensity, order, chunk_entries,
            )  # fmt: skip

        return rank

    if n == 0:
        return [(0, ranker(0, 0))]
    return [(int(a), ranker(int(a), int(b))) for a, b in zip(cuts[:-1], cuts[1:])]


def _row_block(matrix: sp.csr_matrix, start: int, end: int) -> sp.csr_matrix:
    """Rows [start, end) of a canonical CSR as a canonical CSR over the same arrays (no copy)."""
    first, last = int(matrix.indptr[start]), int(matrix.indptr[end])
    block = sp.csr_matrix(
        (matrix.data[first:last], matrix.indices[first:last], matrix.indptr[start : end + 1] - first),
        shape=(end - start, matrix.shape[1]),
        copy=False,
    )
    block.has_canonical_format = True  # a slice of sorted, repeat-free rows is sorted and repeat-free
    return block


def _rank_checked(
    predictions: sp.csr_matrix,
    truth: sp.csr_matrix,
    k_max: int,
    removed: np.ndarray | None,
    inv_propensity: np.ndarray | None,
    by_weight: tuple[np.ndarray, np.ndarray] | None,
    chunk_entries: int,
) -> RankedTruth:
    """:func:`rank_truth` of inputs already checked (``removed``: sorted entries the filter drops;
    ``by_weight``: :func:`weight_order` of ``inv_propensity``, shared by the blocks of one evaluation)."""
    n, n_labels = truth.shape
    n_true = np.diff(truth.indptr).astype(np.int64)
    true_row = np.repeat(np.arange(n, dtype=np.int64), n_true)
    true_label = truth.indices.astype(np.int64)
    entries = find_in_rows(predictions, true_row, true_label)
    # Predictions that are true labels; already ascending (both matrices are row-major, label-sorted).
    true_entries = np.sort(entries[entries >= 0], kind="stable")

    hit_rows, hit_ranks, hit_entries = [], [], []
    row_first = predictions.indptr.astype(np.int64)
    for chunk in _ranked_chunks(predictions, k_max, true_entries, removed, chunk_entries):
        keys = chunk.sorted_keys
        local_row, rank = _hit_slots(keys)  # padding has a 0 low bit
        row = local_row + chunk.start
        hit_rows.append(row)
        hit_ranks.append(rank)
        hit_entries.append(row_first[row] + _positions(keys[local_row, rank]))
    hit_row = np.concatenate(hit_rows) if hit_rows else np.zeros(0, dtype=np.int64)
    hit_rank = np.concatenate(hit_ranks) if hit_ranks else np.zeros(0, dtype=np.int64)
    hit_entry = np.concatenate(hit_entries) if hit_entries else np.zeros(0, dtype=np.int64)
    # Hits sorted by rank, so that "rank < k" is a prefix.
    order = _order_small(hit_rank, min(k_max, max(n_labels, 1)))
    return RankedTruth(
        n_rows=n,
        n_labels=n_labels,
        k_max=k_max,
        hit_row=hit_row[order].astype(np.int64),
        hit_rank=hit_rank[order].astype(np.int64),
        hit_label=predictions.indices[hit_entry[order]].astype(np.int64),
        true_row=true_row,
        true_label=true_label,
        n_true=n_true,
        inv_propensity=inv_propensity,
        weight_order=by_weight,
    )
