"""Top-k of every row of a sparse score matrix, and removal of filtered (row, label) pairs.

Both are vectorised over the whole CSR (one lexsort), so they serve TF-IDF scoring and the
runner's "apply the filter, keep the top 100" step at any scale without a Python loop per row.
Ties are broken by lower label index, the convention of xmcbench.metrics.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse


def topk_csr(scores: sparse.spmatrix, k: int) -> sparse.csr_matrix:
    """Keep the k largest stored entries of each row (ties: lower column first)."""
    m = sparse.csr_matrix(scores, copy=True)  # sum_duplicates sorts in place: never the caller's arrays
    m.sum_duplicates()
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    order = np.lexsort((m.indices, -m.data, rows))  # by row, then score desc, then label asc
    rank = np.arange(order.size) - m.indptr[rows[order]]
    keep = order[rank < k]
    keep.sort()  # back to CSR order (row, then column)
    counts = np.bincount(rows[keep], minlength=m.shape[0])
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return sparse.csr_matrix((m.data[keep], m.indices[keep], indptr), shape=m.shape)


def remove_pairs(scores: sparse.spmatrix, pairs: sparse.spmatrix | None) -> sparse.csr_matrix:
    """Drop every stored (row, label) of ``scores`` that is stored in ``pairs`` (keeps zero scores)."""
    m = sparse.csr_matrix(scores)
    if pairs is None:
        return m
    if pairs.shape != m.shape:
        raise ValueError(f"filter shape {pairs.shape} does not match predictions {m.shape}")
    if pairs.nnz == 0:
        return m
    f = sparse.csr_matrix(pairs)
    n_cols = np.int64(m.shape[1])
    m_rows = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
    f_rows = np.repeat(np.arange(f.shape[0], dtype=np.int64), np.diff(f.indptr))
    drop = np.isin(m_rows * n_cols + m.indices, f_rows * n_cols + f.indices)
    keep = ~drop
    counts = np.bincount(m_rows[keep], minlength=m.shape[0])
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return sparse.csr_matrix((m.data[keep], m.indices[keep], indptr), shape=m.shape)
