"""Vectorised access to the stored entries of a few CSR rows (no Python loop per row)."""

from __future__ import annotations

import numpy as np
from scipy import sparse

from xmcbench.errors import XmcbenchError


def check_csr(matrix, what: str) -> None:
    if not (sparse.isspmatrix_csr(matrix) or isinstance(matrix, sparse.csr_array)):
        raise XmcbenchError(f"{what} must be a scipy CSR matrix (call .tocsr() on it)")


def row_entries(matrix, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stored entries of ``matrix[rows]``: (segment id in ``rows``, column, segment start).

    Entries come row after row in ``rows`` order, each row's entries in stored order.
    """
    rows = np.asarray(rows, dtype=np.int64)
    indptr = matrix.indptr
    starts = np.asarray(indptr[rows], dtype=np.int64)
    counts = np.asarray(indptr[rows + 1], dtype=np.int64) - starts
    seg_start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    seg = np.repeat(np.arange(rows.size, dtype=np.int64), counts)
    pos = np.arange(int(counts.sum()), dtype=np.int64) - seg_start[seg] + starts[seg]
    cols = np.asarray(matrix.indices[pos], dtype=np.int64)
    return seg, cols, seg_start


def pair_keys(seg: np.ndarray, cols: np.ndarray, n_cols: int) -> np.ndarray:
    """One sortable int64 per (row, column) pair."""
    return seg.astype(np.int64, copy=False) * np.int64(n_cols) + cols.astype(np.int64, copy=False)


def isin_sorted(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """``np.isin(keys, sorted_keys)`` for an already sorted reference (searchsorted)."""
    if sorted_keys.size == 0:
        return np.zeros(keys.shape, dtype=bool)
    at = np.searchsorted(sorted_keys, keys)
    return sorted_keys[np.minimum(at, sorted_keys.size - 1)] == keys
