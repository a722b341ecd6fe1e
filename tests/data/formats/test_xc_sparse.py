"""Tests for xmcbench.data.formats.xc_sparse: sparse text / npz / filter-file readers and writers."""

from __future__ import annotations

import gzip
import os
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.data.formats.xc_sparse import (
    load_sparse,
    read_filter_file,
    read_sparse_text,
    save_sparse,
    write_sparse_text,
)
from xmcbench.errors import DataFormatError


def _random_csr(rng, n_rows=50, n_cols=40, density=0.1, binary=False):
    m = sp.random(n_rows, n_cols, density=density, format="csr", random_state=rng, dtype=np.float32)
    if binary:
        m.data[:] = 1.0
    return m


def _same(a: sp.csr_matrix, b: sp.csr_matrix) -> bool:
    return a.shape == b.shape and abs(a - b).sum() == 0 and a.nnz == b.nnz


# ---------------------------------------------------------------------------------------------
# reading: hand-written files


def test_read_hand_written_file(tmp_path):
    path = tmp_path / "y.txt"
    path.write_text("4 6\n0:1 3:1\n\n5:0.5 1:2\n2:1.0\n")
    m = read_sparse_text(path)
    assert m.shape == (4, 6)
    assert m.dtype == np.float32
    assert m.has_sorted_indices
    expected = np.array([[1, 0, 0, 1, 0, 0], [0] * 6, [0, 2, 0, 0, 0, 0.5], [0, 0, 1, 0, 0, 0]], dtype=np.float32)
    np.testing.assert_array_equal(m.toarray(), expected)
    assert list(m.indices[m.indptr[2] : m.indptr[3]]) == [1, 5]  # sorted within the row


def test_read_without_trailing_newline_and_with_crlf(tmp_path):
    a = tmp_path / "a.txt"
    a.write_bytes(b"2 3\r\n0:1\r\n2:1")
    b = tmp_path / "b.txt"
    b.write_bytes(b"2 3\n0:1\n2:1\n")
    assert _same(read_sparse_text(a), read_sparse_text(b))


def test_an_empty_last_row_is_an_empty_line_and_a_missing_row_is_refused(tmp_path):
    path = tmp_path / "y.txt"
    path.write_text("3 3\n0:1\n1:1\n\n")  # every row ends with a newline: the third is empty
    m = read_sparse_text(path)
    assert m.shape == (3, 3)
    assert m.getnnz(axis=1).tolist() == [1, 1, 0]
    path.write_text("3 3\n0:1\n1:1\n\n  ")  # spaces after the last newline: no row either
    assert read_sparse_text(path).getnnz(axis=1).tolist() == [1, 1, 0]
    # one row short of the header: what follows the final newline is not a row (pyxclib's writer, ours)
    path.write_text("3 3\n0:1\n1:1\n")
    with pytest.raises(DataFormatError, match="the file has 2; .* end the file with one more newline"):
        read_sparse_text(path)


def test_all_empty_rows_and_zero_rows(tmp_path):
    path = tmp_path / "y.txt"
    path.write_text("3 7\n\n\n\n")
    m = read_sparse_text(path)
    assert m.shape == (3, 7) and m.nnz == 0
    path.write_text("0 7\n")
    assert read_sparse_text(path).shape == (0, 7)


def test_values_that_are_not_uniform_are_parsed(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("2 5\n0:0.25 4:1e-3\n3:12.5\n")
    m = read_sparse_text(path)
    np.testing.assert_allclose(m.toarray(), [[0.25, 0, 0, 0, 1e-3], [0, 0, 0, 12.5, 0]], rtol=1e-6)


def test_unsorted_row_is_sorted(tmp_path):
    path = tmp_path / "y.txt"
    path.write_text("1 10\n9:1 2:1 5:1\n")
    m = read_sparse_text(path)
    assert m.indices.tolist() == [2, 5, 9]


def test_n_cols_overrides_header(tmp_path):
    path = tmp_path / "y.txt"
    path.write_text("1 3\n2:1\n")
    assert read_sparse_text(path, n_cols=10).shape == (1, 10)
    with pytest.raises(DataFormatError, match="out of range for 2 columns"):
        read_sparse_text(path, n_cols=2)


def test_gzip_detected_by_content(tmp_path):
    path = tmp_path / "y.txt"  # no .gz suffix on purpose
    with gzip.open(path, "wb") as fh:
        fh.write(b"2 3\n0:1\n1:1 2:1\n")
    assert read_sparse_text(path).nnz == 3


# ---------------------------------------------------------------------------------------------
# reading: errors name the file, the line and the problem


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        ("2 x\n0:1\n\n", 1, "bad header"),
        ("2\n0:1\n\n", 1, "bad header"),
        ("2 4 3\n0,2 1:0.5 3:1\n1 0:1\n", 1, "looks like an XC repository BoW data file"),
        ("\n0:1\n", 1, "missing header"),
        ("2 3\n0:1\n1:1\n2:1\n", 4, "header says 2 rows but the file has 3"),
        ("3 3\n0:1\n", None, "header says 3 rows but the file has 1"),
        ("2 3\n0:1\n1:x\n", 3, "bad value"),
        ("2 3\n0:1 2:1_0\n1:1\n", 2, "bad value"),  # Python's float() reads "1_0" as 10; no file does
        ("2 3\n0:1_0 2:1_0\n1:1_0\n", 2, "bad value"),  # every value the same: still checked
        ("2 3\n0:1\nfoo\n", 3, "bad token"),
        ("2 3\n0:1 5\n1:1\n", 2, "bad token"),
        ("2 3\n0:1 1:2:3\n1:1\n", 2, "bad value"),
        ("2 3\n0:1 5 1:2:3\n1:1\n", 2, "bad token"),
        ("2 3\n0 :1\n1:1\n", 2, "bad token"),
        ("2 3\n0:1\n-1:1\n", 3, "negative column index"),
        ("2 3\n0:1\n3:1\n", 3, "out of range for 3 columns"),
        ("2 3\n0:1\n1.5:1\n", 3, "bad token"),
        ("2 3\n0:1 0:1\n1:1\n", 2, "appears twice"),
    ],
)
def test_bad_files_raise_with_line(tmp_path, content, line, problem):
    path = tmp_path / "bad.txt"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=problem) as info:
        read_sparse_text(path)
    assert info.value.line == line
    assert str(path) in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(DataFormatError, match="not found"):
        read_sparse_text(tmp_path / "nope.txt")


# ---------------------------------------------------------------------------------------------
# writing and round trips


@pytest.mark.parametrize("suffix", [".txt", ".txt.gz", ".npz"])
def test_round_trip(tmp_path, suffix):
    rng = np.random.default_rng(0)
    m = _random_csr(rng, 60, 33, 0.1).tolil()
    m[5, :] = 0  # an empty row in the middle
    m = m.tocsr()
    m.eliminate_zeros()
    path = tmp_path / f"m{suffix}"
    save_sparse(path, m)
    back = load_sparse(path)
    assert back.shape == m.shape
    assert back.getnnz(axis=1)[5] == 0
    if suffix == ".npz":
        np.testing.assert_array_equal(back.toarray(), m.toarray())
    else:  # the text's decimals, read as float64, are the written float32 values once cast back
        assert back.dtype == np.float64
        np.testing.assert_array_equal(back.toarray().astype(np.float32), m.toarray())
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_round_trip_last_row_empty(tmp_path):
    m = sp.csr_matrix(np.array([[1, 0, 1], [0, 0, 0]], dtype=np.float32))
    write_sparse_text(tmp_path / "y.txt", m)
    assert (tmp_path / "y.txt").read_text() == "2 3\n0:1 2:1\n\n"
    assert _same(read_sparse_text(tmp_path / "y.txt"), m)


def test_write_is_atomic_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "y.txt"
    path.write_text("old")

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr("xmcbench.data.formats.xc_sparse._format_rows", boom)
    with pytest.raises(RuntimeError):
        write_sparse_text(path, sp.csr_matrix(np.eye(2, dtype=np.float32)))
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["y.txt"]


def test_load_bad_npz(tmp_path):
    path = tmp_path / "m.npz"
    path.write_bytes(b"not a zip")
    with pytest.raises(DataFormatError, match="scipy.sparse"):
        load_sparse(path)


def test_load_tells_npz_and_text_by_content_not_name(tmp_path):
    matrix = sp.csr_matrix(np.array([[0, 0.5, 0], [1, 0, 0]], dtype=np.float32))
    save_sparse(tmp_path / "real.npz", matrix)
    (tmp_path / "real.npz").rename(tmp_path / "zip.txt")  # an .npz under a text name
    (tmp_path / "text.npz").write_text("2 3\n1:0.5\n0:1\n")  # sparse text under an .npz name
    (tmp_path / "gz.npz").write_bytes(gzip.compress(b"2 3\n1:0.5\n0:1\n"))
    for name in ("zip.txt", "text.npz", "gz.npz"):
        assert (load_sparse(tmp_path / name) != matrix).nnz == 0, name


def test_load_refuses_a_dense_npy_array_with_the_way_to_save_it(tmp_path):
    for name in ("scores.npy", "scores.npz", "scores.txt"):
        with open(tmp_path / name, "wb") as fh:
            np.save(fh, np.ones((2, 3), dtype=np.float32))
        with pytest.raises(DataFormatError, match=r"a dense numpy array \(.npy\).*scipy.sparse.save_npz"):
            load_sparse(tmp_path / name)


@pytest.mark.parametrize("compress", [False, True])
def test_a_pipe_is_read_like_a_file(tmp_path, compress):
    """``--predictions <(zcat p.txt.gz)``: a pipe cannot seek, and its head cannot be read twice."""
    import threading

    payload = b"2 3\n1:0.5\n0:1\n"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(
        target=fifo.write_bytes, args=(gzip.compress(payload) if compress else payload,), daemon=True
    )
    writer.start()
    try:
        assert load_sparse(fifo).toarray().tolist() == [[0, 0.5, 0], [1, 0, 0]]
    finally:
        writer.join(timeout=10)


def test_utf8_byte_order_mark_is_ignored(tmp_path):
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbf2 3\r\n1:0.5\r\n0:1\r\n")  # as Windows Notepad saves it
    assert read_sparse_text(tmp_path / "bom.txt").toarray().tolist() == [[0, 0.5, 0], [1, 0, 0]]
    (tmp_path / "filter.txt").write_bytes(b"\xef\xbb\xbf1 2\n")
    assert read_filter_file(tmp_path / "filter.txt", (2, 3)).toarray().tolist() == [[0, 0, 0], [0, 0, 1]]


def test_values_beyond_float32_are_kept_without_a_warning(tmp_path):
    (tmp_path / "big.txt").write_text("2 3\n0:1e40 1:-1e40\n2:1e40\n")  # uniform and mixed values
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning would be printed to the user's terminal
        matrix = read_sparse_text(tmp_path / "big.txt")
    assert matrix.dtype == np.float64 and matrix.data.tolist() == [1e40, -1e40, 1e40]
    (tmp_path / "inf.txt").write_text("1 3\n0:inf 1:-inf\n")
    assert read_sparse_text(tmp_path / "inf.txt").data.tolist() == [np.inf, -np.inf]


def test_values_are_never_rounded_and_float32_when_nothing_would_be(tmp_path):
    """Scores a float32 would merge (0.1 and 0.1 + 1e-12) stay apart, as read from .npz: a top-k of
    them must not become a tie. Labels and values that are exactly float32 stay float32."""
    (tmp_path / "scores.txt").write_text("1 3\n0:0.1 1:0.100000000001 2:0.5\n")
    scores = read_sparse_text(tmp_path / "scores.txt")
    assert scores.dtype == np.float64 and scores.data.tolist() == [0.1, 0.100000000001, 0.5]
    for body, data in (("0:1 2:1\n1:1\n", [1, 1, 1]), ("0:0.5 2:-2\n1:1\n", [0.5, -2, 1])):
        (tmp_path / "labels.txt").write_text("2 3\n" + body)
        labels = read_sparse_text(tmp_path / "labels.txt")
        assert labels.dtype == np.float32 and labels.data.tolist() == data


def test_read_speed_smoke(tmp_path):
    """Vectorised parse: 100k rows x 5 labels must load well under a second (a loop per token would not)."""
    rng = np.random.default_rng(1)
    n, L = 100_000, 50_000
    rows = np.repeat(np.arange(n), 5)
    cols = rng.integers(0, L, n * 5)
    m = sp.csr_matrix((np.ones(n * 5, np.float32), (rows, cols)), shape=(n, L))
    m.data[:] = 1.0
    path = tmp_path / "big.txt"
    write_sparse_text(path, m)
    import time

    t0 = time.perf_counter()
    back = read_sparse_text(path)
    elapsed = time.perf_counter() - t0
    assert _same(back, m)
    assert elapsed < 2.0, elapsed


# ---------------------------------------------------------------------------------------------
# filter files


def test_filter_file_pairs(tmp_path):
    path = tmp_path / "filter.txt"
    path.write_text("0 3\n2 1\n\n2 1\n1 0\n")  # a blank line and a repeated pair
    f = read_filter_file(path, (3, 4))
    assert f.shape == (3, 4)
    assert f.nnz == 3
    assert set(zip(*f.nonzero())) == {(0, 3), (2, 1), (1, 0)}
    assert set(f.data.tolist()) == {1.0}


def test_filter_file_one_line_and_empty(tmp_path):
    one = tmp_path / "one.txt"
    one.write_text("1 2\n")
    f = read_filter_file(one, (2, 3))
    assert f.shape == (2, 3) and f.nnz == 1 and f[1, 2] == 1.0
    one.write_text("1 2")  # no newline either
    assert read_filter_file(one, (2, 3)).nnz == 1
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    f = read_filter_file(empty, (5, 7))
    assert f.shape == (5, 7) and f.nnz == 0


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        ("0 1\n5 1\n", 2, "out of range"),
        ("0 1\n1 9\n", 2, "out of range"),
        ("0 1\n-1 0\n", 2, "out of range"),
        ("0 1\n1 2 3\n", 2, "bad line"),
        ("0 1\n1\n2 2\n", 2, "bad line"),
        ("0 1\na b\n", 2, "bad line"),
        ("0 1\n\n1 1.5\n", 3, "bad line"),
        ("0 1\n1.0 2.0\n", 2, "bad line"),  # whole-valued floats are not indices either
        ("inf 1\n", 1, "bad line"),
        ("0 1\n1e0 2\n", 2, "bad line"),
        ("0 1\n99999999999999999999 1\n", 2, r"pair \(99999999999999999999, 1\) is out of range"),  # no wrap-around
    ],
)
def test_filter_file_errors(tmp_path, content, line, problem):
    path = tmp_path / "filter.txt"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=problem) as info:
        read_filter_file(path, (3, 4))
    assert info.value.line == line
