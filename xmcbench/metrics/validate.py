"""Full validation of the matrices and parameters that enter evaluation.

scipy trusts a sparse matrix's arrays: a negative or out-of-range label id, or an ``indptr`` that
goes backwards, is either silently scored as a miss or crashes inside compiled code. Every
matrix therefore passes :func:`check_sparse` before anything reads its structure, and every
error is one :class:`~xmcbench.errors.DataFormatError` line naming the input, what is wrong and
how to fix it. The checks are whole-array numpy reductions (O(nnz), no Python loop over rows),
so a valid matrix costs a few passes over its index arrays.

Used by :mod:`xmcbench.metrics.ranking` (the public ``evaluate`` family) and by the readers of
``xmcbench evaluate``, so that a file and an in-memory matrix meet the same rules.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from xmcbench.errors import DataFormatError

__all__ = ["check_int", "check_number", "check_sparse", "check_values"]


def _fail(name, problem: str) -> DataFormatError:
    return DataFormatError(name, None, problem)


def _shape(matrix, name) -> tuple[int, int]:
    shape = getattr(matrix, "shape", None)
    if shape is None or len(shape) != 2 or not all(isinstance(x, (int, np.integer)) and x >= 0 for x in shape):
        raise _fail(name, f"bad shape {shape!r}; a (queries x labels) matrix needs two non-negative sizes")
    return int(shape[0]), int(shape[1])


def _integer_array(values, name, what: str) -> np.ndarray:
    values = np.asarray(values)
    if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
        raise _fail(
            name,
            f"{what} must be a 1-D integer array; got {values.dtype} with shape {values.shape}; "
            "build the matrix with scipy.sparse",
        )
    return values


def _out_of_range(ids: np.ndarray, bound: int) -> bool:
    """Whether any id is negative or >= bound, in one pass: negatives viewed as unsigned are huge."""
    if ids.size == 0:
        return False
    unsigned = ids.view(np.dtype(f"u{ids.dtype.itemsize}")) if ids.dtype.kind == "i" else ids
    return int(unsigned.max()) >= bound


def _first_bad_id(ids: np.ndarray, bound: int) -> int:
    return int(np.flatnonzero((ids < 0) | (ids >= bound))[0])


def _check_compressed(matrix, name) -> None:
    """CSR or CSC structure: indptr starts at 0, never decreases, ends at nnz; ids within range."""
    n_rows, n_cols = _shape(matrix, name)
    csr = matrix.format == "csr"
    n_major, n_minor = (n_rows, n_cols) if csr else (n_cols, n_rows)
    major, minor = ("row", "label") if csr else ("column", "row")
    indptr = _integer_array(matrix.indptr, name, "indptr")
    indices = _integer_array(matrix.indices, name, "indices")
    data = np.asarray(matrix.data)
    if indptr.size != n_major + 1:
        raise _fail(
            name,
            f"indptr has {indptr.size} entries but shape {(n_rows, n_cols)} needs {n_major + 1}; "
            "the matrix is corrupt: save it again with scipy.sparse.save_npz",
        )
    if data.ndim != 1 or data.size != indices.size:
        raise _fail(
            name,
            f"{indices.size} label ids but {data.size} values; the matrix is corrupt: "
            "save it again with scipy.sparse.save_npz",
        )
    if indptr[0] != 0 or indptr[-1] != indices.size:
        raise _fail(
            name,
            f"indptr runs from {indptr[0]} to {indptr[-1]} but must run from 0 to the number of "
            f"stored entries ({indices.size}); the matrix is corrupt: save it again",
        )
    steps = np.diff(indptr)
    if steps.size and steps.min() < 0:
        raise _fail(
            name,
            f"indptr decreases at {major} {int(np.flatnonzero(steps < 0)[0])}; the matrix is "
            "corrupt: save it again with scipy.sparse.save_npz",
        )
    if _out_of_range(indices, n_minor):
        entry = _first_bad_id(indices, n_minor)
        where = int(np.searchsorted(indptr, entry, side="right") - 1)
        raise _fail(
            name,
            f"{minor} id {int(indices[entry])} in {major} {where} is out of range 0..{n_minor - 1}; "
            f"ids are zero-based and must be below the number of {minor}s ({n_minor})",
        )


def _check_coo(matrix, name) -> None:
    n_rows, n_cols = _shape(matrix, name)
    row = _integer_array(matrix.row, name, "row")
    col = _integer_array(matrix.col, name, "col")
    if not row.size == col.size == np.asarray(matrix.data).size:
        raise _fail(name, "row, col and data have different lengths; the matrix is corrupt: save it again")
    for ids, bound, what in ((row, n_rows, "row"), (col, n_cols, "label")):
        if _out_of_range(ids, bound):
            bad = ids[_first_bad_id(ids, bound)]
            raise _fail(name, f"{what} id {int(bad)} is out of range 0..{bound - 1}; ids are zero-based")


def check_values(data: np.ndarray, indptr: np.ndarray, name, *, allow_inf: bool) -> None:
    """Stored values must be real numbers: never NaN (no order), and finite unless ``allow_inf``."""
    if not (np.issubdtype(data.dtype, np.floating) or np.issubdtype(data.dtype, np.integer) or data.dtype == bool):
        raise _fail(name, f"values have type {data.dtype}; store real numbers (float32 scores, 1.0 labels)")
    if data.size == 0 or not np.issubdtype(data.dtype, np.floating):
        return
    # NaN propagates through min, and +inf / -inf show up in max / min: two reductions, no temporary.
    low = data.min()
    if not (np.isnan(low) or (not allow_inf and (np.isinf(low) or np.isinf(data.max())))):
        return
    bad = np.isnan(data) if np.isnan(low) or allow_inf else ~np.isfinite(data)
    entry = int(np.flatnonzero(bad)[0])
    row = int(np.searchsorted(indptr, entry, side="right") - 1)
    what = "NaN" if np.isnan(data[entry]) else "infinite"
    raise _fail(
        name,
        f"{what} value in row {row} (first of {int(bad.sum())}); fix the model output or the file before evaluating",
    )


def _widen_half(matrix, structure: tuple[np.ndarray, np.ndarray]):
    """``matrix`` with float16 values made float32 (exact): scipy's compiled routines (sort_indices,
    tocsr, even copy) refuse float16, which numpy saves and scipy loads without complaint."""
    if np.asarray(matrix.data).dtype != np.float16:
        return matrix
    data = np.asarray(matrix.data, dtype=np.float32)
    if matrix.format == "coo":
        return type(matrix)((data, structure), shape=matrix.shape)
    return type(matrix)((data, *structure), shape=matrix.shape)


def check_sparse(matrix, name, *, allow_inf: bool = False, allow_repeats: bool = True) -> sp.csr_matrix:
    """``matrix`` (any scipy.sparse format) as a CSR, after checking its structure and values.

    Raises DataFormatError naming ``name`` (a file or an argument) for a bad shape, a corrupt
    ``indptr``, a negative or out-of-range id, mismatched array lengths or a NaN value (and an
    infinite one unless ``allow_inf``: scores may be ±inf, labels may not). Without
    ``allow_repeats``, a COO matrix may not hold a (row, label) twice: scipy would add the scores.
    """
    if not sp.issparse(matrix):
        raise _fail(name, f"expected a scipy.sparse matrix; got {type(matrix).__name__}")
    if matrix.format in ("csr", "csc"):
        _check_compressed(matrix, name)
        matrix = _widen_half(matrix, (matrix.indices, matrix.indptr))
    elif matrix.format == "coo":
        _check_coo(matrix, name)
        matrix = _widen_half(matrix, (matrix.row, matrix.col))
    else:
        _shape(matrix, name)
        try:  # dok/lil/dia/bsr: let scipy rebuild it, then check the CSR it builds
            matrix = sp.csr_matrix(matrix)
        except Exception as exc:  # noqa: BLE001 - scipy raises assorted types for a corrupt matrix
            raise _fail(name, f"corrupt sparse matrix ({exc}); save it again with scipy.sparse") from None
        _check_compressed(matrix, name)
    csr = matrix if matrix.format == "csr" and isinstance(matrix, sp.csr_matrix) else sp.csr_matrix(matrix)
    if matrix.format == "coo" and not allow_repeats and csr.nnz != matrix.nnz:  # tocsr summed repeats
        raise _fail(name, "a (row, label) pair is stored twice; keep one score per (query, label)")
    check_values(np.asarray(csr.data), csr.indptr, name, allow_inf=allow_inf)
    return csr


def check_number(value, name: str, *, low: float | None = None, low_open: bool = False) -> float:
    """``value`` as a finite float, at least (or above, with ``low_open``) ``low``; else one clear error."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    ok = math.isfinite(number) and (low is None or (number > low if low_open else number >= low))
    if not ok:
        bound = "" if low is None else f" {'>' if low_open else '>='} {low:g}"
        raise _fail(name, f"must be a finite number{bound}; got {value!r}")
    return number


def check_int(value, name: str, *, low: int = 1) -> int:
    """``value`` as an int of at least ``low``; else one clear error (bools, floats and strings are refused)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value >= low:
        return int(value)
    what = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer >= {low}")
    raise _fail(name, f"must be {what}; got {value!r}")
