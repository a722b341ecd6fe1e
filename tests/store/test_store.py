"""Ingesting run directories into the DuckDB store and querying it."""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import datetime, timedelta

import duckdb
import pytest

from xmcbench import paths
from xmcbench.errors import XmcbenchError
from xmcbench.leaderboard import ReferenceRow, load_reference_results, reference_dir
from xmcbench.store import Store


def _count(db, table: str) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        con.close()


def test_default_path_is_under_home(tmp_path):  # the root conftest points XMCBENCH_HOME into tmp_path
    with Store.open() as store:
        assert store.path == paths.default_db_path() and store.path.is_relative_to(tmp_path)
        assert store.path.exists() and store.runs() == []


def test_ingest_record_is_an_idempotent_upsert(tmp_path, record_factory):
    db = tmp_path / "x.duckdb"
    with Store.open(db) as store:
        record = record_factory("r1", scores={"P@1": 40.0, "P@5": 20.0})
        store.ingest_record(record, tmp_path / "r1")
        store.ingest_record(record, tmp_path / "r1")
        assert [r["run_id"] for r in store.runs()] == ["r1"]
        assert _count(db, "scores") == 2 and _count(db, "compute") == 1 and _count(db, "accounting") == 1

        record["scores"] = record["scores"][:1]  # a rewritten record replaces every row of the run
        record["scores"][0]["value"] = 42.0
        store.ingest_record(record, tmp_path / "r1")
        assert [(s["name"], s["value"]) for s in store.scores(run_id="r1")] == [("P@1", 42.0)]


def test_ingest_dir_reports_bad_and_skipped_and_continues(tmp_path, record_factory, run_factory):
    runs = tmp_path / "runs"
    for i in range(3):
        run_factory(runs, record_factory(f"run{i}", scores={"P@1": 30.0 + i}))
    (runs / "run1" / "record.json").write_text('{"schema_version": 1, "run_id": "run1", "status": "fin')  # truncated
    broken = record_factory("run3")
    del broken["task"]["split"]
    (runs / "run3").mkdir()  # valid JSON, missing field: written by hand, since write_record refuses it
    (runs / "run3" / "record.json").write_text(json.dumps(broken))
    (runs / "notes").mkdir()

    with Store.open(tmp_path / "x.duckdb") as store:
        report = store.ingest_dir(runs)
        assert sorted(report.ingested) == ["run0", "run2"]
        bad = dict(report.bad)
        assert "invalid JSON" in bad[str(runs / "run1")] and "line 1" in bad[str(runs / "run1")]
        assert "task.split is missing" in bad[str(runs / "run3")]
        assert dict(report.skipped) == {str(runs / "notes"): "no record.json (not a run directory)"}
        assert report.summary() == "2 ingested, 1 skipped, 2 bad"

        again = store.ingest_dir(runs)  # nothing changed: nothing rewritten
        assert again.ingested == [] and len(again.skipped) == 3 and len(again.bad) == 2

        single = store.ingest_dir(runs / "run0")  # one run directory works too
        assert single.skipped == [(str(runs / "run0"), "already indexed, unchanged")]
        assert {r["run_id"] for r in store.runs()} == {"run0", "run2"}


def test_ingest_dir_rebuilds_a_lost_database(tmp_path, record_factory, run_factory):
    runs = tmp_path / "runs"
    for i in range(4):
        run_factory(runs, record_factory(f"run{i}"))
    db = tmp_path / "x.duckdb"
    with Store.open(db) as store:
        store.ingest_dir(runs)
    db.unlink()
    with Store.open(db) as store:
        assert len(store.ingest_dir(runs).ingested) == 4
        run = store.get_run("run2")
        assert run["run_dir"] == str((runs / "run2").resolve())
        assert run["record"]["task"]["dataset"] == "synth-small"


def test_missing_directory_is_a_clear_error(tmp_path):
    with Store.open(tmp_path / "x.duckdb") as store, pytest.raises(XmcbenchError, match="no such directory"):
        store.ingest_dir(tmp_path / "nope")


def test_queries_filter_case_insensitively(tmp_path, record_factory):
    with Store.open(tmp_path / "x.duckdb") as store:
        store.ingest_record(record_factory("a", method="tfidf", dataset="Synth-Small"), None)
        store.ingest_record(record_factory("b", method="zero_shot", dataset="Synth-Small"), None)
        running = record_factory("c", method="tfidf", dataset="other")
        running["status"] = "running"
        store.ingest_record(running, None)
        assert {r["run_id"] for r in store.runs(dataset="synth-small")} == {"a", "b"}
        assert {r["run_id"] for r in store.runs(method="TFIDF")} == {"a", "c"}
        assert [r["run_id"] for r in store.runs(status="running")] == ["c"]
        assert {s["run_id"] for s in store.scores(dataset="synth-small", names=["P@5"])} == {"a", "b"}


def test_get_run_by_prefix(tmp_path, record_factory):
    with Store.open(tmp_path / "x.duckdb") as store:
        for run_id in ("20260101-aaa", "20260101-abb", "20260102-ccc"):
            store.ingest_record(record_factory(run_id), None)
        assert store.get_run("20260102")["run_id"] == "20260102-ccc"
        assert store.get_run("20260101-aaa")["record"]["run_id"] == "20260101-aaa"
        with pytest.raises(XmcbenchError, match="matches 2 runs"):
            store.get_run("20260101-a")
        with pytest.raises(XmcbenchError, match="no run 'zzz'"):
            store.get_run("zzz")


def _at(record: dict, minutes: int) -> dict:
    record["created_at"] = (datetime(2026, 1, 1) + timedelta(minutes=minutes)).isoformat() + "+00:00"
    return record


def test_best_runs_per_configuration_and_setting(tmp_path, record_factory):
    with Store.open(tmp_path / "x.duckdb") as store:
        store.ingest_record(_at(record_factory("t-old-best", scores={"P@1": 45.0}), 0), None)
        store.ingest_record(_at(record_factory("t-new", scores={"P@1": 40.0}), 10), None)
        store.ingest_record(_at(record_factory("z", method="zero_shot", scores={"P@1": 10.0}), 5), None)
        failed = _at(record_factory("t-failed", scores={"P@1": 99.0}), 20)
        failed["status"] = "failed"
        store.ingest_record(failed, None)
        # another dataset version: its own group, never ranked against v1
        store.ingest_record(_at(record_factory("t-v2", scores={"P@1": 30.0}, dataset_version="v2"), 30), None)

        best = {r["run_id"] for r in store.best_runs("synth-small")}
        assert best == {"t-old-best", "z", "t-v2"}
        latest = {r["run_id"] for r in store.best_runs("synth-small", latest=True)}
        assert latest == {"t-new", "z", "t-v2"}


def test_best_respects_lower_is_better(tmp_path, record_factory):
    with Store.open(tmp_path / "x.duckdb") as store:
        for run_id, value in (("a", 3.0), ("b", 1.0), ("c", 2.0)):
            record = record_factory(run_id, scores={"loss": value})
            record["scores"][0]["higher_is_better"] = False
            store.ingest_record(record, None)
        assert [r["run_id"] for r in store.best_runs("synth-small", metric="loss")] == ["b"]


def _ref(paper, table, dataset, method, setting, metrics, **extra) -> ReferenceRow:
    return ReferenceRow(
        paper=paper,
        table=table,
        dataset=dataset,
        method=method,
        printed_name=method,
        setting=setting,
        metrics=metrics,
        **extra,
    )


def test_reference_results_replace_idempotently(tmp_path):
    refs = [
        _ref(
            "dexml",
            "Table 2",
            "LF-AmazonTitles-131K",
            "DEXML",
            "full",
            {"P@1": 42.52, "P@5": 20.64},
            batch_size=4096,
            label_pool=131073,
            gpus=4,
            gpu_type="A100 40GB",
            train_time_hours=4.2,
        ),
        _ref("maclr", "Table 2", "LF-AmazonTitles-131K", "MACLR", "zero-shot", {"P@1": 10.0}, label_pool="~1.3M"),
    ]
    with Store.open(tmp_path / "x.duckdb") as store:
        assert store.reference_loaded_at() is None
        assert store.load_reference_results(refs) == 3
        assert store.load_reference_results(refs) == 3
        rows = store.reference_results(dataset="lf-amazontitles-131k")
        assert len(rows) == 3 and store.reference_loaded_at() is not None
        dexml = [r for r in rows if r["method"] == "DEXML" and r["metric"] == "P@1"][0]
        assert (dexml["value"], dexml["batch_size"], dexml["gpus"], dexml["paper_table"], dexml["label_pool"]) == (
            42.52,
            4096,
            4,
            "Table 2",
            "131073",
        )
        assert {r["setting"] for r in rows} == {"full", "zero-shot"}
        assert store.reference_results(dataset="EURLex-4K") == []


def test_reference_results_reload_when_the_files_change(tmp_path, monkeypatch):
    folder = tmp_path / "leaderboard"
    shutil.copytree(reference_dir(), folder)
    monkeypatch.setenv("XMCBENCH_LEADERBOARD_DIR", str(folder))
    with Store.open(tmp_path / "x.duckdb") as store:
        assert store.refresh_reference_results() is True  # empty: loaded
        n = len(store.reference_results())
        assert n == sum(len(r.metrics) for r in load_reference_results(folder)) > 100
        assert store.refresh_reference_results() is False  # up to date
        later = time.time() + 5
        os.utime(next(folder.glob("*.yaml")), (later, later))
        assert store.refresh_reference_results() is True
        assert len(store.reference_results()) == n


def test_a_moved_home_still_finds_its_run_folders(tmp_path, record_factory, run_factory):
    """The index holds absolute paths; a home moved or copied elsewhere still opens its runs."""
    old = tmp_path / "old"
    run_factory(old / "runs", record_factory("r1"))
    with Store.open(old / "xmcbench.duckdb") as store:
        store.ingest_dir(old / "runs")
    new = tmp_path / "new"
    shutil.move(old, new)
    with Store.open(new / "xmcbench.duckdb", read_only=True) as store:
        assert store.get_run("r1")["run_dir"] == str(new / "runs" / "r1")


def test_typical_wall_s_is_the_median_of_recent_phase_time_on_this_host_less_waits(tmp_path, record_factory):
    def run(run_id: str, *, path="/r/a.yaml", host="here", train=2.0, minutes=0, status="finished", **accounting):
        record = _at(record_factory(run_id), minutes)
        record["provenance"].update(recipe_path=path, host=host)
        record["compute"]["wall_time_s"] = {"prepare": 1.0, "train": train}
        record["accounting"].update(accounting)
        record["status"] = status
        return record

    with Store.open(tmp_path / "x.duckdb") as store:
        assert store.typical_wall_s(["/r/a.yaml"], "here") == {}  # nothing recorded yet
        for record in (
            run("a1", train=9.0, minutes=1),  # 10 s
            run("a2", train=29.0, minutes=2),  # 30 s
            # resumed a day later: created long before it finished, yet its phases took 20 s
            run("a3", train=19.0, minutes=3) | {"finished_at": "2026-01-03T00:00:00+00:00"},
            run("a-failed", train=999.0, minutes=4, status="failed"),
            run("a-elsewhere", train=999.0, minutes=5, host="other"),
            run("b1", path="/r/b.yaml", train=100.0, minutes=6, waited_s=90.0),  # 101 s, 90 of them waiting
        ):
            store.ingest_record(record, None)
        assert store.typical_wall_s(["/r/a.yaml", "/r/b.yaml", "/r/none.yaml"], "here") == {
            "/r/a.yaml": 20.0,
            "/r/b.yaml": 11.0,
        }
        assert store.typical_wall_s(["/r/a.yaml"], "here", last=1) == {"/r/a.yaml": 20.0}  # a3, the newest
        assert store.typical_wall_s(["/r/a.yaml"], "here", last=2) == {"/r/a.yaml": 25.0}  # a3 and a2
        assert store.typical_wall_s(["/r/a.yaml"], "other") == {"/r/a.yaml": 1000.0}
