"""The results store: a DuckDB index over run directories and the published reference results.

    from xmcbench.store import Store
    with Store.open() as store:                 # $XMCBENCH_HOME/xmcbench.duckdb
        report = store.ingest_dir(paths.runs_dir())
    with Store.open(read_only=True) as store:   # for commands that only read
        for run in store.runs(dataset="LF-AmazonTitles-131K"):
            ...

A ``Store`` holds no open connection: every write locks ``<db>.lock``, opens the file read-write,
writes in one transaction and closes; every read opens it read-only for one query (see
``lock.py``). That is what lets several ``xmcbench run`` processes record results into one file
at the same time without losing any, and keeps a long ``xmcbench table`` from blocking them.

Reading never writes: ``Store.open(read_only=True)`` creates no file, no lock file and applies no
migration, so read commands work on a read-only home and a mistyped ``--db`` is reported instead
of becoming a new empty database. The file may be damaged (a full disk, a copy cut short): readers
say so in one line, and ``Store.open(repair=True)`` (``xmcbench ingest``) moves it aside and starts
a fresh one, since everything in it can be rebuilt from the run directories.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from xmcbench import paths
from xmcbench.errors import DataFormatError, XmcbenchError
from xmcbench.faults import cannot_write, duckdb_damaged
from xmcbench.store.lock import DEFAULT_TIMEOUT_S, is_lock_conflict, retry_on_conflict, write_lock
from xmcbench.store.record import RECORD_FILE, RunRows, effective_status, read_record, record_rows
from xmcbench.store.schema import SCHEMA_VERSION, check_not_newer, current_version, migrate, utcnow

RUN_TABLES = ("runs", "scores", "group_scores", "compute", "accounting")

# Runs that measure the same thing and may share a table column. Runs that differ in any of
# these (another dataset version, other propensity A/B, another filter file) are never ranked
# against each other.
COMPARABILITY_KEY = ("split", "dataset_version", "propensity_a", "propensity_b", "filter")


class NoDatabaseError(XmcbenchError):
    """A read found no results database at the path (reads never create one)."""


class DamagedDatabaseError(XmcbenchError):
    """The results database file cannot be read as a DuckDB database."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class DatabaseWriteError(XmcbenchError):
    """Writing to the results database failed (disk full, no permission); nothing was recorded there."""


class UnstorableRecordError(DataFormatError):
    """A record holds a value the database refuses (a number out of its range, text it cannot encode).

    ``record_rows`` rejects the kinds known; this catches the rest, so one such record is reported
    bad instead of failing the whole ingest with DuckDB's traceback.
    """

    def __init__(self, run_id: str, where: Path | str, reason: str):
        self.run_id = run_id
        super().__init__(where, None, reason)


def say_on_stderr(message: str) -> None:
    """The default ``notify``: one line on stderr, where progress bars and errors go."""
    print(message, file=sys.stderr, flush=True)


@dataclass
class IngestReport:
    """What ``ingest_dir`` did: run ids ingested, and (path, reason) for what it left out.

    ``interrupted``: run ids recorded as running whose process is gone, indexed as interrupted by
    this ingest (not those already indexed so).
    """

    ingested: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    bad: list[tuple[str, str]] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return f"{len(self.ingested)} ingested, {len(self.skipped)} skipped, {len(self.bad)} bad"


class Store:
    """The results database at ``path``. Use ``Store.open(path)``, which creates or migrates it,
    or ``Store.open(path, read_only=True)``, which only reads."""

    def __init__(
        self,
        path: Path | str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        read_only: bool = False,
        notify: Callable[[str], None] | None = None,
    ):
        self.path = Path(path).expanduser() if path is not None else paths.default_db_path()
        self.timeout_s = timeout_s
        self.read_only = read_only
        self.notify = notify or say_on_stderr
        self.repair = False
        self.exists = True  # False: a read-only store over no file (``missing_ok``); every query is empty
        self.version: int | None = None  # schema version, when opened read-only
        self.moved_aside: Path | None = None  # where a damaged file went (``repair``)
        self.damage: str | None = None  # what was wrong with it
        self._tables: frozenset[str] | None = None  # read-only: the tables there are (an older schema has fewer)
        self._said_busy = False
        self.reference_problem: str | None = None  # why the published numbers could not be read from the files
        self.runs_from: Path | None = None  # the runs this store was opened to ingest: what a write failure names

    @classmethod
    @contextmanager
    def open(
        cls,
        path: Path | str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        read_only: bool = False,
        missing_ok: bool = False,
        repair: bool = False,
        notify: Callable[[str], None] | None = None,
        runs_from: Path | str | None = None,
    ) -> Iterator[Store]:
        """Open the database; ``path`` defaults to the home one.

        Writers (default): create it or apply missing migrations; with ``repair``, a damaged file
        is moved aside (``moved_aside``) and a fresh database created. ``read_only``: nothing is
        created, locked or migrated; a missing file raises ``NoDatabaseError`` unless
        ``missing_ok`` (then every query returns nothing). ``notify`` is told once when the
        database is busy and this process waits (default: a line on stderr). ``runs_from``: the
        run directory (or folder of them) to be ingested, which an error writing the database
        names as what to ingest once it can be written.
        """
        store = cls(path, timeout_s, read_only=read_only, notify=notify)
        store.repair = repair
        store.runs_from = Path(runs_from) if runs_from is not None else None
        if read_only:
            store._inspect(missing_ok)
        else:
            store.ensure_schema()
            if repair:
                try:  # damage in a data block shows only when that block is read
                    store.verify()
                except (DamagedDatabaseError, NoDatabaseError) as exc:  # gone: another ingest is repairing it
                    store.damage = getattr(exc, "reason", None)
                    if not store._repaired():
                        raise
        yield store

    # -- errors ------------------------------------------------------------------------------

    def _no_database(self) -> NoDatabaseError:
        if self.path.exists():  # there, but it holds nothing (_cut_short, or no table yet)
            return NoDatabaseError(
                f"no results database at {self.path} yet: its creation was cut short (a full disk or a kill) before "
                "it held anything; run a recipe or `xmcbench ingest DIR`, which start it afresh"
            )
        return NoDatabaseError(f"no results database at {self.path}; run a recipe or `xmcbench ingest DIR` first")

    def _is_directory(self) -> XmcbenchError:
        return XmcbenchError(
            f"{self.path} is a directory, not a results database file; give --db a file such as {self.path / 'xmcbench.duckdb'}"
        )

    def _write_failed(self, reason: str, run_dir: Path | str | None = None) -> DatabaseWriteError:
        if run_dir is None:
            run_dir = self.runs_from
        if (
            run_dir is not None and not (Path(run_dir) / RECORD_FILE).exists() and Path(run_dir).is_dir()
        ):  # a folder of runs
            keeps = f"the run directories in {run_dir} still have their records, and `xmcbench ingest {run_dir}` will index them"
        elif run_dir is not None:
            keeps = f"the run directory {run_dir} still has the record, and `xmcbench ingest {run_dir}` will index it"
        else:
            keeps = f"run directories keep their records, and `xmcbench ingest {paths.runs_dir()}` will index them"
        return DatabaseWriteError(
            f"cannot write to the results database {self.path} ({reason}); {keeps} once the database can be "
            f"written (free disk space or fix permissions)"
        )

    def _error(self, exc: BaseException, writing: bool, run_dir: Path | str | None = None) -> BaseException:
        """The user-facing error for a failure of DuckDB or the OS on this file; ``exc`` itself for bugs."""
        reason = (
            _one_line(exc).replace(f'file "{self.path}"', "file").replace(f'"{self.path}"', "it")
        )  # named once, by us
        lowered = reason.lower()
        if isinstance(exc, duckdb.Error) and "database does not exist" in lowered:
            return self._no_database()
        if "is a directory" in lowered:
            return self._is_directory()
        if isinstance(exc, OSError) or cannot_write(exc) or (writing and "failed to commit" in lowered):
            if writing:
                return self._write_failed(reason, run_dir)
            return XmcbenchError(f"cannot read the results database {self.path} ({reason}); check its permissions")
        if duckdb_damaged(exc):
            return self._damaged(reason)
        return exc

    def _damaged(self, reason: str) -> DamagedDatabaseError:
        return DamagedDatabaseError(
            f"the results database {self.path} is damaged or not a DuckDB file ({reason}); "
            f"`xmcbench ingest DIR` (DIR: your run directories, e.g. {paths.runs_dir()}) moves it aside and rebuilds it",
            reason,
        )

    def _say_busy(self, message: str) -> None:
        if not self._said_busy:  # once per store: a run that writes twice still says it once
            self._said_busy = True
            self.notify(message)

    # -- connections -------------------------------------------------------------------------

    def _connect(self, read_only: bool, run_dir: Path | str | None = None) -> duckdb.DuckDBPyConnection:
        # DuckDB opens some files that are not databases in its own way (a .csv becomes an
        # in-memory database with a view of it, where writes vanish): check the header first.
        if self.path.is_file() and not _duckdb_header(self.path):
            raise self._not_duckdb()
        try:
            return duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.Error as exc:
            if is_lock_conflict(exc):
                raise  # another process has it open: the caller retries
            error = self._error(exc, writing=not read_only, run_dir=run_dir)
            if error is exc:  # whatever else keeps DuckDB from opening the file is still about the file
                error = XmcbenchError(
                    f"cannot open the results database {self.path} ({_one_line(exc)}); give --db a DuckDB file"
                )
            raise error from None

    def _not_duckdb(self) -> DamagedDatabaseError:
        reason = "no DuckDB header"
        if self.path == paths.default_db_path():
            return self._damaged(reason)
        return DamagedDatabaseError(
            f"{self.path} is not a DuckDB database ({reason}); give --db the results database (if this file was one, "
            f"move it away and rebuild it with `xmcbench ingest DIR --db {self.path}`)",
            reason,
        )

    def _open_for_writing(self, run_dir: Path | str | None = None) -> duckdb.DuckDBPyConnection:
        """A read-write connection (the caller holds the write lock)."""
        return retry_on_conflict(
            lambda: self._connect(read_only=False, run_dir=run_dir),
            "open the database for writing",
            self.path,
            self.timeout_s,
            self._say_busy,
        )

    @contextmanager
    def _write_lock(self, run_dir: Path | str | None = None) -> Iterator[None]:
        if self.read_only:
            raise XmcbenchError(f"{self.path} was opened read-only; open it with Store.open(path) to write")
        if self.path.is_dir():
            raise self._is_directory()
        with ExitStack() as stack:
            try:
                stack.enter_context(write_lock(self.path, self.timeout_s, self._say_busy))
            except OSError as exc:  # the folder or the lock file cannot be made: unwritable home, a file in the way
                in_the_way = next((p for p in self.path.parents if p.exists()), None)
                reason = _one_line(exc)
                if in_the_way is not None and not in_the_way.is_dir():
                    reason = f"{in_the_way} is a file, not a folder"
                raise self._write_failed(reason, run_dir) from None
            yield

    @contextmanager
    def _locked(self, run_dir: Path | str | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """Hold the write lock and a read-write connection; close and unlock afterwards."""
        with self._write_lock(run_dir):
            con = self._open_for_writing(run_dir)
            try:
                yield con
            finally:
                con.close()

    @contextmanager
    def _writing(self, run_dir: Path | str | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """Lock, open read-write, yield inside one transaction, commit, close, unlock.

        A failure of the disk or the file becomes one clear error; ``run_dir`` names the run
        directory whose record is then not indexed.
        """
        with self._locked(run_dir) as con:
            try:
                con.execute("BEGIN TRANSACTION")
                try:
                    yield con
                except BaseException:
                    _rollback(con)
                    raise
                con.execute("COMMIT")
            except (duckdb.Error, OSError) as exc:
                if isinstance(exc, duckdb.Error) and is_lock_conflict(exc):
                    raise
                error = self._error(exc, writing=True, run_dir=run_dir)
                if error is exc:
                    raise
                raise error from None

    def _query(self, sql: str, params: Sequence[Any] = (), needs: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Run one read-only query; rows as dicts. ``needs``: tables it reads (none there: no rows)."""
        if self._tables is not None and not set(needs) <= self._tables:
            return []  # no database yet, or an older schema without that table

        def attempt() -> list[dict[str, Any]]:
            con = self._connect(read_only=True)
            try:
                cursor = con.execute(sql, list(params))
                columns = [d[0] for d in cursor.description]
                return [dict(zip(columns, row)) for row in cursor.fetchall()]
            except duckdb.Error as exc:
                error = self._error(exc, writing=False)
                if error is exc:
                    raise
                raise error from None
            finally:
                con.close()

        return retry_on_conflict(attempt, "read the database", self.path, self.timeout_s, self._say_busy)

    # -- schema ------------------------------------------------------------------------------

    def _inspect(self, missing_ok: bool) -> None:
        """Read-only open: check the file is there and readable; note its version and tables."""
        if self.path.is_dir():
            raise self._is_directory()
        if not self.path.exists() or _cut_short(self.path):  # a file whose creation was cut short holds nothing yet
            if not missing_ok:
                raise self._no_database()
            self.exists, self.version, self._tables = False, None, frozenset()
            return

        def attempt() -> tuple[int, frozenset[str]]:
            con = self._connect(read_only=True)
            try:
                tables = frozenset(
                    r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
                )
                return current_version(con), tables
            except duckdb.Error as exc:
                error = self._error(exc, writing=False)
                if error is exc:
                    raise
                raise error from None
            finally:
                con.close()

        self.version, self._tables = retry_on_conflict(
            attempt, "read the schema version", self.path, self.timeout_s, self._say_busy
        )
        if not self._tables:  # created, but cut short before its first table: no database yet
            if not missing_ok:
                raise self._no_database()
            self.exists, self.version = False, None
            return
        check_not_newer(self.version, str(self.path))

    def schema_note(self) -> str | None:
        """For a read-only store over an older schema: what that means and how to migrate it."""
        if self.version is None or not self.exists or self.version >= SCHEMA_VERSION:
            return None
        return (
            f"{self.path} has schema version {self.version} (this xmcbench writes {SCHEMA_VERSION}); showing what it holds. "
            f"Reading never migrates it: `xmcbench ingest {paths.runs_dir()}` (or any run) will"
        )

    def ensure_schema(self) -> int:
        """Create the database or apply missing migrations; refuse a newer schema. Returns the version.

        With ``self.repair`` a damaged file is moved aside and a fresh database created.
        """
        if self.path.is_dir():
            raise self._is_directory()
        if self.path.exists():
            try:
                version = self.schema_version()
            except (DamagedDatabaseError, NoDatabaseError):
                version = -1  # maybe a file another process is creating or moving right now: look again under the lock
            check_not_newer(version, str(self.path))
            if version == SCHEMA_VERSION:
                return version
        with self._write_lock():
            if _cut_short(self.path):
                # a creation cut short (disk full, a kill): it holds nothing, and no writer is making
                # it now, since writers create under this lock
                self.path.unlink()
                self.path.with_name(self.path.name + ".wal").unlink(missing_ok=True)
            try:
                return self._migrate()
            except DamagedDatabaseError as exc:
                if not self.repair:
                    raise
                self._set_aside(exc.reason)
                return self._migrate()

    def _migrate(self) -> int:
        con = self._open_for_writing()
        try:
            return migrate(con, str(self.path))  # re-reads the version: another process may have migrated
        except duckdb.Error as exc:
            error = self._error(exc, writing=True)
            if error is exc:
                raise
            raise error from None
        finally:
            con.close()

    def _set_aside(self, reason: str) -> None:
        """Move the damaged file (and its write-ahead log) aside, keeping it; the caller holds the write lock.

        A file given with --db that never was a DuckDB database (no DuckDB header) is someone
        else's file, named by mistake: it is left alone.
        """
        if self.path != paths.default_db_path() and not _duckdb_header(self.path):
            raise XmcbenchError(
                f"{self.path} is not a DuckDB database ({reason}) and xmcbench did not make it; not touching it. "
                f"Give --db another path, or move the file away"
            )
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        aside = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        n = 1
        while aside.exists():
            aside = self.path.with_name(f"{self.path.name}.damaged-{stamp}-{n}")
            n += 1
        wal = self.path.with_name(self.path.name + ".wal")
        try:
            os.replace(self.path, aside)
            if wal.exists():  # a fresh database must not replay the damaged one's log
                os.replace(wal, aside.with_name(aside.name + ".wal"))
        except OSError as exc:
            raise self._write_failed(f"moving the damaged file aside failed: {_one_line(exc)}") from None
        self.moved_aside, self.damage = aside, reason
        self.notify(
            f"the results database {self.path} was damaged ({reason}); moved it to {aside} and starting a fresh one"
        )

    def _repaired(self) -> bool:
        """After a damage report during a repairing write: set the file aside once, make a fresh one."""
        if not self.repair or self.moved_aside is not None:
            return False
        with self._write_lock():
            try:
                self.verify()  # look again under the lock: another `xmcbench ingest` may have rebuilt it meanwhile
                return True
            except NoDatabaseError:
                pass
            except DamagedDatabaseError as exc:
                self._set_aside(exc.reason)
            self._migrate()
        return True

    def verify(self) -> None:
        """Read every row and column of every table; ``DamagedDatabaseError`` if any block is damaged.

        The database is an index (megabytes), so reading it all is quick.
        """
        tables = [r["table_name"] for r in self._query("SELECT table_name FROM information_schema.tables")]
        for table in tables:
            # hashing the whole row makes DuckDB read every column, not only those a count needs
            self._query(f'SELECT count(*) AS n, max(hash(t)) AS h FROM "{table}" AS t')

    def schema_version(self) -> int:
        def attempt() -> int:
            con = self._connect(read_only=True)
            try:
                return current_version(con)
            except duckdb.Error as exc:
                error = self._error(exc, writing=False)
                if error is exc:
                    raise
                raise error from None
            finally:
                con.close()

        return retry_on_conflict(attempt, "read the schema version", self.path, self.timeout_s, self._say_busy)

    # -- ingestion ---------------------------------------------------------------------------

    def ingest_record(self, record: dict, run_dir: Path | str | None) -> str:
        """Insert or replace one run (by run_id). Idempotent. Returns the run id.

        Raises ``DatabaseWriteError`` (naming ``run_dir``) when the database cannot be written.
        """
        rows = _rows(record, run_dir)
        with self._writing(run_dir) as con:
            _upsert(con, rows)  # UnstorableRecordError (a DataFormatError): one line naming the record
        return rows.run_id

    def ingest_dir(self, path: Path | str) -> IngestReport:
        """Index one run directory, or every run directory directly inside ``path``.

        Records are checked before anything is written; damaged ones are reported in ``bad`` (with
        the reason) and the rest are ingested in one transaction. Records already indexed with the
        same content, location and status are ``skipped``. A "running" record whose process is
        gone is indexed as interrupted. With ``repair``, a database found damaged on the way is
        set aside and rebuilt from ``path``.
        """
        path = Path(path).expanduser()
        if not path.is_dir():
            raise XmcbenchError(
                f"{path}: no such directory; give a run directory or a folder of them (e.g. {paths.runs_dir()})"
            )
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

        parsed: list[tuple[Path, RunRows]] = []
        for run_dir in run_dirs:
            try:
                record = read_record(run_dir)
                rows = _rows(record, run_dir)
            except DataFormatError as exc:
                report.bad.append(
                    (str(run_dir), exc.problem if exc.line is None else f"line {exc.line}: {exc.problem}")
                )
                continue
            if rows.runs["status"] != record.get("status"):
                report.interrupted.append(rows.run_id)
            parsed.append((run_dir, rows))

        for attempt in range(3):
            try:
                known = {
                    r["run_id"]: (r["record_sha256"], r["run_dir"], r["status"])
                    for r in self._query("SELECT run_id, record_sha256, run_dir, status FROM runs", needs=("runs",))
                }
                outcome = IngestReport(bad=list(report.bad), skipped=list(report.skipped))
                todo: dict[str, RunRows] = {}
                folders: dict[str, Path] = {}  # run id -> the run directory as found, for a bad record
                for run_dir, rows in parsed:
                    if rows.run_id in todo:
                        outcome.bad.append(
                            (str(run_dir), f"run_id {rows.run_id} also recorded in {todo[rows.run_id].runs['run_dir']}")
                        )
                    elif known.get(rows.run_id) == (
                        rows.runs["record_sha256"],
                        rows.runs["run_dir"],
                        rows.runs["status"],
                    ):
                        outcome.skipped.append((str(run_dir), "already indexed, unchanged"))
                    else:
                        todo[rows.run_id] = rows
                        folders[rows.run_id] = run_dir
                while todo:
                    try:
                        with self._writing(path) as con:
                            for rows in todo.values():
                                _upsert(con, rows)
                        break
                    except UnstorableRecordError as exc:
                        # the transaction was rolled back: that record is bad, the others are written without it
                        del todo[exc.run_id]
                        outcome.bad.append((str(folders[exc.run_id]), exc.problem))
            except DamagedDatabaseError as exc:
                self.damage = exc.reason
                if self._repaired():
                    continue
                raise
            except NoDatabaseError:  # moved aside by another process's repair a moment ago: wait for the new one
                if attempt == 2:
                    raise
                self.ensure_schema()
                continue
            outcome.ingested = list(todo)
            # only runs indexed now: one already indexed as interrupted was told the first time
            outcome.interrupted = [run_id for run_id in report.interrupted if run_id in todo]
            return outcome
        raise AssertionError("unreachable")  # every pass returns, continues or raises

    # -- reference results -------------------------------------------------------------------

    def load_reference_results(self, rows: Iterable[Any] | None = None) -> int:
        """Replace the reference_results table with published numbers. Returns the number of values.

        ``rows`` are ``xmcbench.leaderboard.ReferenceRow`` objects; default: every row of the
        leaderboard files (``xmcbench.leaderboard.load_reference_results()``).
        """
        values = _reference_values(rows, loaded_at=utcnow())
        with self._writing() as con:
            con.execute("DELETE FROM reference_results")
            _insert(con, "reference_results", values)
        return len(values)

    def refresh_reference_results(self) -> bool:
        """Load the published numbers if the table is empty or older than the leaderboard files.

        Returns True when it (re)loaded them.
        """
        if self._references_current():
            return False
        self.load_reference_results()
        return True

    def _references_current(self) -> bool:
        loaded = self.reference_loaded_at()
        try:
            newest = _leaderboard_mtime()
        except XmcbenchError:  # no leaderboard folder: whatever copy the database has is the best there is
            return loaded is not None
        return loaded is not None and (newest is None or newest <= loaded)

    def reference_loaded_at(self) -> datetime | None:
        """When the reference results were last loaded (UTC), or None if the table is empty."""
        rows = self._query("SELECT max(loaded_at) AS t FROM reference_results", needs=("reference_results",))
        return rows[0]["t"] if rows else None

    def reference_results(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """Published numbers, one row per (paper, table, dataset, method, variant, setting, metric).

        From the database when its copy is up to date, else straight from the leaderboard files:
        reading never writes, and published numbers need no database at all.
        """
        if not self._references_current():
            try:
                rows = [
                    {k: v for k, v in row.items() if k != "loaded_at"}
                    for row in _reference_values(None, loaded_at=None)
                ]
            except XmcbenchError as exc:  # a broken leaderboard file must not hide the runs
                self.reference_problem = str(exc)
                rows = None  # an older copy in the database, if any, is better than none (below)
            if rows is not None:
                if dataset is not None:
                    rows = [r for r in rows if r["dataset"].lower() == dataset.lower()]
                return sorted(
                    rows,
                    key=lambda r: (
                        r["paper"],
                        r["paper_table"],
                        r["method"],
                        r["variant"] is not None,
                        r["variant"] or "",
                        r["printed_name"],
                        r["setting"],
                        r["metric"],
                    ),
                )
        where, params = _filters(dataset=dataset)
        return self._query(
            f"SELECT * EXCLUDE (loaded_at) FROM reference_results {where} "
            "ORDER BY paper, paper_table, method, variant NULLS FIRST, printed_name, setting, metric",
            params,
            needs=("reference_results",),
        )

    def set_sweep_runs(self, sweep_id: str, launcher: str, runs: Sequence[tuple[str, str, int | None]]) -> None:
        """The runs of sweep ``sweep_id`` now: (run_id, run key, seed), one per key; earlier ones are dropped."""
        self.ensure_schema()
        now = utcnow()
        with self._writing() as con:
            con.execute("DELETE FROM sweeps WHERE sweep_id = ?", [sweep_id])
            if runs:
                con.executemany(
                    "INSERT INTO sweeps VALUES (?, ?, ?, ?, ?, ?)",
                    [[sweep_id, run_id, key, seed, launcher, now] for run_id, key, seed in runs],
                )

    def finished_with_recipe(self, recipe_hash: str) -> list[dict[str, Any]]:
        """Finished runs of the recipe with this hash (newest first): what a sweep need not run again."""
        return self._query(
            "SELECT run_id, run_dir FROM runs WHERE recipe_hash = ? AND status = 'finished' "
            "ORDER BY created_at DESC NULLS LAST, run_id DESC",
            [recipe_hash],
            needs=("runs",),
        )

    def typical_wall_s(self, recipe_paths: Sequence[str], host: str, last: int = 5) -> dict[str, float]:
        """recipe path -> the median time its ``last`` newest finished runs on ``host`` spent in their
        phases, less any wait for another run's shared stage (``accounting.waited_s``): how long a
        sweep expects its next run of that recipe to take. The phases' sum, not finished - created:
        a run resumed the next day did not take a day."""
        if not recipe_paths:
            return {}
        rows = self._query(
            "SELECT recipe_path, median(seconds) AS seconds FROM ("
            " SELECT r.recipe_path, coalesce(c.wall_total_s, epoch(r.finished_at) - epoch(r.created_at))"
            "  - coalesce(TRY_CAST(json_extract_string(r.record_json, '$.accounting.waited_s') AS DOUBLE), 0)"
            "  AS seconds, row_number() OVER (PARTITION BY r.recipe_path ORDER BY r.created_at DESC) AS newest"
            " FROM runs r LEFT JOIN compute c USING (run_id)"
            " WHERE r.status = 'finished' AND r.host = ? AND list_contains(?, r.recipe_path)"
            ") WHERE newest <= ? AND seconds IS NOT NULL GROUP BY recipe_path",
            [host, list(recipe_paths), last],
            needs=("runs", "compute"),
        )
        return {row["recipe_path"]: max(0.0, float(row["seconds"])) for row in rows}

    def sweep_runs(self, sweep_id: str) -> list[dict[str, Any]]:
        """The runs sweep ``sweep_id`` started (run_id, run_key, seed, launcher), in key order."""
        return self._query(
            "SELECT sweep_id, run_id, run_key, seed, launcher FROM sweeps WHERE sweep_id = ? ORDER BY run_key",
            [sweep_id],
            needs=("sweeps",),
        )

    # -- queries -----------------------------------------------------------------------------

    def runs(
        self, dataset: str | None = None, method: str | None = None, status: str | None = None
    ) -> list[dict[str, Any]]:
        """Indexed runs (newest first), without the stored record text.

        ``status`` is the effective one: a run recorded as running whose process is gone on this
        host is "interrupted" (``xmcbench.store.record.effective_status``).
        """
        where, params = _filters(dataset=dataset, method=method)
        if status is not None:  # 'running' rows may read as interrupted: decided below, per record
            where += (" AND " if where else "WHERE ") + "status IN (?, 'running')"
            params.append(status)
        rows = self._query(
            f"SELECT * EXCLUDE (record_json), CASE WHEN status = 'running' THEN record_json END AS _record FROM runs {where} "
            "ORDER BY created_at DESC NULLS LAST, run_id",
            params,
            needs=("runs",),
        )
        for row in rows:
            record = row.pop("_record")
            if record is not None:
                row["status"] = effective_status(json.loads(record))
        return [row for row in rows if status is None or row["status"] == status]

    def get_run(self, run_id: str) -> dict[str, Any]:
        """One run by id or unique id prefix: its runs row plus ``record`` (the parsed record.json).

        ``status`` is the effective one (see ``runs``); ``record["status"]`` as recorded.
        """
        if not self.exists:
            raise self._no_database()
        rows = self._query("SELECT * FROM runs WHERE run_id = ?", [run_id], needs=("runs",))
        if not rows:
            rows = self._query(
                "SELECT * FROM runs WHERE starts_with(run_id, ?) ORDER BY run_id", [run_id], needs=("runs",)
            )
        if not rows:
            raise XmcbenchError(
                f"no run {run_id!r} in {self.path}; see `xmcbench runs list`, or index run directories with `xmcbench ingest DIR`"
            )
        if len(rows) > 1:
            shown = ", ".join(r["run_id"] for r in rows[:5]) + (" ..." if len(rows) > 5 else "")
            raise XmcbenchError(f"{run_id!r} matches {len(rows)} runs ({shown}); give more of the run id")
        run = rows[0]
        run["record"] = json.loads(run.pop("record_json"))
        if run["status"] == "running":
            run["status"] = effective_status(run["record"])
        run["run_dir"] = self._located(run["run_id"], run["run_dir"])
        return run

    def _located(self, run_id: str, run_dir: str | None) -> str | None:
        """Where the run's folder is now: as indexed, or, when a home was moved or copied, the
        folder of that run id beside this database or under $XMCBENCH_HOME (reading only: the
        index keeps its path until `xmcbench ingest` re-indexes the folder)."""
        if not run_dir or Path(run_dir).is_dir():
            return run_dir
        for runs_root in (self.path.parent / "runs", paths.runs_dir()):
            candidate = runs_root / run_id
            if (candidate / RECORD_FILE).is_file():
                return str(candidate)
        return run_dir

    def scores(
        self,
        run_id: str | None = None,
        dataset: str | None = None,
        method: str | None = None,
        names: Sequence[str] | None = None,
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
            needs=("scores", "runs"),
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
            needs=("runs", "scores"),
        )

    def run_details(self, run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Scores, compute and accounting of several runs at once: run_id -> {"scores": {name: row}, "compute": row, "accounting": row}."""
        if not run_ids:
            return {}
        marks = ", ".join("?" * len(run_ids))
        out: dict[str, dict[str, Any]] = {rid: {"scores": {}, "compute": None, "accounting": None} for rid in run_ids}
        for row in self._query(f"SELECT * FROM scores WHERE run_id IN ({marks})", run_ids, needs=("scores",)):
            out[row["run_id"]]["scores"][row["name"]] = row
        for table in ("compute", "accounting"):  # an older schema may lack one: those stay None
            for row in self._query(f"SELECT * FROM {table} WHERE run_id IN ({marks})", run_ids, needs=(table,)):
                out[row["run_id"]][table] = row
        return out


# A DuckDB file starts with three 4 KiB headers; tables live in blocks after them. A shorter file
# was cut short while it was being created (disk full, a kill) and can hold no table.
_HEADERS_SIZE = 3 * 4096


def _cut_short(path: Path) -> bool:
    """Whether ``path`` is a DuckDB file whose creation was cut short: empty or shorter than its
    headers, with no write-ahead log that could hold committed rows. Never true for anyone else's file."""
    wal = path.with_name(path.name + ".wal")
    try:
        if not path.is_file() or path.stat().st_size >= _HEADERS_SIZE or (wal.exists() and wal.stat().st_size > 0):
            return False
    except OSError:
        return False
    return _duckdb_header(path)


def _duckdb_header(path: Path) -> bool:
    """Whether ``path`` starts like a DuckDB file (magic "DUCK" after the checksum), or is empty (a creation cut short)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
    except OSError:
        return False
    return len(head) == 0 or head[8:12] == b"DUCK"


def _one_line(exc: BaseException) -> str:
    """The first line of an error, without DuckDB's category prefix, short enough for one line."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    for prefix in (
        "IO Error: ",
        "TransactionContext Error: ",
        "Serialization Error: ",
        "INTERNAL Error: ",
        "FATAL Error: ",
    ):
        text = text.removeprefix(prefix)
    return text if len(text) <= 300 else text[:297] + "..."


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass  # the failure that brought us here may have ended the transaction already


def _rows(record: dict, run_dir: Path | str | None) -> RunRows:
    """``record_rows`` with the effective status, so a killed run is indexed as interrupted."""
    rows = record_rows(record, run_dir)
    rows.runs["status"] = effective_status(record)
    return rows


def _leaderboard_mtime() -> datetime | None:
    """When the newest leaderboard file changed (naive UTC, like the database's timestamps)."""
    from xmcbench.leaderboard import reference_dir

    newest = max((f.stat().st_mtime for f in reference_dir().glob("*.yaml")), default=None)
    return None if newest is None else datetime.fromtimestamp(newest, timezone.utc).replace(tzinfo=None)


def _reference_values(rows: Iterable[Any] | None, loaded_at: datetime | None) -> list[dict[str, Any]]:
    """Rows of the reference_results table for ``ReferenceRow`` objects (default: the leaderboard files)."""
    if rows is None:
        from xmcbench.leaderboard import load_reference_results

        rows = load_reference_results()
    return [
        {
            "paper": ref.paper,
            "paper_table": ref.table,
            "dataset": ref.dataset,
            "dataset_variant": ref.dataset_variant,
            "method": ref.method,
            "variant": ref.variant,
            "printed_name": ref.printed_name,
            "setting": ref.setting,
            "metric": metric,
            "value": float(value),
            "batch_size": ref.batch_size,
            "label_pool": None if ref.label_pool is None else str(ref.label_pool),
            "gpus": ref.gpus,
            "gpu_type": ref.gpu_type,
            "train_time_hours": ref.train_time_hours,
            "test_queries": ref.test_queries,
            "notes": ref.notes,
            "loaded_at": loaded_at,
        }
        for ref in rows
        for metric, value in ref.metrics.items()
    ]


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
    types = dict(
        con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?", [table]
        ).fetchall()
    )
    unnests = ", ".join(f"unnest(?::{types[c]}[])" for c in columns)
    con.execute(
        f"INSERT INTO {table} ({', '.join(columns)}) SELECT {unnests}", [[row[c] for row in rows] for c in columns]
    )


def _upsert(con: duckdb.DuckDBPyConnection, rows: RunRows) -> None:
    """Replace the run's rows; ``UnstorableRecordError`` when DuckDB refuses one of its values."""
    for table in RUN_TABLES:
        con.execute(f"DELETE FROM {table} WHERE run_id = ?", [rows.run_id])
    tables = {
        "runs": [{**rows.runs, "ingested_at": utcnow()}],
        "scores": rows.scores,
        "group_scores": rows.group_scores,
        "compute": [rows.compute] if rows.compute else [],
        "accounting": [rows.accounting] if rows.accounting else [],
    }
    for table, table_rows in tables.items():
        try:
            _insert(con, table, table_rows)
        except (duckdb.DataError, duckdb.InvalidInputException) as exc:  # out of range, cannot convert or encode
            where = Path(rows.runs["run_dir"]) / RECORD_FILE if rows.runs.get("run_dir") else "<record>"
            raise UnstorableRecordError(
                rows.run_id,
                where,
                f"a value of its {table} row cannot be stored in the database ({_one_line(exc)}); "
                "the run record is damaged (re-run or delete the run)",
            ) from None
