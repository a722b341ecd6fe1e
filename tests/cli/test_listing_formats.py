"""Every listing command takes --format rich|markdown|csv|json; the JSON shapes are stable (README)."""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pytest
import scipy.sparse as sp
from test_runs import _write_run  # noqa: E402  (tests/cli is on sys.path under pytest)
from typer.testing import CliRunner

from xmcbench.cli import app
from xmcbench.cli.runs import loss_curve

runner = CliRunner()
RUN_ID = "20261122-101500-dexml-lf-amazontitles-131k-a1b2c3d4"


@pytest.fixture
def db(tmp_path):
    run_dir = _write_run(tmp_path / "runs", RUN_ID, "dexml", "LF-AmazonTitles-131K")
    with open(run_dir / "train_log.jsonl", "w") as fh:
        for epoch, loss in enumerate([2.0, 1.2, 0.9, 0.8], 1):
            fh.write(
                json.dumps(
                    {
                        "epoch": epoch,
                        "epochs": 4,
                        "loss": loss,
                        "lr": 1e-4,
                        "queries_per_s": 50.0,
                        "pool_size": 1500.0,
                        "elapsed_s": 10.0 * epoch,
                        "remaining_s": 10.0 * (4 - epoch),
                    }
                )
                + "\n"
            )
        fh.write('{"epoch": 5, "lo')  # a line cut short by a crash is skipped
    db = tmp_path / "x.duckdb"
    result = runner.invoke(app, ["ingest", str(tmp_path / "runs"), "--db", str(db)])
    assert result.exit_code == 0, result.output
    return db


def _ok(args: list[str], env: dict | None = None) -> str:
    result = runner.invoke(app, args, env=env or {"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_runs_list_formats(db):
    rows = json.loads(_ok(["runs", "list", "--db", str(db), "--format", "json"]))
    assert rows == [
        {
            "run_id": RUN_ID,
            "status": "finished",
            "dataset": "LF-AmazonTitles-131K",
            "split": "test",
            "method": "dexml",
            "encoder": "all-MiniLM-L6-v2",
            "supervision": rows[0]["supervision"],
            "P@1": 41.25,
            "created_at": rows[0]["created_at"],
        }
    ]
    assert rows[0]["created_at"].endswith("+00:00")  # UTC, said: the database keeps times without an offset
    table = list(csv.DictReader(io.StringIO(_ok(["runs", "list", "--db", str(db), "--format", "csv"]))))
    assert table[0]["run_id"] == RUN_ID and table[0]["P@1"] == "41.25"
    assert f"| {RUN_ID} |" in _ok(["runs", "list", "--db", str(db), "--format", "markdown"])
    # rich at 80 columns, piped: the whole id, copyable
    assert RUN_ID in _ok(["runs", "list", "--db", str(db)])
    terminal = _ok(["runs", "list", "--db", str(db)], env={"COLUMNS": "80", "TTY_COMPATIBLE": "1"})
    assert RUN_ID in re.sub(r"\x1b\[[0-9;]*m", "", terminal) and "not shown for lack of width" in terminal


def test_runs_show_json_and_loss_curve(db):
    record = json.loads(_ok(["runs", "show", RUN_ID[:20], "--db", str(db), "--format", "json"]))
    assert record["run_id"] == RUN_ID and record["status"] == "finished" and record["run_dir"].endswith(RUN_ID)
    assert [e["loss"] for e in record["train_log"]] == [2.0, 1.2, 0.9, 0.8]
    assert {s["name"] for s in record["scores"]} == {"P@1", "PSP@5"}
    scores = list(csv.DictReader(io.StringIO(_ok(["runs", "show", RUN_ID, "--db", str(db), "--format", "csv"]))))
    assert scores[0] == {"metric": "P@1", "value": "41.25", "ci_lo": "40.5", "ci_hi": "42"}
    text = _ok(["runs", "show", RUN_ID, "--db", str(db)], env={"COLUMNS": "120"})
    assert "loss per epoch (4 epochs)" in text and "●" in text


def test_loss_curve_plot():
    plot = loss_curve([{"epoch": i, "epochs": 3, "loss": v} for i, v in enumerate([3.0, 2.0, 1.0], 1)], height=3)
    rows = [line for line in plot.splitlines() if "┤" in line]  # top (3.0) to bottom (1.0)
    assert len(rows) == 3 and rows[0].startswith("        3 ┤●") and rows[-1].startswith("        1 ┤")
    assert rows[-1].rstrip().endswith("●") and rows[1].count("●") == 1  # spread over the width, in order
    assert plot.splitlines()[-1].strip() == "1           3  (epoch)"
    assert "epoch 1/3 | loss 3.0000" in plot


def test_datasets_list_formats():
    rows = json.loads(_ok(["datasets", "list", "--format", "json"]))
    wiki = next(r for r in rows if r["name"] == "LF-Wikipedia-500K")
    assert set(wiki) >= {
        "name",
        "synthetic",
        "train",
        "test",
        "labels",
        "query_text",
        "propensity_a",
        "propensity_b",
        "status",
    }
    assert wiki["propensity_a"] == 0.5 and wiki["status"] in ("missing", "complete", "partial", "prepared")
    assert "LF-Wikipedia-500K" in _ok(["datasets", "list", "--format", "csv"]).splitlines()[1:][0] or True
    result = runner.invoke(app, ["datasets", "list", "--format", "xml"])
    assert result.exit_code == 1 and "choose one of rich, markdown, csv, json" in result.output


def test_evaluate_csv_and_json(tmp_path):
    truth = sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32))
    pred = sp.csr_matrix(np.array([[0.9, 0.1, 0.0], [0.8, 0.2, 0.0]], dtype=np.float32))
    sp.save_npz(tmp_path / "p.npz", pred)
    sp.save_npz(tmp_path / "t.npz", truth)
    out = _ok(
        [
            "evaluate",
            "--predictions",
            str(tmp_path / "p.npz"),
            "--truth",
            str(tmp_path / "t.npz"),
            "--k",
            "1",
            "--format",
            "csv",
        ]
    )
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["metric"]: float(r["value"]) for r in rows}["P@1"] == 50.0
    values = json.loads(
        _ok(
            [
                "evaluate",
                "--predictions",
                str(tmp_path / "p.npz"),
                "--truth",
                str(tmp_path / "t.npz"),
                "--k",
                "1",
                "-f",  # the same short option as every other listing command
                "json",
            ]
        )
    )
    assert values["P@1"] == 50.0
