"""``xmcbench table``: formats, canonical dataset names, published numbers loaded on first use."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from xmcbench import paths
from xmcbench.cli import app
from xmcbench.leaderboard import load_reference_results
from xmcbench.store import Store
from xmcbench.store.record import new_record

DATASET = "LF-AmazonTitles-131K"
runner = CliRunner()


def _record(run_id: str, method: str, p1: float, **task) -> dict:
    record = new_record(
        run_id,
        task={
            "dataset": DATASET,
            "dataset_version": "v1",
            "split": "test",
            "n_queries": 134835,
            "n_queries_evaluated": 134835,
            "propensity_a": 0.6,
            "propensity_b": 2.6,
            "supervision": "full",
            **task,
        },
        model={"method": method},
    )
    record["status"] = "finished"
    record["scores"] = [
        {"name": "P@1", "value": p1, "ci_lo": p1 - 0.3, "ci_hi": p1 + 0.3},
        {"name": "P@5", "value": p1 / 2},
    ]
    record["compute"] = {
        "device_type": "cuda",
        "device_names": ["NVIDIA H100 80GB HBM3"],
        "device_count": 1,
        "gpu_hours": 0.25,
    }
    return record


@pytest.fixture
def db():
    """The default database under $XMCBENCH_HOME (set by the root conftest) with two runs."""
    with Store.open() as store:
        store.ingest_record(_record("run-dexml", "dexml", 99.0), None)  # above every published P@1
        store.ingest_record(_record("run-tfidf", "tfidf", 30.0), None)
    return paths.default_db_path()


def _json_rows(*args: str) -> list[dict]:
    result = runner.invoke(app, ["table", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_has_runs_published_rows_and_deltas(db):
    rows = _json_rows("--dataset", "lf-amazontitles-131k", "--all-published")  # any case; every published row
    assert all(r["dataset"] == DATASET for r in rows)
    runs = {r["source"]: r for r in rows if r["kind"] == "reproduced"}
    assert set(runs) == {"run-dexml", "run-tfidf"}
    assert runs["run-dexml"]["P@1"] == 99.0 and "P@1" in runs["run-dexml"]["best"] and runs["run-tfidf"]["best"] == []
    assert runs["run-dexml"]["gpus"] == "NVIDIA H100 80GB HBM3 × 1" and runs["run-dexml"]["gpu_hours"] == 0.25

    published = [r for r in rows if r["kind"] == "published"]
    expected = {
        (f"{r.paper}:{r.table}", r.printed_name, r.setting)
        for r in load_reference_results()
        if r.dataset == DATASET and r.dataset_variant is None
    }
    assert {(r["source"], r["method"], r["setting"]) for r in published} == expected

    # Δ against the DEXML paper's own row, recomputed here from what the table shows
    dexml = runs["run-dexml"]
    printed, _, source = dexml["delta_vs"].removesuffix(")").rpartition(" (")
    assert source.startswith("dexml:Table")
    ref = next(r for r in published if r["source"] == source and r["method"] == printed)
    assert dexml["P@1 Δ"] == pytest.approx(99.0 - ref["P@1"], abs=1e-4)


def test_published_zero_and_few_shot_rows(db):
    rows = _json_rows("--dataset", "LF-Amazon-131K")  # no runs here: published rows only
    assert {r["kind"] for r in rows} == {"published"}
    assert {"full", "zero-shot", "few-shot-1%", "few-shot-5%"} <= {r["setting"] for r in rows}


def test_table_reads_published_numbers_without_writing_them(db, tmp_path):
    before = sorted(p.name for p in db.parent.iterdir())
    rows = _json_rows("--dataset", DATASET)
    assert any(r["kind"] == "published" for r in rows)
    with Store.open(db, read_only=True) as store:
        assert store.reference_loaded_at() is None  # read from the leaderboard files, not stored
    assert sorted(p.name for p in db.parent.iterdir()) == before

    # a write command stores them, once while the files are unchanged
    (tmp_path / "no-runs").mkdir()
    assert runner.invoke(app, ["ingest", str(tmp_path / "no-runs")]).exit_code == 0
    with Store.open(db, read_only=True) as store:
        loaded = store.reference_loaded_at()
        assert loaded is not None
    assert runner.invoke(app, ["ingest", str(tmp_path / "no-runs")]).exit_code == 0
    with Store.open(db, read_only=True) as store:
        assert store.reference_loaded_at() == loaded
    assert _json_rows("--dataset", DATASET) == rows  # the stored copy gives the same table


def test_metrics_option_and_markdown_best(db):
    result = runner.invoke(app, ["table", "-d", DATASET, "--metrics", "p@1", "--format", "markdown"])
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines() if line.startswith("| method"))
    assert "| P@1 | P@1 Δ |" in header and "P@5" not in header
    dexml = next(line for line in result.stdout.splitlines() if "run-dexml" in line)
    assert "| **99.00** |" in dexml


def test_csv_and_html(db):
    result = runner.invoke(app, ["table", "-d", DATASET, "--format", "csv", "--metrics", "P@1,P@5"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert {"P@1", "P@5", "GPU-hours", "batch size", "label pool", "source", "setting"} <= set(rows[0])
    assert float(next(r for r in rows if r["source"] == "run-tfidf")["P@1"]) == 30.0
    html = runner.invoke(app, ["table", "-d", DATASET, "--format", "html"])
    assert html.exit_code == 0 and html.stdout.startswith("<!DOCTYPE html>") and "run-dexml" in html.stdout


def test_rich_is_the_default(db):
    result = runner.invoke(app, ["table", "-d", DATASET], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "run-dexml" in result.stdout and "99.00" in result.stdout and "GPU-hours" in result.stdout


def test_all_runs_and_latest(db):
    with Store.open(db) as store:
        later = _record("run-dexml-2", "dexml", 50.0)
        later["created_at"] = "2099-01-01T00:00:00+00:00"
        store.ingest_record(later, None)
    assert {r["source"] for r in _json_rows("-d", DATASET) if r["kind"] == "reproduced"} == {"run-dexml", "run-tfidf"}
    assert {r["source"] for r in _json_rows("-d", DATASET, "--latest") if r["kind"] == "reproduced"} == {
        "run-dexml-2",
        "run-tfidf",
    }
    assert {r["source"] for r in _json_rows("-d", DATASET, "--all-runs") if r["kind"] == "reproduced"} == {
        "run-dexml",
        "run-dexml-2",
        "run-tfidf",
    }


def test_mixed_versions_fail_with_the_fix(db):
    with Store.open(db) as store:
        store.ingest_record(_record("run-v2", "tfidf", 31.0, dataset_version="v2"), None)
    result = runner.invoke(app, ["table", "-d", DATASET])
    assert result.exit_code == 1
    assert "2 different settings" in result.output and "--dataset-version" in result.output
    rows = _json_rows("-d", DATASET, "--dataset-version", "v2")
    assert [r["source"] for r in rows if r["kind"] == "reproduced"] == ["run-v2"]
    rows = _json_rows("-d", DATASET, "--dataset-version", "v1", "--propensity", "0.6,2.6")
    assert {r["source"] for r in rows if r["kind"] == "reproduced"} == {"run-dexml", "run-tfidf"}


def test_bad_options_are_one_line_errors(db, tmp_path):
    assert "--propensity expects A,B" in runner.invoke(app, ["table", "-d", DATASET, "--propensity", "0.6"]).output
    result = runner.invoke(app, ["table", "-d", DATASET, "--format", "xls"])
    assert result.exit_code == 1 and "unknown table format 'xls'" in result.output
    result = runner.invoke(app, ["table", "-d", "no-such-data"])
    assert result.exit_code == 1 and "nothing to show for dataset 'no-such-data'" in result.output
    # a mistyped --db is reported, not made into a new empty database
    result = runner.invoke(app, ["table", "-d", DATASET, "--db", str(tmp_path / "other.duckdb")])
    assert (
        result.exit_code == 1 and f"no results database at {tmp_path / 'other.duckdb'}; run a recipe" in result.output
    )
    assert not (tmp_path / "other.duckdb").exists() and not (tmp_path / "other.duckdb.lock").exists()


@pytest.mark.parametrize(
    "args, words, code",
    [
        (["--metrics", "Q@1"], "'Q@1' is not a metric name", 1),
        (["--metrics", "P@1,P@0"], "'P@0' is not a metric name", 1),
        (["--latest", "--all-runs"], "give one of them (see `", 2),  # the command line itself: a usage error
        (["--sweep", "latest", "--all-runs"], "--sweep shows every finished run", 1),
    ],
)
def test_options_that_cannot_mean_anything_are_refused(db, args, words, code):
    result = runner.invoke(app, ["table", "-d", DATASET, *args])
    assert result.exit_code == code and words in result.output


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--split", "train"], "--split train"),
        (["--dataset-version", "zz"], "--dataset-version zz"),
        (["--method", "nope"], "--method nope"),
        (["--setting", "few-shot"], "--setting few-shot"),
    ],
)
def test_filters_that_leave_nothing_say_so_and_what_there_is(db, args, flag):
    with Store.open(db) as store:  # a dataset no paper reports: the runs are all there is
        store.ingest_record(_record("run-own", "dexml", 40.0, dataset="my-data"), None)
    result = runner.invoke(app, ["table", "-d", "my-data", *args], env={"COLUMNS": "400"})
    assert result.exit_code == 1
    assert f"matches {flag};" in result.output
    assert "splits test" in result.output and "dexml" in result.output and "index run directories" not in result.output


@pytest.mark.parametrize("format", ["rich", "markdown", "html", "json", "csv"])
def test_a_filter_no_run_matches_says_so_beside_the_published_rows(db, format):
    result = runner.invoke(
        app, ["table", "-d", DATASET, "--split", "train", "--format", format], env={"COLUMNS": "400"}
    )
    assert result.exit_code == 0, result.output
    assert "run-dexml" not in result.stdout and "DEXML" in result.stdout  # the published rows, alone
    said = "no run matches --split train: published rows only; the runs of LF-AmazonTitles-131K have settings full; splits test"
    if format in ("json", "csv"):  # stdout stays data; the note goes to stderr
        assert said in " ".join(result.stderr.split()) and "no run matches" not in result.stdout
    else:
        assert said in " ".join(result.stdout.split())
