"""Readers and writers for the sparse matrices of the Extreme Classification repository.

Two on-disk forms are supported:

* **sparse text** (pyxclib / XC repository format, optionally gzip-compressed)::

      <rows> <cols>
      0:1 17:1 933:1          <- row 0: space-separated ``index:value``, zero-based
                              <- row 1: an empty line is an empty row
      4:0.5 12:2.0            <- row 2

* **.npz**: ``scipy.sparse.save_npz`` output.

and the **filter file** of the LF datasets: one ``doc_index label_index`` pair per line (zero-based,
no header) naming (query, label) pairs that must be removed from predictions before top-k.

Parsing is vectorised (one C-level number parse over the whole file, row ids recovered from
newline positions), so a million rows load in seconds. When the fast path meets something it does
not understand it falls back to a line-by-line scan whose only job is to find the first bad line
and raise a ``DataFormatError`` naming the file, the line and the problem. Writers are atomic (``xmcbench.fsutil``).
"""

from __future__ import annotations

import gzip
import os
import re
import warnings
import zlib
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from xmcbench import fsutil
from xmcbench.errors import DataFormatError

__all__ = [
    "read_sparse_text",
    "write_sparse_text",
    "load_sparse",
    "save_sparse",
    "read_filter_file",
]

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
_ZIP_MAGIC = b"PK\x03\x04"
_NPY_MAGIC = b"\x93NUMPY"
_TOKEN = re.compile(rb"^(-?\d+):(\S+)$")
# A value as C's strtod reads it, not Python's float(), which also takes "1_0" (10.0)
_NUMBER = re.compile(rb"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE)
_IS_WS = np.zeros(256, dtype=bool)
_IS_WS[list(b" \t\r\n\v\f")] = True  # lookup table: byte -> is whitespace
_FILTER_BYTES = _IS_WS.copy()
_FILTER_BYTES[list(b"0123456789-")] = True  # what a filter file's lines may hold


# --------------------------------------------------------------------------------------------
# reading helpers


def _read_bytes(path: Path) -> bytes:
    """Whole file as bytes, transparently gunzipped (detected by magic number, not extension),
    without the UTF-8 byte order mark that Windows editors put at the start. Read in one go, never
    seeking, so a pipe works too (``--predictions <(zcat p.txt.gz)``)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        if data.startswith(_GZIP_MAGIC):
            data = gzip.decompress(data)
        return data[len(_UTF8_BOM) :] if data.startswith(_UTF8_BOM) else data
    except FileNotFoundError:
        raise DataFormatError(path, None, "file not found") from None
    except (OSError, EOFError, zlib.error) as exc:  # truncated gzip, unreadable file
        raise DataFormatError(path, None, f"cannot read file ({exc}); re-download or re-create it") from None


def _parse_numbers(text: bytes) -> np.ndarray | None:
    """All whitespace-separated numbers of ``text`` as float64, or None if any token is not a number."""
    if not text.strip():
        return np.empty(0, dtype=np.float64)
    with warnings.catch_warnings():
        # numpy signals an unparseable token with a DeprecationWarning and a truncated result;
        # make it an exception so a partial parse is never mistaken for the whole file.
        warnings.simplefilter("error")
        try:
            return np.fromstring(text, dtype=np.float64, sep=" ")
        except (ValueError, DeprecationWarning):
            return None


def _split_rows(path: Path, body: bytes, n_rows: int) -> list[bytes]:
    """The body's lines, reconciling the optional trailing newline with the header's row count.

    Every row ends with a newline (the last one may lack it), so what follows a final newline is
    never a row: an empty last row is an empty line ("...\n\n"). Read otherwise, a file one row
    short of its header would pass with an empty last row.
    """
    lines = body.split(b"\n")
    if lines[-1].strip() == b"" and (lines[-1] == b"" or len(lines) == n_rows + 1):
        lines.pop()  # the usual trailing newline after the last row
    if len(lines) != n_rows:
        found = len(lines)
        hint = (
            "; if its last row is empty, end the file with one more newline (an empty row is an empty line)"
            if found == n_rows - 1 and body.endswith(b"\n")
            else " (an empty row is an empty line)"
        )
        raise DataFormatError(
            path,
            n_rows + 2 if found > n_rows else None,  # too many: point at the first extra row
            f"header says {n_rows} rows but the file has {found}; fix the header's first number or the "
            f"number of lines{hint}",
        )
    return lines


def _parse_digits(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray | None:
    """Non-negative integers written in ``buf[starts[i]:ends[i]]``; None if any is not all digits."""
    lengths = ends - starts
    if lengths.size == 0:
        return np.empty(0, dtype=np.int64)
    if lengths.min() < 1 or lengths.max() > 18:  # empty, or would overflow int64
        return None
    value = np.zeros(lengths.size, dtype=np.int64)
    for j in range(int(lengths.max())):  # one pass per digit position, not per token
        live = j < lengths
        digit = buf[np.where(live, starts + j, starts)].astype(np.int64) - 48
        if np.any(live & ((digit < 0) | (digit > 9))):
            return None
        value = np.where(live, value * 10 + digit, value)
    return value


def _parse_values(buf: np.ndarray, is_ws: np.ndarray, starts: np.ndarray, colons: np.ndarray) -> np.ndarray | None:
    """float64 value of every token (text after its ':'); None if one is not a number."""
    if colons.size == 0:
        return np.empty(0, dtype=np.float64)
    ends = np.flatnonzero(~is_ws & np.concatenate((is_ws[1:], [True]))) + 1  # exclusive token ends
    first = colons + 1
    lengths = ends - first
    # Label files repeat a single value ("1" or "1.000000"): compare bytes, parse it once.
    if lengths.min() == lengths.max() <= 32:
        text = buf[first[:, None] + np.arange(lengths[0])]  # (tokens, length) bytes
        if np.all(text == text[0]):
            value = text[0].tobytes()
            return np.full(lengths.size, float(value), dtype=np.float64) if _NUMBER.fullmatch(value) else None
    # Otherwise blank out each token's "index:" and parse the values in one C-level pass.
    in_index = np.zeros(buf.size + 1, dtype=np.int8)
    in_index[starts] += 1
    in_index[first] -= 1
    blank = np.cumsum(in_index[:-1], dtype=np.int8).astype(bool)
    values_text = buf.copy()
    values_text[blank] = ord(" ")
    numbers = _parse_numbers(values_text.tobytes())
    if numbers is None or numbers.size != colons.size:
        return None
    return numbers


def _diagnose_sparse_rows(path: Path, lines: list[bytes], n_cols: int) -> None:
    """Slow path: find the first malformed token, raising DataFormatError (line numbers are 1-based)."""
    for row, line in enumerate(lines):
        seen: set[int] = set()
        for token in line.split():
            lineno = row + 2  # the header is line 1
            match = _TOKEN.match(token)
            if match is None:
                raise DataFormatError(
                    path, lineno, f"bad token {token.decode(errors='replace')!r}; expected index:value like 12:1.0"
                )
            idx = int(match.group(1))
            if not _NUMBER.fullmatch(match.group(2)):
                raise DataFormatError(
                    path, lineno, f"bad value in token {token.decode(errors='replace')!r}; expected a number"
                )
            if idx < 0:
                raise DataFormatError(path, lineno, f"negative column index {idx}; indices are zero-based and >= 0")
            if idx >= n_cols:
                raise DataFormatError(path, lineno, f"column index {idx} is out of range for {n_cols} columns")
            if idx in seen:
                raise DataFormatError(path, lineno, f"column index {idx} appears twice in the same row")
            seen.add(idx)


def _parse_header(path: Path, header: bytes) -> tuple[int, int]:
    parts = header.split()
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        raise DataFormatError(
            path,
            1,
            f"header {header.decode(errors='replace').strip()!r} has three numbers: this looks like an XC "
            "repository BoW data file (points, features, labels; lines 'labels features'); give a label "
            "matrix in sparse text instead ('<rows> <cols>' header, then 'index:value' rows)",
        )
    try:
        if len(parts) != 2:
            raise ValueError
        n_rows, n_cols = int(parts[0]), int(parts[1])
        if n_rows < 0 or n_cols < 0:
            raise ValueError
    except ValueError:
        raise DataFormatError(
            path,
            1,
            f"bad header {header.decode(errors='replace').strip()!r}; expected '<rows> <cols>' "
            "(two non-negative integers)",
        ) from None
    return n_rows, n_cols


# --------------------------------------------------------------------------------------------
# sparse text


def read_sparse_text(path: str | os.PathLike, n_cols: int | None = None) -> sp.csr_matrix:
    """Read a sparse text file (plain or gzip) into a CSR matrix with sorted indices, no value rounded.

    The values are float32 when every one of them is exactly a float32 (labels, scores saved from
    float32), else float64: two scores a float32 would merge stay apart, as they do read from .npz.

    ``n_cols``, when given, replaces the header's column count as the matrix width (useful when a
    file's header under-states the label space); indices are then checked against ``n_cols``.
    Indices within a row may come in any order; a repeated index in one row is an error.
    """
    path = Path(path)
    raw = _read_bytes(path).replace(b"\r\n", b"\n")
    if raw.startswith((_ZIP_MAGIC, _NPY_MAGIC)):  # only through a pipe: load_sparse sniffs files first
        raise DataFormatError(path, None, "a numpy .npz/.npy file, not sparse text; give the file itself, not a pipe")
    newline = raw.find(b"\n")
    header, body = (raw, b"") if newline < 0 else (raw[:newline], raw[newline + 1 :])
    if not header.strip():
        raise DataFormatError(path, 1, "missing header; the first line must be '<rows> <cols>'")
    n_rows, header_cols = _parse_header(path, header)
    cols = header_cols if n_cols is None else int(n_cols)

    lines = _split_rows(path, body, n_rows)
    if not lines:
        return sp.csr_matrix((n_rows, cols), dtype=np.float32)
    body = b"\n".join(lines)

    # 1. Row of every token = number of newlines before its ':'.
    buf = np.frombuffer(body, dtype=np.uint8)
    colons = np.flatnonzero(buf == ord(":"))
    newlines = np.flatnonzero(buf == ord("\n"))
    rows = np.searchsorted(newlines, colons).astype(np.int64)

    # 2. Every whitespace-separated token must hold exactly one ':' with something on each side;
    #    checked on the bytes so that "5 1:2:3" cannot pair up into two plausible tokens.
    is_ws = _IS_WS[buf]
    starts = np.flatnonzero(~is_ws & np.concatenate(([True], is_ws[:-1])))
    ok = starts.size == colons.size
    if ok and colons.size:
        token_of_colon = np.searchsorted(starts, colons, side="right") - 1
        ok = bool(np.all(token_of_colon == np.arange(colons.size)))  # one ':' per token
        ok = ok and colons[-1] < buf.size - 1 and not np.any(colons == starts)
        if ok:  # "3: 1" or "3 :1"
            ok = not (is_ws[colons - 1].any() or is_ws[colons + 1].any())

    # 3. Indices: the digits between each token's start and its ':' (vectorised integer parse).
    indices = _parse_digits(buf, starts, colons) if ok else None
    # 4. Values: the text between each ':' and the end of its token.
    values = _parse_values(buf, is_ws, starts, colons) if indices is not None else None
    if values is None:
        _diagnose_sparse_rows(path, lines, cols)
        raise DataFormatError(path, None, "could not parse the file; every token must be index:value")

    bad = np.flatnonzero(indices >= cols)
    if bad.size:
        lineno = int(rows[bad[0]]) + 2
        raise DataFormatError(path, lineno, f"column index {indices[bad[0]]} is out of range for {cols} columns")

    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    # Files are normally sorted within rows; sort only when they are not, then reject repeats.
    key = rows * max(cols, 1) + indices
    if key.size > 1 and not np.all(key[1:] > key[:-1]):
        order = np.argsort(key, kind="stable")
        key, rows, indices, values = key[order], rows[order], indices[order], values[order]
        dup = np.flatnonzero(key[1:] == key[:-1])
        if dup.size:
            raise DataFormatError(
                path, int(rows[dup[0]]) + 2, f"column index {indices[dup[0]]} appears twice in the same row"
            )
    with np.errstate(over="ignore"):  # beyond float32's range: inf, unequal, so float64 is kept
        narrow = values.astype(np.float32)
    if np.array_equal(narrow, values, equal_nan=True):
        values = narrow
    index_dtype = np.int32 if max(cols, indices.size) < np.iinfo(np.int32).max else np.int64
    matrix = sp.csr_matrix((values, indices.astype(index_dtype), indptr.astype(index_dtype)), shape=(n_rows, cols))
    matrix.has_sorted_indices = True
    return matrix


def _format_rows(matrix: sp.csr_matrix) -> bytes:
    """Body of the sparse text file: one line per row, ``index:value`` tokens."""
    # enough digits that the values come back exactly in the matrix's dtype (float32: once cast back)
    value_fmt = "%.9g" if matrix.dtype.itemsize <= 4 else "%.17g"
    counts = np.diff(matrix.indptr)
    token = "%d:" + value_fmt
    row_fmts: dict[int, str] = {}
    fmt = "\n".join(row_fmts.setdefault(int(c), " ".join([token] * int(c))) for c in counts)
    if not matrix.nnz:
        return (fmt + "\n").encode() if counts.size else b""
    args = np.empty(2 * matrix.nnz, dtype=object)
    args[0::2] = matrix.indices.tolist()
    args[1::2] = matrix.data.astype(np.float64).tolist()
    return (fmt % tuple(args) + "\n").encode()


def write_sparse_text(path: str | os.PathLike, matrix) -> None:
    """Write ``matrix`` in sparse text format (gzip when ``path`` ends in .gz), atomically."""
    path = Path(path)
    matrix = sp.csr_matrix(matrix)
    matrix.sum_duplicates()
    matrix.sort_indices()
    header = f"{matrix.shape[0]} {matrix.shape[1]}\n".encode()
    payload = header + _format_rows(matrix)

    def write(tmp: Path) -> None:
        if path.suffix == ".gz":
            with gzip.open(tmp, "wb", compresslevel=6) as fh:  # level 9 is ~3x slower for ~2% smaller files
                fh.write(payload)
        else:
            tmp.write_bytes(payload)

    with fsutil.atomic_output(path) as tmp:
        write(tmp)


# --------------------------------------------------------------------------------------------
# npz or text, told by the content


def _looks_like_npz(path: Path) -> bool:
    """Whether ``path`` is to be read as .npz: a zip file whatever its name, or a file named .npz
    unless its content is plainly sparse text (a header's digit, or gzip) saved under that name."""
    if not path.is_file():  # missing, or a pipe: reading its head here would lose it for the reader
        return path.suffix == ".npz"
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return path.suffix == ".npz"  # the reader says what is wrong
    if head.startswith(_NPY_MAGIC):
        raise DataFormatError(
            path,
            None,
            "a dense numpy array (.npy), not a sparse matrix; save it with "
            "scipy.sparse.save_npz(path, scipy.sparse.csr_matrix(array)), or as sparse text",
        )
    if head.startswith(_ZIP_MAGIC):
        return True
    return path.suffix == ".npz" and not (head[:1].isdigit() or head.startswith((_GZIP_MAGIC, _UTF8_BOM)))


def load_sparse(path: str | os.PathLike) -> sp.csr_matrix:
    """Load a CSR matrix from ``.npz`` (scipy.sparse.save_npz) or sparse text (plain or gzip).

    The content decides, not the name: a zip file is read as .npz, sparse text saved as ``x.npz``
    as text; a dense ``.npy`` array is refused with the way to save it as a sparse matrix.
    """
    path = Path(path)
    if _looks_like_npz(path):
        if not path.exists():
            raise DataFormatError(path, None, "file not found")
        try:
            matrix = sp.load_npz(path)
        except Exception as exc:  # scipy raises a zoo of types for a bad archive
            raise DataFormatError(
                path, None, f"not a scipy.sparse .npz file ({exc}); save it with scipy.sparse.save_npz"
            ) from None
        # Lazy, so that importing xmcbench.data does not pull in the metrics package.
        from xmcbench.metrics.validate import check_sparse

        matrix = check_sparse(matrix, path, allow_inf=True, allow_repeats=False)  # before sort_indices trusts indptr
        matrix.sort_indices()
        return matrix
    return read_sparse_text(path)


def save_sparse(path: str | os.PathLike, matrix) -> None:
    """Save a sparse matrix as ``.npz`` (compressed) or sparse text (any other name), atomically."""
    path = Path(path)
    if path.suffix == ".npz":
        matrix = sp.csr_matrix(matrix)
        with fsutil.atomic_output(path) as tmp, open(tmp, "wb") as fh:  # a file object: save_npz adds no suffix
            sp.save_npz(fh, matrix, compressed=True)
    else:
        write_sparse_text(path, matrix)


# --------------------------------------------------------------------------------------------
# filter files


def _diagnose_filter_lines(path: Path, text: bytes) -> None:
    for lineno, line in enumerate(text.split(b"\n"), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not all(re.fullmatch(rb"-?\d+", p) for p in parts):
            raise DataFormatError(
                path, lineno, f"bad line {line.decode(errors='replace').strip()!r}; expected 'doc_index label_index'"
            )


def read_filter_file(path: str | os.PathLike, shape: tuple[int, int]) -> sp.csr_matrix:
    """Read a filter file of ``doc_index label_index`` pairs into a (docs, labels) CSR of 1.0.

    Blank lines are ignored; an empty file gives an all-zero matrix; repeated pairs count once.
    """
    path = Path(path)
    n_docs, n_labels = int(shape[0]), int(shape[1])
    text = _read_bytes(path).replace(b"\r\n", b"\n")
    numbers = _parse_numbers(text)
    # only digits, minus signs and whitespace: no "1.0", "inf" or "1e3" passes as an index
    if numbers is None or numbers.size % 2 or not _FILTER_BYTES[np.frombuffer(text, dtype=np.uint8)].all():
        _diagnose_filter_lines(path, text)
        raise DataFormatError(path, None, "could not parse the file; every line must be 'doc_index label_index'")
    values = numbers.reshape(-1, 2)  # (n_pairs, 2) float64, even for 0 or 1 pair
    if values.size:
        # Ignoring the line structure in the fast parse is only safe if each line holds one pair.
        non_blank = [line for line in text.split(b"\n") if line.strip()]
        if len(non_blank) != values.shape[0]:
            _diagnose_filter_lines(path, text)
        # checked as floats: an index beyond int64 must be out of range, not wrap around
        bad = np.flatnonzero(
            (values[:, 0] < 0) | (values[:, 0] >= n_docs) | (values[:, 1] < 0) | (values[:, 1] >= n_labels)
        )
        if bad.size:
            line_numbers = [i for i, line in enumerate(text.split(b"\n"), start=1) if line.strip()]
            doc, label = non_blank[bad[0]].split()
            raise DataFormatError(
                path,
                line_numbers[bad[0]],
                f"pair ({doc.decode()}, {label.decode()}) is out of range for {n_docs} documents x {n_labels} "
                "labels; indices are zero-based — is this the filter file of this split?",
            )
    pairs = values.astype(np.int64)
    matrix = sp.csr_matrix(
        (np.ones(pairs.shape[0], dtype=np.float32), (pairs[:, 0], pairs[:, 1])), shape=(n_docs, n_labels)
    )
    matrix.sum_duplicates()
    matrix.data[:] = 1.0
    return matrix
