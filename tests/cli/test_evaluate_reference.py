"""``xmcbench evaluate`` on awkward but valid files gives the plain reference's numbers (JSON, 4 decimals);
an invalid propensity exponent is one error line."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner

from xmcbench.cli import app

_spec = importlib.util.spec_from_file_location(
    "metric_reference", Path(__file__).parents[1] / "metrics" / "metric_reference.py"
)
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)

runner = CliRunner()
# Rows: two labels; none; two labels; one label; none. Label 5 never occurs in training.
TRUTH_TEXT = "5 6\n3:1 0:1\n\n1:1 4:1\n2:1\n\n"
# Unsorted rows, a stored zero and negative / infinite scores, a tie (row 2), an empty row (3).
PRED_TEXT = "5 6\n3:0.5 0:0.9 1:0\n2:inf 0:-1\n5:0.4 1:0.4 4:0.4 0:-inf\n\n0:0.2 5:-0.0\n"
TRAIN_TEXT = "4 6\n0:1 2:1\n0:1 1:1\n3:1 4:1\n0:1\n"


def invoke(*args):
    return runner.invoke(app, ["evaluate", *map(str, args), "--format", "json"])


def expected(pred, truth, ks, train=None, A=0.55, B=1.5, filter=None):
    w = None if train is None else reference.inverse_propensity(train, A, B)
    values = reference.metrics(pred, truth, ks, inv_propensity=w, filter=filter)
    return {name: pytest.approx(round(value, 4), abs=1e-9) for name, value in values.items()}


@pytest.fixture
def d(tmp_path):
    (tmp_path / "truth.txt").write_text(TRUTH_TEXT)
    (tmp_path / "pred.txt").write_text(PRED_TEXT)
    (tmp_path / "train.txt").write_text(TRAIN_TEXT)
    return tmp_path


def matrices(d):
    from xmcbench.data.formats.xc_sparse import read_sparse_text

    return read_sparse_text(d / "pred.txt"), read_sparse_text(d / "truth.txt"), read_sparse_text(d / "train.txt")


@pytest.mark.parametrize("A, B", [(0.55, 1.5), (0.6, 2.6), (0.5, 0.4)])
def test_text_files_with_every_edge_match_the_reference(d, A, B):
    pred, truth, train = matrices(d)
    ks = (1, 2, 3, 6, 7, 1000)
    result = invoke(
        "-p", d / "pred.txt", "-t", d / "truth.txt", "--train-truth", d / "train.txt",
        "--A", A, "--B", B, "--k", ",".join(map(str, ks)),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == expected(pred, truth, ks, train, A, B)


def test_crlf_bom_gzip_and_a_one_line_filter(d):
    pred, truth, _ = matrices(d)
    (d / "pred.gz").write_bytes(gzip.compress(b"\xef\xbb\xbf" + PRED_TEXT.replace("\n", "\r\n").encode()))
    (d / "filter.txt").write_text("0 0")  # one pair, no newline: not a 1-D array of two rows
    filt = sp.csr_matrix(([1.0], ([0], [0])), shape=truth.shape)
    result = invoke("-p", d / "pred.gz", "-t", d / "truth.txt", "--filter", d / "filter.txt", "--k", "1,3")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == expected(pred, truth, (1, 3), filter=filt)


def test_npz_with_odd_dtypes_and_non_canonical_truth(d):
    _, truth, _ = matrices(d)
    # float16 scores (scipy cannot build them; numpy can save them), integer scores beyond 2^53
    for name, data in (("f16", np.array([3, 1, 2, 5], np.float16)), ("big", 2**53 + np.array([3, 1, 2, 3], np.int64))):
        arrays = {"data": data, "indices": np.array([1, 0, 3, 1], np.int32), "indptr": np.array([0, 3, 3, 3, 4, 4])}
        np.savez(d / f"{name}.npz", format=np.array("csr"), shape=np.array([5, 6]), **arrays)
        pred = sp.csr_matrix((5, 6), dtype=np.float32)  # scipy makes no float16 matrix: set the arrays
        pred.data, pred.indices, pred.indptr = data, arrays["indices"], arrays["indptr"].astype(np.int32)
        result = invoke("-p", d / f"{name}.npz", "-t", d / "truth.txt", "--k", "1,2,3")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == expected(pred, truth, (1, 2, 3)), name
    # truth stored unsorted, with a repeat and an explicit zero (that is no label)
    np.savez(
        d / "truth.npz", format=np.array("csr"), shape=np.array([5, 6]), data=np.array([1, 1, 1, 0, 2], np.float32),
        indices=np.array([3, 0, 3, 1, 4], np.int32), indptr=np.array([0, 3, 3, 5, 5, 5], np.int32),
    )  # fmt: skip
    odd = sp.load_npz(d / "truth.npz")
    pred, _, _ = matrices(d)
    result = invoke("-p", d / "pred.txt", "-t", d / "truth.npz", "--k", "1,3")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == expected(pred, odd, (1, 3))


def test_a_negative_propensity_exponent_is_one_error_line(d):
    result = invoke("-p", d / "pred.txt", "-t", d / "truth.txt", "--train-truth", d / "train.txt", "--A", "-0.5")
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: propensity A must be >= 0"), result.output
