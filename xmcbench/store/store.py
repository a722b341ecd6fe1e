"""The results store: a DuckDB index over run directories and the published reference results.

    from xmcbench.store import Store
    with Store.open() as store:                 # $XMCBENCH_HOME/xmcbench.duckdb
        report = store.ingest_dir(paths.runs_dir())
        for run in store.runs(dataset="LF-AmazonTitles-131K"):
            ...

A ``Store`` holds no open connection: every write locks ``<db>.lock``, opens the file read-write,
writes in one transaction and closes; every read opens it read-only for one query (see
``lock.py``). That is what lets several ``xmcbench run`` processes record results into one file
at the same time without losing any, and keeps a long ``xmcbench table`` from blocking them.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import duckdb

from xmcbench import paths
from xmcbench.errors import DataFormatError, XmcbenchError
from xmcbench.store.lock import DEFAULT_TIMEOUT_S, DatabaseLockTimeout, is_lock_conflict, retry_on_conflict, write_lock
from xmcbench.store.record import RECORD_FILE, RunRows, read_record, record_rows
from xmcbench.store.schema import SCHEMA_VERSION, check_not_newer, current_version, migrate, utcnow

RUN_TABLES = ("runs", "scores", "group_scores", "compute", "accounting")

# Runs that measure the same thing and may share a table column. Runs that differ in any of
# these (another dataset version, other propensity A/B, another filter file) are never ranked
# against each other.
COMPARABILITY_KEY = ("split", "dataset_version", "propensity_a", "propensity_b", "filter")


@dataclass
class IngestReport:
    """What ``ingest_dir`` did: run ids ingested, and (path, reason) for what it left out."""

    ingested: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    bad: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        return f"{len(self.ingested)} ingested, {len(self.skipped)} skipped, {len(self.bad)} bad"


class Store:
    """The results database at ``path``. Use ``Store.open(path)``, which creates or migrates it."""

    def __init__(self, path: Path | str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.path = Path(path).expanduser() if path is not None else paths.default_db_path()
        self.timeout_s = timeout_s

    @classmethod
    @contextmanager
    def open(cls, path: Path | str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator["Store"]:
        """Open (creating or migrating if needed) the database; ``path`` defaults to the home one."""
        store = cls(path, timeout_s)
        store.ensure_schema()
        yield store

    # -- connections -------------------------------------------------------------------------

    def _connect(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        try:
            return duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.Error as exc:
            if is_lock_conflict(exc):
                raise  # another process has it open: the caller retries
            raise XmcbenchError(
                f"{self.path}: cannot open the results database ({exc}). If the file is damaged, move it "
                f"away and rebuild it from the run directories with `xmcbench ingest {paths.runs_dir()}`"
            ) from None

    @contextmanager
    def _locked(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Hold the write lock and a read-write connection; close and unlock afterwards."""
        with write_lock(self.path, self.timeout_s):
            con = retry_on_conflict(
                lambda: self._connect(read_only=False), "open the database for writing", self.path, self.timeout_s
            )
            try:
                yield con
            finally:
                con.close()

    @contextmanager
    def _writing(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Lock, open read-write, yield inside one transaction, commit, close, unlock."""
        with self._locked() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run one read-only query; rows as dicts."""

        def attempt() -> list[dict[str, Any]]:
            con = self._connect(read_only=True)
            try:
                cursor = con.execute(sql, list(params))
                columns = [d[0] for d in cursor.description]
                return [dict(zip(columns, row)) for row in cursor.fetchall()]
            finally:
                con.close()

        return retry_on_conflict(attempt, "read the database", self.path, self.timeout_s)

    def ensure_schema(self) -> int:
        """Create the database or apply missing migrations; refuse a newer schema. Returns the version."""
        if self.path.exists():
            try:
                version = self.schema_version()
            except DatabaseLockTimeout:
                raise
            except XmcbenchError:
                version = -1  # maybe a file another process is creating right now: look again under the lock
            check_not_newer(version, str(self.path))
            if version == SCHEMA_VERSION:
                return version
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked() as con:
            return migrate(con, str(self.path))  # re-reads the version: another process may have migrated

    def schema_version(self) -> int:
        def attempt() -> int:
            con = self._connect(read_only=True)
            try:
                return current_version(con)
            finally:
                con.close()

        return retry_on_conflict(attempt, "read the schema version", self.path, self.timeout_s)

    # -- ingestion ---------------------------------------------------------------------------

    def ingest_record(self, record: dict, run_dir: Path | str | None) -> str:
        """Insert or replace one run (by run_id). Idempotent. Returns the run id."""
        rows = record_rows(record, run_dir)
        with self._writing() as con:
            _upsert(con, rows)
        return rows.run_id

    def ingest_dir(self, path: Path | str) -> IngestReport:
        """Index one run directory, or every run directory directly inside ``path``.

        Records are checked before anything is written; damaged ones are reported in ``bad`` (with
        the reason) and the rest are ingested in one transaction. Records already indexed with the
        same content and location are ``skipped``.
        """
        path = Path(path).expanduser()
        if not path.is_dir():
            raise XmcbenchError(f"{path}: no such directory; give a run directory or a folder of them (e.g. {paths.runs_dir()})")
        report = IngestReport()
        if (path / RECORD_FILE).exists():
            run_dirs = [path]
        else:
            run_dirs = []
            for child in sorted(p for p in path.iterdir() if p.is_dir()):
                if (child / RECORD_FILE).exists():
                    run_dirs.append(child)
                else:
                    report.skipped.append((str(child), f"no {RECORD_FILE} (not a run directory)"))

        known = {r["run_id"]: (r["record_sha256"], r["run_dir"]) for r in self._query("SELECT run_id, record_sha256, run_dir FROM runs")}
        todo: dict[str, RunRows] = {}
        for run_dir in run_dirs:
            try:
                rows = record_rows(read_record(run_dir), run_dir)
            except DataFormatError as exc:
                report.bad.append((str(run_dir), exc.problem if exc.line is None else f"line {exc.line}: {exc.problem}"))
                continue
            if rows.run_id in todo:
                report.bad.append((str(run_dir), f"run_id {rows.run_id} also recorded in {todo[rows.run_id].runs['run_dir']}"))
            elif known.get(rows.run_id) == (rows.runs["record_sha256"], rows.runs["run_dir"]):
                report.skipped.append((str(run_dir), "already indexed, unchanged"))
            else:
                todo[rows.run_id] = rows
        if todo:
            with self._writing() as con:
                for rows in todo.values():
                    _upsert(con, rows)
        report.ingested = list(todo)
        return report

    # -- reference results -------------------------------------------------------------------

    def load_reference_results(self, rows: Iterable[Any] | None = None) -> int:
        """Replace the reference_results table with published numbers. Returns the number of values.

        ``rows`` are ``xmcbench.leaderboard.ReferenceRow`` objects; default: every row of the
        leaderboard files (``xmcbench.leaderboard.load_reference_results()``).
        """
        if rows is None:
            from xmcbench.leaderboard import load_reference_results

            rows = load_reference_results()
        now = utcnow()
        values = [
            {
                "paper": ref.paper, "paper_table": ref.table, "dataset": ref.dataset, "dataset_variant": ref.dataset_variant,
                "method": ref.method, "variant": ref.variant, "printed_name": ref.printed_name, "setting": ref.setting,
                "metric": metric, "value": float(value), "batch_size": ref.batch_size,
                "label_pool": None if ref.label_pool is None else str(ref.label_pool), "gpus": ref.gpus,
                "gpu_type": ref.gpu_type, "train_time_hours": ref.train_time_hours, "test_queries": ref.test_queries,
                "notes": ref.notes, "loaded_at": now,
            }
            for ref in rows
            for metric, value in ref.metrics.items()
        ]
        with self._writing() as con:
            con.execute("DELETE FROM reference_results")
            _insert(con, "reference_results", values)
        return len(values)

    def refresh_reference_results(self) -> bool:
        """Load the published numbers if the table is empty or older than the leaderboard files.

        Returns True when it (re)loaded them.
        """
        from xmcbench.leaderboard import reference_dir

        files = list(reference_dir().glob("*.yaml"))
        newest = max((f.stat().st_mtime for f in files), default=None)
        loaded = self.reference_loaded_at()
        if loaded is not None and (newest is None or datetime.fromtimestamp(newest, timezone.utc).replace(tzinfo=None) <= loaded):
            return False
        self.load_reference_results()
        return True

    def reference_loaded_at(self) -> datetime | None:
        """When the reference results were last loaded (UTC), or None if the table is empty."""
        return self._query("SELECT max(loaded_at) AS t FROM reference_results")[0]["t"]

    def reference_results(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """Published numbers, one row per (paper, table, dataset, method, variant, setting, metric)."""
        where, params = _filters(dataset=dataset)
        return self._query(
            f"SELECT * EXCLUDE (loaded_at) FROM reference_results {where} "
            "ORDER BY paper, paper_table, method, variant NULLS FIRST, printed_name, setting, metric",
            params,
        )

    # -- queries -----------------------------------------------------------------------------

    def runs(self, dataset: str | None = None, method: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """Indexed runs (newest first), without the stored record text."""
        where, params = _filters(dataset=dataset, method=method, status=status)
        return self._query(f"SELECT * EXCLUDE (record_json) FROM runs {where} ORDER BY created_at DESC NULLS LAST, run_id", params)

    def get_run(self, run_id: str) -> dict[str, Any]:
        """One run by id or unique id prefix: its runs row plus ``record`` (the parsed record.json)."""
        rows = self._query("SELECT * FROM runs WHERE run_id = ?", [run_id])
        if not rows:
            rows = self._query("SELECT * FROM runs WHERE starts_with(run_id, ?) ORDER BY run_id", [run_id])
        if not rows:
            raise XmcbenchError(f"no run {run_id!r} in {self.path}; see `xmcbench runs list`, or index run directories with `xmcbench ingest DIR`")
        if len(rows) > 1:
            shown = ", ".join(r["run_id"] for r in rows[:5]) + (" ..." if len(rows) > 5 else "")
            raise XmcbenchError(f"{run_id!r} matches {len(rows)} runs ({shown}); give more of the run id")
        run = rows[0]
        run["record"] = json.loads(run.pop("record_json"))
        return run

    def scores(
        self, run_id: str | None = None, dataset: str | None = None, method: str | None = None, names: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """Score rows (run_id, name, metric, k, value, ci_lo, ci_hi, higher_is_better) joined with the run's dataset and method."""
        where, params = _filters(prefix="r.", dataset=dataset, method=method, run_id=run_id)
        if names:
            where += (" AND " if where else "WHERE ") + f"s.name IN ({', '.join('?' * len(names))})"
            params += list(names)
        return self._query(
            "SELECT s.*, r.dataset, r.method FROM scores s JOIN runs r USING (run_id) "
            f"{where} ORDER BY s.run_id, s.metric, s.k, s.name",
            params,
        )

    def best_runs(self, dataset: str, metric: str = "P@1", latest: bool = False) -> list[dict[str, Any]]:
        """The best (or, with ``latest``, the newest) finished run per configuration on ``dataset``.

        A configuration is (method, encoder, supervision, label fraction, queries evaluated) within
        one comparable setting (split, dataset version, propensity A/B, filter file): runs from
        different settings, or evaluated on different numbers of queries, are never ranked
        against each other. "Best" uses ``metric`` and its
        ``higher_is_better``; runs without that metric come after those with it; ties go to the
        newest run.
        """
        # n_queries_evaluated too: a run on a sample of the test set is never ranked against a full one
        config = ("method", "encoder", "supervision", "label_fraction", "n_queries_evaluated")
        partition = ", ".join(f"r.{c}" for c in (*config, *COMPARABILITY_KEY))
        by_value = "" if latest else "CASE WHEN s.higher_is_better THEN s.value ELSE -s.value END DESC NULLS LAST, "
        return self._query(
            "SELECT r.* EXCLUDE (record_json) FROM runs r LEFT JOIN scores s ON s.run_id = r.run_id AND lower(s.name) = lower(?) "
            "WHERE lower(r.dataset) = lower(?) AND r.status = 'finished' "
            f"QUALIFY row_number() OVER (PARTITION BY {partition} ORDER BY {by_value}r.created_at DESC NULLS LAST, r.run_id DESC) = 1 "
            "ORDER BY r.method, r.created_at DESC",
            [metric, dataset],
        )

    def run_details(self, run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Scores, compute and accounting of several runs at once: run_id -> {"scores": {name: row}, "compute": row, "accounting": row}."""
        if not run_ids:
            return {}
        marks = ", ".join("?" * len(run_ids))
        out: dict[str, dict[str, Any]] = {rid: {"scores": {}, "compute": None, "accounting": None} for rid in run_ids}
        for row in self._query(f"SELECT * FROM scores WHERE run_id IN ({marks})", run_ids):
            out[row["run_id"]]["scores"][row["name"]] = row
        for table in ("compute", "accounting"):
            for row in self._query(f"SELECT * FROM {table} WHERE run_id IN ({marks})", run_ids):
                out[row["run_id"]][table] = row
        return out


def _filters(prefix: str = "", **conditions: str | None) -> tuple[str, list[Any]]:
    """WHERE clause matching names case-insensitively (dataset, method) and the rest exactly."""
    parts, params = [], []
    for column, value in conditions.items():
        if value is None:
            continue
        if column in ("dataset", "method"):
            parts.append(f"lower({prefix}{column}) = lower(?)")
        else:
            parts.append(f"{prefix}{column} = ?")
        params.append(value)
    return ("WHERE " + " AND ".join(parts) if parts else ""), params


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]]) -> None:
    """Insert dict rows (same keys) in one statement, one list parameter per column.

    Binding a list per column and unnesting them is ~100x faster than executemany or a long
    multi-row VALUES for the ~1,000 reference values.
    """
    if not rows:
        return
    columns = list(rows[0])
    types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?", [table]).fetchall())
    unnests = ", ".join(f"unnest(?::{types[c]}[])" for c in columns)
    con.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT {unnests}", [[row[c] for row in rows] for c in columns])


def _upsert(con: duckdb.DuckDBPyConnection, rows: RunRows) -> None:
    for table in RUN_TABLES:
        con.execute(f"DELETE FROM {table} WHERE run_id = ?", [rows.run_id])
    _insert(con, "runs", [{**rows.runs, "ingested_at": utcnow()}])
    _insert(con, "scores", rows.scores)
    _insert(con, "group_scores", rows.group_scores)
    _insert(con, "compute", [rows.compute] if rows.compute else [])
    _insert(con, "accounting", [rows.accounting] if rows.accounting else [])
