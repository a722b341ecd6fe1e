"""A record holding a value the database cannot hold (an integer beyond 64 bits, text that is not
Unicode, a date past the calendar's end) is one bad record with its reason: never a traceback, and
never the loss of the other records ingested with it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from xmcbench.cli import app
from xmcbench.errors import DataFormatError
from xmcbench.store import Store
from xmcbench.store.record import record_rows, write_record

BEYOND_INT64 = 10**30


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r["task"].update(n_queries=BEYOND_INT64), f"task.n_queries is {BEYOND_INT64}, beyond a 64-bit"),
        (lambda r: r["task"].update(n_labels=-(2**63) - 1), "task.n_labels is -9223372036854775809, beyond a 64-bit"),
        (lambda r: r["model"].update(params_total=2**63), "model.params_total is 9223372036854775808, beyond"),
        (lambda r: r["provenance"].update(seed=2**200), "provenance.seed is an integer of 201 bits"),
        (lambda r: r["accounting"].update(steps=BEYOND_INT64), f"accounting.steps is {BEYOND_INT64}, beyond"),
        (lambda r: r["compute"].update(device_count=2**31), "compute.device_count is 2147483648, beyond a 32-bit"),
        (lambda r: r["scores"][0].update(k=2**40), r"scores\[0\].k is 1099511627776, beyond a 32-bit"),
        (lambda r: r["scores"][0].update(name="P@99999999999"), r"scores\[0\].name has a cutoff k too large"),
        (lambda r: r["scores"][0].update(value=10**400), r"scores\[0\].value is an integer of 1329 bits, too large"),
        (lambda r: r["task"].update(dataset="synth-\ud800"), "task.dataset holds an unpaired surrogate"),
        (lambda r: r.update(created_at="0001-01-01T00:00:00+01:00"), "created_at is a timestamp whose UTC time"),
    ],
)
def test_a_value_the_database_cannot_hold_names_the_field(tmp_path, record_factory, change, message):
    record = record_factory("r1")
    change(record)
    with pytest.raises(DataFormatError, match=message) as info:
        record_rows(record, tmp_path / "r1")
    assert "the run record is damaged" in str(info.value)
    with pytest.raises(DataFormatError):  # the writer refuses it too, and writes nothing
        write_record(tmp_path / "r1", record)
    assert not (tmp_path / "r1" / "record.json").exists()


def test_the_edges_of_the_integer_columns_are_stored(tmp_path, record_factory):
    record = record_factory("edges")
    record["task"].update(n_queries=2**63 - 1, n_labels=-(2**63))
    record["compute"]["device_count"] = 2**31 - 1
    record["scores"][0]["name"] = "P@999999999"
    with Store.open(tmp_path / "x.duckdb") as store:
        store.ingest_record(record, tmp_path / "edges")
        run = store.get_run("edges")
        assert (run["n_queries"], run["n_labels"]) == (2**63 - 1, -(2**63))
        assert {s["k"] for s in store.scores(run_id="edges")} == {999_999_999, 5}


def _write_by_hand(runs, run_id: str, record: dict | None = None, text: str | None = None) -> None:
    """A record.json as a person or a bug might leave it (write_record refuses these)."""
    (runs / run_id).mkdir(parents=True)
    if text is None:
        text = json.dumps({**record, "run_id": run_id})
    (runs / run_id / "record.json").write_text(text)


def test_ingest_reports_each_unstorable_record_bad_and_indexes_the_rest(tmp_path, record_factory, run_factory):
    runs = tmp_path / "runs"
    run_factory(runs, record_factory("good-a"))
    run_factory(runs, record_factory("good-b"))
    big = record_factory("x")
    big["task"]["n_queries"] = BEYOND_INT64
    _write_by_hand(runs, "big", big)
    # a group name is a key, not a checked field: DuckDB itself refuses to encode it
    odd_group = record_factory("x")
    odd_group["groups"] = {"tail-\ud800": {"P@1": 5.0}}
    _write_by_hand(runs, "odd-group", odd_group)
    _write_by_hand(runs, "long-number", text='{"schema_version": 1, "n": ' + "9" * 5000 + "}")
    _write_by_hand(runs, "deep", text="[" * 100_000 + "]" * 100_000)

    with Store.open(tmp_path / "x.duckdb") as store:
        report = store.ingest_dir(runs)
        assert sorted(report.ingested) == ["good-a", "good-b"]
        bad = dict(report.bad)
        assert set(bad) == {str(runs / name) for name in ("big", "odd-group", "long-number", "deep")}
        assert "task.n_queries is 10" in bad[str(runs / "big")]
        assert "group_scores row cannot be stored" in bad[str(runs / "odd-group")]
        assert "surrogate" in bad[str(runs / "odd-group")] and "\n" not in bad[str(runs / "odd-group")]
        assert "unreadable JSON (Exceeds the limit (4300 digits)" in bad[str(runs / "long-number")]
        assert "nested too deeply" in bad[str(runs / "deep")]
        assert {r["run_id"] for r in store.runs()} == {"good-a", "good-b"}

        with pytest.raises(DataFormatError, match="group_scores row cannot be stored"):  # one run: one clear error
            store.ingest_record({**odd_group, "run_id": "odd-group"}, runs / "odd-group")
        assert {r["run_id"] for r in store.runs()} == {"good-a", "good-b"}


def test_the_ingest_command_says_bad_and_exits_1_without_a_traceback(tmp_path, record_factory, run_factory):
    runs = tmp_path / "runs"
    run_factory(runs, record_factory("good"))
    big = record_factory("x")
    big["task"]["n_queries"] = BEYOND_INT64
    _write_by_hand(runs, "big", big)
    result = CliRunner().invoke(app, ["ingest", str(runs), "--db", str(tmp_path / "x.duckdb")])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output and "1 ingested, 0 skipped, 1 bad" in result.output
    assert "beyond a 64-bit integer" in result.output
