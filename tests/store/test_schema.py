"""Schema versions and migrations of the results database."""

from __future__ import annotations

import duckdb
import pytest

from xmcbench.errors import XmcbenchError
from xmcbench.store import SCHEMA_VERSION, Store
from xmcbench.store.schema import MIGRATIONS, current_version, migrate


def _tables(db) -> set[str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    finally:
        con.close()


def test_migrations_are_numbered_in_order():
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert SCHEMA_VERSION == MIGRATIONS[-1].version >= 2


def test_new_database_has_every_table(tmp_path):
    with Store.open(tmp_path / "x.duckdb") as store:
        assert store.schema_version() == SCHEMA_VERSION
    assert {
        "schema_version",
        "runs",
        "scores",
        "compute",
        "accounting",
        "group_scores",
        "reference_results",
    } <= _tables(tmp_path / "x.duckdb")


def test_version_1_database_is_migrated_and_keeps_its_rows(tmp_path, record_factory):
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    assert migrate(con, str(db), target=1) == 1
    # a run indexed by an xmcbench that only knew schema 1
    con.execute(
        "INSERT INTO runs (run_id, record_schema, status, dataset, split, method, record_sha256, record_json, ingested_at) "
        "VALUES ('old-run', 1, 'finished', 'synth-small', 'test', 'tfidf', 'x', '{}', now()::TIMESTAMP)"
    )
    con.execute("INSERT INTO scores VALUES ('old-run', 'P@1', 'P', 1, 33.0, 32.0, 34.0, true)")
    con.close()
    assert "accounting" not in _tables(db)

    with Store.open(db) as store:
        assert store.schema_version() == SCHEMA_VERSION
        assert [r["run_id"] for r in store.runs()] == ["old-run"]
        assert store.scores(run_id="old-run")[0]["value"] == 33.0
        store.ingest_record(record_factory("new-run"), None)  # the new tables work
        assert {r["run_id"] for r in store.runs()} == {"old-run", "new-run"}
    con = duckdb.connect(str(db), read_only=True)
    assert [r[0] for r in con.execute("SELECT version FROM schema_version ORDER BY version").fetchall()] == list(
        range(1, SCHEMA_VERSION + 1)
    )
    con.close()


def test_newer_database_is_refused(tmp_path):
    db = tmp_path / "future.duckdb"
    con = duckdb.connect(str(db))
    migrate(con, str(db))
    con.execute("INSERT INTO schema_version VALUES (?, 'from the future', now()::TIMESTAMP)", [SCHEMA_VERSION + 1])
    con.close()
    with pytest.raises(
        XmcbenchError, match=rf"schema version {SCHEMA_VERSION + 1}, newer than this xmcbench understands"
    ):
        with Store.open(db):
            pass


def test_failed_migration_leaves_the_database_unchanged(tmp_path, monkeypatch):
    db = tmp_path / "x.duckdb"
    con = duckdb.connect(str(db))
    migrate(con, str(db), target=1)
    broken = (
        MIGRATIONS[0],
        type(MIGRATIONS[1])(2, "broken", ("CREATE TABLE ok_so_far (x INTEGER)", "THIS IS NOT SQL")),
    )
    monkeypatch.setattr("xmcbench.store.schema.MIGRATIONS", broken)
    with pytest.raises(duckdb.Error):
        migrate(con, str(db), target=2)
    assert current_version(con) == 1
    assert (
        con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'ok_so_far'").fetchone()[0] == 0
    )
    con.close()


def test_not_a_database_is_a_clear_error(tmp_path):
    db = tmp_path / "x.duckdb"
    db.write_text("this is not a database")
    with pytest.raises(XmcbenchError, match="is not a DuckDB database"):
        with Store.open(db):
            pass
