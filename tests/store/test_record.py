"""Writing, reading and checking run records."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from xmcbench.errors import DataFormatError
from xmcbench.store.record import parse_metric_name, read_record, record_rows, write_record


def test_write_then_read_round_trip(tmp_path, record_factory):
    record = record_factory("r1", scores={"P@1": 41.25, "PSP@5": 30.5})
    write_record(tmp_path / "r1", record)
    assert read_record(tmp_path / "r1") == record
    assert not [p for p in (tmp_path / "r1").iterdir() if p.name != "record.json"], "temp file left behind"


def test_rows_from_record(tmp_path, record_factory):
    record = record_factory("r1", scores={"P@1": 41.25, "nDCG@3": 30.5}, propensity_a=0.6, propensity_b=2.6)
    record["created_at"] = "2026-01-02T03:04:05+02:00"
    record["groups"] = {"head": {"P@1": 50.0}, "tail": {"P@1": 5.0}}
    rows = record_rows(record, tmp_path / "r1")
    assert rows.runs["created_at"] == datetime(2026, 1, 2, 1, 4, 5)  # stored as naive UTC
    assert rows.runs["propensity_a"] == 0.6 and rows.runs["method"] == "tfidf"
    assert [(s["name"], s["metric"], s["k"]) for s in rows.scores] == [("P@1", "P", 1), ("nDCG@3", "nDCG", 3)]
    assert {(g["grp"], g["value"]) for g in rows.group_scores} == {("head", 50.0), ("tail", 5.0)}
    assert rows.compute["wall_total_s"] == pytest.approx(3.75) and rows.compute["wall_train_s"] == 2.0
    assert rows.accounting["batch_size"] == 64
    assert json.loads(rows.runs["record_json"]) == record


def test_parse_metric_name():
    assert parse_metric_name("PSnDCG@10") == ("PSnDCG", 10)
    assert parse_metric_name("MRR") == ("MRR", None)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.pop("run_id"), "field run_id is missing"),
        (lambda r: r.update(status="done"), "field status must be one of"),
        (lambda r: r.update(schema_version=2), "newer than this xmcbench understands"),
        (lambda r: r["task"].pop("dataset"), "field task.dataset is missing"),
        (lambda r: r["task"].update(n_queries="many"), "field task.n_queries must be an integer"),
        (lambda r: r["scores"][0].update(value=None), r"field scores\[0\].value is missing"),
        (lambda r: r["scores"].append(dict(r["scores"][0])), "repeats the metric"),
        (lambda r: r.update(created_at="yesterday"), "must be an ISO-8601 timestamp"),
        (lambda r: r["compute"].update(device_count=True), "compute.device_count must be an integer"),
    ],
)
def test_bad_records_name_the_field(tmp_path, record_factory, change, message):
    record = record_factory("r1")
    change(record)
    with pytest.raises(DataFormatError, match=message) as info:
        record_rows(record, tmp_path / "r1")
    assert str(tmp_path / "r1" / "record.json") in str(info.value)
    with pytest.raises(DataFormatError):  # the writer refuses it too, and writes nothing
        write_record(tmp_path / "r1", record)
    assert not (tmp_path / "r1" / "record.json").exists()


def test_damaged_json_reports_line(tmp_path):
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "record.json").write_text('{\n  "run_id": "r1",\n  "status": \n}')
    with pytest.raises(DataFormatError, match=r"record.json:4: invalid JSON"):
        read_record(tmp_path / "r1")


def test_a_record_that_is_a_pipe_is_refused_not_read_forever(tmp_path):
    import os

    (tmp_path / "run").mkdir()
    os.mkfifo(tmp_path / "run" / "record.json")
    with pytest.raises(DataFormatError, match="not a regular file"):
        read_record(tmp_path / "run")


def test_read_train_log_keeps_what_it_can_read(tmp_path):
    from xmcbench.store.record import read_train_log

    (tmp_path / "train_log.jsonl").write_bytes(
        b'{"epoch": 1, "loss": 0.5}\n'
        b"[1, 2]\n"  # not an object
        b'{"epoch": 2, "loss": "0.4", "lr": true, "stage": "warmup"}\n'  # numbers edited into text
        b'{"epoch": 3, "loss": NaN}\n'
        b"\xff\xfe not utf-8\n"
        b'{"epoch": 4, "lo'  # cut short by a kill
    )
    assert read_train_log(tmp_path) == [
        {"epoch": 1, "loss": 0.5},
        {"epoch": 2, "loss": None, "lr": None, "stage": "warmup"},
        {"epoch": 3, "loss": None},
    ]
    assert read_train_log(tmp_path / "missing") == [] and read_train_log(None) == []
