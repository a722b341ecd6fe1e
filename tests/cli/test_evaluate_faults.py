"""``xmcbench evaluate`` on hostile input: one clear error line (exit 1) or right numbers, never a
traceback, a silent miss, NaN in the output or invalid JSON; user text is never read as rich markup."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import typer
from rich.console import Console
from typer.testing import CliRunner

from xmcbench.cli import _common, app
from xmcbench.data.formats.xc_sparse import save_sparse
from xmcbench.errors import XmcbenchError
from xmcbench.metrics import evaluate, inv_propensity
from xmcbench.report.render import render, to_rich
from xmcbench.report.table import Column, Table

runner = CliRunner()
TRUTH = sp.csr_matrix(np.eye(3, 5, dtype=np.float32))
PRED = sp.csr_matrix(np.array([[0.9, 0.1, 0, 0, 0], [0.2, 0.8, 0, 0, 0], [0, 0, 0, 0.7, 0.6]], dtype=np.float32))


def raw_npz(path, fmt="csr", shape=(3, 5), **arrays):
    """An .npz as scipy writes it, with arrays scipy itself would never write."""
    np.savez(path, format=np.array(fmt), shape=np.array(shape), **arrays)


def csr_npz(path, data=(1.0, 0.5, 0.2), indices=(0, 1, 2), indptr=(0, 1, 2, 3), shape=(3, 5)):
    raw_npz(
        path,
        shape=shape,
        data=np.asarray(data, np.float32),
        indices=np.asarray(indices, np.int32),
        indptr=np.asarray(indptr, np.int32),
    )


@pytest.fixture
def d(tmp_path):
    save_sparse(tmp_path / "truth.npz", TRUTH)
    save_sparse(tmp_path / "pred.npz", PRED)
    save_sparse(tmp_path / "train.npz", sp.csr_matrix(np.eye(4, 5, dtype=np.float32)))
    return tmp_path


def invoke(*args):
    return runner.invoke(app, ["evaluate", *map(str, args)])


def one_error_line(result) -> str:
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


HOSTILE_PREDICTIONS = {
    "neg.npz": (lambda p: csr_npz(p, indices=(0, -1, 2)), "neg.npz: label id -1 in row 1 is out of range"),
    "big.npz": (lambda p: csr_npz(p, indices=(0, 1, 9)), "big.npz: label id 9 in row 2 is out of range"),
    "indptr.npz": (lambda p: csr_npz(p, indptr=(0, 3, 1, 3)), "indptr.npz: indptr decreases at row 1"),
    "nan.npz": (lambda p: csr_npz(p, data=(1.0, math.nan, 1.0)), "nan.npz: NaN value in row 1"),
    "repeat.npz": (lambda p: csr_npz(p, indices=(1, 1, 2), indptr=(0, 2, 3, 3)), "label 1 is scored twice in row 0"),
    "coo.npz": (
        lambda p: raw_npz(p, "coo", data=np.ones(2), row=np.array([0, 0]), col=np.array([1, 1])),
        "coo.npz: a (row, label) pair is stored twice",
    ),
    "text.npz": (
        lambda p: raw_npz(
            p, data=np.array(["a", "b", "c"]), indices=np.arange(3, dtype=np.int32), indptr=np.arange(4, dtype=np.int32)
        ),
        "values have type",
    ),
    "junk.npz": (lambda p: p.write_bytes(b"PK\x03\x04 not a zip"), "not a scipy.sparse .npz file"),
    "empty.npz": (lambda p: p.write_bytes(b""), "not a scipy.sparse .npz file"),
    "dir.npz": (lambda p: p.mkdir(), "dir.npz is a directory; give the matrix file"),
    "missing.npz": (lambda p: None, "missing.npz: file not found"),
    "junk.txt": (lambda p: p.write_text("hello world\n"), "junk.txt:1: bad header"),
    "empty.txt": (lambda p: p.write_text(""), "empty.txt:1: missing header"),
    "rows.txt": (lambda p: p.write_text("3 5\n0:1\n"), "header says 3 rows but the file has 1"),
    "negtext.txt": (lambda p: p.write_text("3 5\n0:1 -1:2\n\n1:1\n"), "negative column index -1"),
    "duptext.txt": (lambda p: p.write_text("3 5\n0:1 0:2\n\n1:1\n"), "appears twice"),
    "nantext.txt": (lambda p: p.write_text("3 5\n0:nan\n\n1:1\n"), "nantext.txt: NaN value in row 0"),
    "binary.txt": (lambda p: p.write_bytes(bytes(range(256)) * 2), "binary.txt:1: bad header"),
    "dir.txt": (lambda p: p.mkdir(), "dir.txt is a directory"),
    "wide.txt": (lambda p: p.write_text("3 1000000000000\n0:1\n\n1:1\n"), "shape (3, 1000000000000) but the ground"),
    "zero.npz": (lambda p: save_sparse(p, sp.csr_matrix((0, 5))), "shape (0, 5) but the ground truth has shape (3, 5)"),
}


@pytest.mark.parametrize("name", list(HOSTILE_PREDICTIONS))
def test_hostile_prediction_files_give_one_clear_error(d, name):
    make, message = HOSTILE_PREDICTIONS[name]
    make(d / name)
    line = one_error_line(invoke("-p", d / name, "-t", d / "truth.npz", "--format", "json"))
    assert message in line


def test_hostile_truth_training_and_filter_files(d):
    (d / "inf.txt").write_text("3 5\n0:inf\n\n1:1\n")
    assert "inf.txt: infinite value in row 0" in one_error_line(invoke("-p", d / "pred.npz", "-t", d / "inf.txt"))
    csr_npz(d / "neg.npz", indices=(0, -1, 2))
    assert "neg.npz: label id -1" in one_error_line(invoke("-p", d / "pred.npz", "-t", d / "neg.npz"))
    line = one_error_line(invoke("-p", d / "pred.npz", "-t", d / "truth.npz", "--train-truth", d / "neg.npz"))
    assert "neg.npz: label id -1" in line
    save_sparse(d / "truth4.npz", sp.csr_matrix(np.eye(4, 5, dtype=np.float32)))
    assert "shape (3, 5) but the ground truth has shape (4, 5)" in one_error_line(
        invoke("-p", d / "pred.npz", "-t", d / "truth4.npz")
    )
    (d / "filter.txt").write_text("-1 0\n")
    assert "out of range" in one_error_line(
        invoke("-p", d / "pred.npz", "-t", d / "truth.npz", "--filter", d / "filter.txt")
    )


def test_no_queries_is_an_error_not_zero_scores(d):
    save_sparse(d / "zero.npz", sp.csr_matrix((0, 5), dtype=np.float32))
    assert "no queries to evaluate" in one_error_line(invoke("-p", d / "zero.npz", "-t", d / "zero.npz"))


@pytest.mark.parametrize(
    "option, value",
    [("--A", "nan"), ("--A", "inf"), ("--B", "nan"), ("--B", "-inf"), ("--A", "1e308"), ("--B", "-0.5")],
)
def test_non_finite_or_invalid_propensity_parameters_are_refused(d, option, value):
    line = one_error_line(
        invoke(
            "-p",
            d / "pred.npz",
            "-t",
            d / "truth.npz",
            "--train-truth",
            d / "train.npz",
            option,
            value,
            "--format",
            "json",
        )
    )
    assert option in line or "propensity" in line


def test_huge_k_is_exact_and_json_is_strict(d):
    huge = 10**12
    result = invoke(
        "-p",
        d / "pred.npz",
        "-t",
        d / "truth.npz",
        "--train-truth",
        d / "train.npz",
        "--k",
        f"1,{huge}",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    w = inv_propensity(sp.csr_matrix(np.eye(4, 5, dtype=np.float32)), 0.55, 1.5)
    expected = evaluate(PRED, TRUTH, k=(1, huge), inv_propensity=w)
    assert got == {name: round(value, 4) for name, value in expected.items()}
    ci = invoke("-p", d / "pred.npz", "-t", d / "truth.npz", "--k", str(huge), "--ci", "--n-boot", "100")
    assert ci.exit_code == 0 and f"@{huge}" in ci.output


def test_bootstrap_options_are_bounded(d):
    for args in (["--seed", "-1"], ["--n-boot", "1000000000"]):
        result = invoke("-p", d / "pred.npz", "-t", d / "truth.npz", "--ci", *args)
        assert result.exit_code == 2 and "Traceback" not in result.output


@pytest.mark.parametrize("name", ["pred[/x].npz", "pred[bold]X.npz", "p[red]]].txt", "[/]"])
def test_bracketed_file_names_print_verbatim(d, name):
    save_sparse(d / "truth.txt", TRUTH)
    missing = one_error_line(invoke("-p", d / name, "-t", d / "truth.npz"))
    assert f"{name}: file not found" in missing
    save_sparse(d / name, PRED)
    table = invoke("-p", d / name, "-t", d / "truth.npz")
    assert table.exit_code == 0, table.output
    assert Path(name).name in "".join(table.output.split())  # the title (a file name: "/" splits) may wrap


@pytest.mark.parametrize("message", ["bad [bold]thing[/bold]", "closing [/x] tag", "[", "]", "a [/] b", "[red]x"])
def test_error_handler_prints_any_message_verbatim(message, capsys):
    @_common.handle_errors
    def fails():
        raise XmcbenchError(message)

    with pytest.raises(typer.Exit) as info:
        fails()
    assert info.value.exit_code == 1
    assert capsys.readouterr().err.strip() == f"error: {message}"


def test_report_tables_escape_user_text_and_write_strict_json():
    columns = [Column("method", "method", "text"), Column("P@1", "P@1", "metric")]
    rows = [
        {"kind": "reproduced", "ranked": True, "method": "m[bold]X[/bold]", "P@1": math.nan, "notes": None},
        {"kind": "published", "ranked": True, "method": "[/x]", "P@1": 40.0, "notes": None},
    ]
    table = Table(dataset="data[/x]", metrics=["P@1"], columns=columns, rows=rows, notes=["note [red]y"])
    console = Console(width=200, record=True, file=None, force_terminal=False)
    with console.capture() as captured:
        console.print(to_rich(table))
    text = captured.get()
    for literal in ("data[/x]", "m[bold]X[/bold]", "[/x]", "note [red]y"):
        assert literal in text
    records = json.loads(render(table, "json"), parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    assert records[0]["P@1"] is None and records[1]["P@1"] == 40.0


def test_strict_json_turns_non_finite_numbers_into_null():
    text = _common.strict_json({"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": (2, "x")})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {
        "a": None,
        "b": [1.0, None, {"c": None}],
        "d": [2, "x"],
    }
