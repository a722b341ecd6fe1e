"""Faults around the results database: reads that must not write, damaged files, failed writes, dead runs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import duckdb
import pytest

from xmcbench import paths
from xmcbench.errors import XmcbenchError
from xmcbench.store import (
    SCHEMA_VERSION,
    DamagedDatabaseError,
    DatabaseWriteError,
    NoDatabaseError,
    Store,
)
from xmcbench.store.schema import migrate


def _listing(folder) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and mtime: equal before and after means nothing was written."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


@pytest.fixture
def filled_db(tmp_path, record_factory, run_factory):
    """A database indexing three run directories (under tmp_path/runs), named like the home one."""
    runs = tmp_path / "runs"
    for i in range(3):
        run_factory(runs, record_factory(f"run{i}", scores={"P@1": 30.0 + i}))
    db = tmp_path / "db" / "xmcbench.duckdb"
    with Store.open(db) as store:
        store.ingest_dir(runs)
    (db.parent / "xmcbench.duckdb.lock").unlink(missing_ok=True)
    return db


# -- reads never write -----------------------------------------------------------------------


def test_read_only_open_of_a_missing_database_creates_nothing(tmp_path):
    db = tmp_path / "typo" / "results.duckdb"
    with pytest.raises(
        NoDatabaseError, match=rf"no results database at {db}; run a recipe or `xmcbench ingest DIR` first"
    ):
        with Store.open(db, read_only=True):
            pass
    assert not (tmp_path / "typo").exists()
    # a path below a regular file cannot exist either: the same message, not an OS error
    (tmp_path / "somefile").write_text("x")
    with pytest.raises(NoDatabaseError, match="no results database at"):
        with Store.open(tmp_path / "somefile" / "db", read_only=True):
            pass


def test_read_only_open_with_missing_ok_reads_nothing_but_published_numbers(tmp_path):
    db = tmp_path / "none.duckdb"
    with Store.open(db, read_only=True, missing_ok=True) as store:
        assert not store.exists
        assert store.runs() == [] and store.scores() == [] and store.best_runs("LF-AmazonTitles-131K") == []
        published = store.reference_results(dataset="LF-AmazonTitles-131K")
        assert published and {r["dataset"] for r in published} == {"LF-AmazonTitles-131K"}
        with pytest.raises(NoDatabaseError):
            store.get_run("x")
    assert list(tmp_path.iterdir()) == []


def test_reads_open_read_only_and_leave_every_file_untouched(filled_db, monkeypatch):
    """Every DuckDB connection a read-only store makes is read-only, it never takes the lock file,
    and no file in the database's folder changes (proved on a writable folder: running as root,
    a chmod would not stop a write)."""
    before = _listing(filled_db.parent)
    modes = []
    real_connect = duckdb.connect

    def connect(path, read_only=False, **kw):
        modes.append(read_only)
        return real_connect(path, read_only=read_only, **kw)

    def no_lock(*args, **kwargs):
        raise AssertionError("a read took the write lock")

    monkeypatch.setattr(duckdb, "connect", connect)
    monkeypatch.setattr("xmcbench.store.lock.file_lock", no_lock)
    with Store.open(filled_db, read_only=True) as store:
        runs = store.runs()
        assert {r["run_id"] for r in runs} == {"run0", "run1", "run2"}
        assert store.get_run("run1")["record"]["run_id"] == "run1"
        assert store.best_runs("synth-small") and store.scores(run_id="run0")
        assert store.run_details(["run0"])["run0"]["accounting"]["batch_size"] == 64
        store.reference_results()
        with pytest.raises(XmcbenchError, match="opened read-only"):
            store.load_reference_results([])
    assert modes and all(modes)
    assert _listing(filled_db.parent) == before


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes through a read-only mode")
def test_reads_work_in_a_read_only_folder(filled_db):
    os.chmod(filled_db.parent, 0o555)
    os.chmod(filled_db, 0o444)
    try:
        with Store.open(filled_db, read_only=True) as store:
            assert len(store.runs()) == 3
    finally:
        os.chmod(filled_db.parent, 0o755)
        os.chmod(filled_db, 0o644)


def _version_1_database(db) -> None:
    con = duckdb.connect(str(db))
    migrate(con, str(db), target=1)
    con.execute(
        "INSERT INTO runs (run_id, record_schema, status, dataset, split, method, record_sha256, record_json, ingested_at) "
        "VALUES ('old-run', 1, 'finished', 'synth-small', 'test', 'tfidf', 'x', '{\"run_id\": \"old-run\", \"status\": \"finished\"}', now()::TIMESTAMP)"
    )
    con.execute("INSERT INTO scores VALUES ('old-run', 'P@1', 'P', 1, 33.0, 32.0, 34.0, true)")
    con.close()


def test_an_older_schema_is_read_as_it_is_and_migrated_only_by_a_writer(tmp_path):
    db = tmp_path / "old.duckdb"
    _version_1_database(db)
    before = _listing(tmp_path)
    with Store.open(db, read_only=True) as store:
        assert store.version == 1
        assert [r["run_id"] for r in store.runs()] == ["old-run"]
        assert store.get_run("old")["record"]["run_id"] == "old-run"
        assert store.run_details(["old-run"])["old-run"]["accounting"] is None  # no such table in version 1
        assert [r["run_id"] for r in store.best_runs("synth-small")] == ["old-run"]
        assert store.reference_loaded_at() is None and store.reference_results()  # from the leaderboard files
        assert "schema version 1" in store.schema_note() and "xmcbench ingest" in store.schema_note()
    assert _listing(tmp_path) == before
    with Store.open(db) as store:  # a writer migrates
        assert store.schema_version() == SCHEMA_VERSION


def test_a_newer_schema_is_refused_by_readers_too(tmp_path):
    db = tmp_path / "future.duckdb"
    con = duckdb.connect(str(db))
    migrate(con, str(db))
    con.execute("INSERT INTO schema_version VALUES (?, 'from the future', now()::TIMESTAMP)", [SCHEMA_VERSION + 1])
    con.close()
    with pytest.raises(XmcbenchError, match="newer than this xmcbench understands"):
        with Store.open(db, read_only=True):
            pass


def test_a_directory_given_as_the_database_is_a_clear_error(tmp_path):
    for read_only in (True, False):
        with pytest.raises(XmcbenchError, match="is a directory, not a results database file"):
            with Store.open(tmp_path, read_only=read_only):
                pass


# -- damaged files ---------------------------------------------------------------------------


def _damage(db, how: str) -> None:
    size = db.stat().st_size
    with open(db, "r+b") as fh:
        if how == "empty":
            fh.truncate(0)
        elif how == "header":
            fh.truncate(100)
        elif how == "half":
            fh.truncate(size // 2)
        elif how == "garbage":
            fh.write(b"this is not a database at all" * 200)


@pytest.mark.parametrize("how", ["empty", "header", "half", "garbage"])
def test_a_damaged_database_is_one_clear_error_for_readers_and_writers(filled_db, how, monkeypatch):
    monkeypatch.setenv("XMCBENCH_HOME", str(filled_db.parent))  # the home database (a --db elsewhere: see below)
    _damage(filled_db, how)
    message = rf"the results database {filled_db} is damaged or not a DuckDB file \(.*\); `xmcbench ingest DIR` \(DIR: your run directories, .*\) moves it aside and rebuilds it"
    if how in ("empty", "header"):  # shorter than DuckDB's headers: it holds no table, whatever it held before
        message = rf"no results database at {filled_db} yet: its creation was cut short .* start it afresh"
    with pytest.raises((NoDatabaseError, DamagedDatabaseError), match=message) as info:
        with Store.open(filled_db, read_only=True) as store:
            store.runs()
    assert "\n" not in str(info.value) and str(filled_db) in str(info.value)
    if how in ("empty", "header"):
        return  # a writer replaces it (test_a_creation_cut_short_…)
    with pytest.raises(DamagedDatabaseError, match=message):  # a writer does not repair unless asked
        with Store.open(filled_db) as store:
            store.verify()


def _damage_a_data_block(db) -> None:
    """Overwrite bytes in a block that only a full read touches (the header and catalog stay sound)."""
    pristine = db.read_bytes()
    for offset in range(4096, len(pristine), 4096):
        damaged = bytearray(pristine)
        damaged[offset + 100 : offset + 164] = b"\xff" * 64
        db.write_bytes(bytes(damaged))
        store = Store(db)
        try:
            store.schema_version()
        except DamagedDatabaseError:
            continue
        try:
            store.verify()
        except DamagedDatabaseError:
            return
    pytest.skip("found no data block whose damage leaves the catalog readable")


@pytest.mark.parametrize("how", ["empty", "header", "half", "garbage", "data-block"])
def test_repairing_open_moves_the_damaged_file_aside_and_rebuilds(filled_db, tmp_path, how, capsys, monkeypatch):
    monkeypatch.setenv("XMCBENCH_HOME", str(filled_db.parent))  # the home database: even a destroyed header is ours
    if how == "data-block":
        _damage_a_data_block(filled_db)
    else:
        _damage(filled_db, how)
    damaged_bytes = filled_db.read_bytes()
    (filled_db.parent / "xmcbench.duckdb.wal").write_bytes(b"stale log of the damaged file")
    with Store.open(filled_db, repair=True) as store:
        report = store.ingest_dir(tmp_path / "runs")
        aside = store.moved_aside
        assert store.path == paths.default_db_path()
        assert aside is not None and aside.parent == filled_db.parent
        assert aside.name.startswith("xmcbench.duckdb.damaged-") and store.damage
        assert aside.read_bytes() == damaged_bytes  # kept as it was
        assert (aside.parent / (aside.name + ".wal")).read_bytes() == b"stale log of the damaged file"
        assert sorted(report.ingested) == ["run0", "run1", "run2"]
        assert {r["run_id"] for r in store.runs()} == {"run0", "run1", "run2"}
        store.verify()
    assert f"moved it to {aside}" in capsys.readouterr().err
    with Store.open(filled_db, repair=True) as store:  # sound now: left alone
        assert store.moved_aside is None


def test_lock_conflicts_are_told_apart_from_damage():
    from xmcbench.store.lock import is_lock_conflict

    assert is_lock_conflict(
        duckdb.IOException('Could not set lock on file "x": Conflicting lock is held in python (PID 1)')
    )
    assert not is_lock_conflict(
        duckdb.Error(
            "Corrupt database file: computed checksum 1 does not match stored checksum 2 in block at location 4096"
        )
    )
    assert not is_lock_conflict(
        duckdb.IOException(
            'Could not read enough bytes from file "x": attempted to read 4096 bytes from location 4096 (block)'
        )
    )


# -- failed writes ---------------------------------------------------------------------------

# A real write failure: the file-size limit makes the kernel refuse to grow the database or its
# log (EFBIG, "File too large"), as a full disk refuses with ENOSPC, in the middle of a commit.
FULL_DISK = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    from xmcbench.store import Store, DatabaseWriteError

    db, run_dir, record = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    with Store.open(db) as store:
        pass
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an error from write(), not a kill
    limit = os.path.getsize(db) + 4096
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    record["error"] = "x" * 1_000_000  # more than the limit lets the database grow
    try:
        Store(db).ingest_record(record, run_dir)
    except DatabaseWriteError as exc:
        print(exc)
        sys.exit(3)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="needs RLIMIT_FSIZE")
def test_a_write_that_the_disk_refuses_is_one_clear_error(tmp_path, record_factory, run_factory):
    record = record_factory("big-run")
    run_dir = run_factory(tmp_path / "runs", record)
    db = tmp_path / "results.duckdb"
    proc = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(db), str(run_dir), json.dumps(record)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr
    message = proc.stdout.strip()
    assert message.startswith(f"cannot write to the results database {db} (") and "File too large" in message
    assert f"the run directory {run_dir} still has the record, and `xmcbench ingest {run_dir}` will index it" in message
    assert "\n" not in message and (run_dir / "record.json").exists()
    with Store.open(db) as store:  # nothing half-written; the advice works
        assert store.runs() == []
        assert store.ingest_dir(run_dir).ingested == ["big-run"]


def test_a_database_below_a_regular_file_is_one_clear_write_error(tmp_path, record_factory):
    (tmp_path / "somefile").write_text("x")
    db = tmp_path / "somefile" / "results.duckdb"
    with pytest.raises(
        DatabaseWriteError,
        match=rf"cannot write to the results database {db} \({tmp_path / 'somefile'} is a file, not a folder\)",
    ):
        with Store.open(db):
            pass
    with pytest.raises(DatabaseWriteError, match=r"the run directory /some/run still has the record"):
        Store(db).ingest_record(record_factory("r1"), "/some/run")


def test_disk_full_at_the_lock_file_and_at_commit_name_the_run_directory(tmp_path, record_factory, monkeypatch):
    """Mocked failures (ENOSPC cannot be provoked portably): the lock file cannot be created; the commit fails."""
    import errno

    db = tmp_path / "results.duckdb"
    with Store.open(db) as store:
        pass

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(db) + ".lock")

    with monkeypatch.context() as m:
        m.setattr("xmcbench.store.lock.file_lock", full)
        with pytest.raises(
            DatabaseWriteError, match=r"No space left on device.*the run directory /r/1 still has the record"
        ):
            store.ingest_record(record_factory("r1"), "/r/1")

    _commits_fail_on_a_full_disk(monkeypatch)
    with pytest.raises(
        DatabaseWriteError,
        match=rf"cannot write to the results database {db} \(Failed to commit.*No space left on device\); the run directory /r/2",
    ):
        store.ingest_record(record_factory("r2"), "/r/2")
    monkeypatch.undo()
    assert store.runs() == []


# -- runs whose process is gone ----------------------------------------------------------------


def _running(record: dict, pid: int, host: str | None = None) -> dict:
    record["status"] = "running"
    record["finished_at"] = None
    record["provenance"].update(pid=pid, host=host or socket.gethostname())
    return record


@pytest.fixture
def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_running_run_whose_process_died_reads_as_interrupted(tmp_path, record_factory, dead_pid):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Store.open(tmp_path / "x.duckdb") as store:
            store.ingest_record(_running(record_factory("alive"), os.getpid()), None)
            store.ingest_record(_running(record_factory("elsewhere"), dead_pid, host="another-host"), None)
            store.ingest_record(_running(record_factory("killed-later"), sleeper.pid), None)  # indexed while alive
            store.ingest_record(_running(record_factory("dead"), dead_pid), None)
            sleeper.kill()
            sleeper.wait()
            status = {r["run_id"]: r["status"] for r in store.runs()}
            assert status == {
                "alive": "running",
                "elsewhere": "running",
                "killed-later": "interrupted",
                "dead": "interrupted",
            }
            assert {r["run_id"] for r in store.runs(status="running")} == {"alive", "elsewhere"}
            assert {r["run_id"] for r in store.runs(status="interrupted")} == {"killed-later", "dead"}
            run = store.get_run("killed-later")
            assert (
                run["status"] == "interrupted" and run["record"]["status"] == "running"
            )  # the record is not rewritten
    finally:
        sleeper.kill()
        sleeper.wait()


def test_ingest_indexes_a_dead_running_run_as_interrupted(tmp_path, record_factory, run_factory, dead_pid):
    runs = tmp_path / "runs"
    run_factory(runs, _running(record_factory("dead"), dead_pid))
    run_factory(runs, record_factory("done"))
    db = tmp_path / "x.duckdb"
    with Store.open(db) as store:
        report = store.ingest_dir(runs)
        assert sorted(report.ingested) == ["dead", "done"] and report.interrupted == ["dead"]
        again = store.ingest_dir(runs)  # already indexed as interrupted: not told again
        assert again.ingested == [] and again.interrupted == [] and len(again.skipped) == 2
    con = duckdb.connect(str(db), read_only=True)
    try:  # stored that way too, for whoever reads the database with SQL
        assert dict(con.execute("SELECT run_id, status FROM runs").fetchall()) == {
            "dead": "interrupted",
            "done": "finished",
        }
    finally:
        con.close()


def test_reingest_updates_a_run_that_died_after_it_was_indexed(tmp_path, record_factory, run_factory):
    runs = tmp_path / "runs"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run_factory(runs, _running(record_factory("r"), sleeper.pid))
        with Store.open(tmp_path / "x.duckdb") as store:
            assert store.ingest_dir(runs).ingested == ["r"]
            assert store.ingest_dir(runs).ingested == []  # unchanged
            sleeper.kill()
            sleeper.wait()
            report = store.ingest_dir(runs)
            assert report.ingested == ["r"] and report.interrupted == ["r"]  # same record, but its process is gone now
            assert store.runs()[0]["status"] == "interrupted"
            assert store.ingest_dir(runs).interrupted == []  # said once, when its state changed
    finally:
        sleeper.kill()
        sleeper.wait()


def test_permission_denied_is_a_clear_error_for_readers_and_writers(filled_db, record_factory, monkeypatch):
    """Mocked, because the tests may run as root (which no file mode stops): DuckDB refusing the file."""
    real_connect = duckdb.connect

    def denied(path, read_only=False):
        if read_only and "reads" not in denied.__dict__:
            return real_connect(path, read_only=True)
        raise duckdb.IOException(f'IO Error: Cannot open file "{path}": Permission denied')

    monkeypatch.setattr(duckdb, "connect", denied)
    with Store.open(filled_db, read_only=True) as store:  # a writer's refusal does not concern a reader
        assert len(store.runs()) == 3
    with pytest.raises(
        DatabaseWriteError,
        match=rf"cannot write to the results database {filled_db} \(Cannot open file: Permission denied\); the run directory /r/9",
    ):
        store = Store(filled_db)
        store.ingest_record(record_factory("r9"), "/r/9")
    denied.reads = False
    with pytest.raises(
        XmcbenchError,
        match=rf"cannot read the results database {filled_db} \(Cannot open file: Permission denied\); check its permissions",
    ):
        with Store.open(filled_db, read_only=True):
            pass


def test_repair_leaves_a_foreign_file_given_by_mistake_alone(tmp_path, filled_db):
    other = tmp_path / "results.csv"
    other.write_text("run,P@1\nx,1\n")
    with pytest.raises(XmcbenchError, match=rf"{other} is not a DuckDB database .* not touching it"):
        with Store.open(other, repair=True):
            pass
    for read_only in (True, False):  # DuckDB would open a .csv as an in-memory database: refused before that
        with pytest.raises(
            DamagedDatabaseError, match=rf"{other} is not a DuckDB database \(no DuckDB header\); give --db"
        ):
            with Store.open(other, read_only=read_only):
                pass
    assert other.read_text() == "run,P@1\nx,1\n" and sorted(
        p.name for p in tmp_path.iterdir() if p.name.startswith("results.csv")
    ) == ["results.csv", "results.csv.lock"]
    # a DuckDB file elsewhere, damaged past its header, is repaired
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(filled_db.read_bytes()[: filled_db.stat().st_size // 2])
    with Store.open(copy, repair=True) as store:
        assert store.moved_aside is not None and store.runs() == []


def test_an_empty_file_left_by_a_creation_cut_short_is_replaced_by_a_writer(tmp_path, record_factory):
    db = tmp_path / "results.duckdb"
    db.touch()
    with pytest.raises(NoDatabaseError, match=f"no results database at {db} yet: its creation was cut short"):
        with Store.open(db, read_only=True):
            pass
    with Store.open(db) as store:
        store.ingest_record(record_factory("r1"), None)
        assert [r["run_id"] for r in store.runs()] == ["r1"]


# The creation of a database under a file-size limit: DuckDB is refused (EFBIG, as a full disk
# refuses with ENOSPC) after writing the first ``limit`` bytes of it.
CUT_SHORT = textwrap.dedent(
    """
    import os, resource, signal, sys
    from xmcbench.store import Store, DatabaseWriteError

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
    try:
        with Store.open(sys.argv[1], runs_from=sys.argv[3]):
            pass
    except DatabaseWriteError as exc:
        print(exc)
        sys.exit(3)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="needs RLIMIT_FSIZE")
@pytest.mark.parametrize("limit", [4096, 8192])
def test_a_creation_cut_short_by_a_full_disk_is_no_database_and_a_writer_starts_afresh(tmp_path, record_factory, limit):
    db = tmp_path / "results.duckdb"
    runs = tmp_path / "my runs"
    proc = subprocess.run(
        [sys.executable, "-c", CUT_SHORT, str(db), str(limit), str(runs)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr  # one clear error, also when the failed commit ended the transaction
    message = proc.stdout.strip()
    assert message.startswith(f"cannot write to the results database {db} (") and "File too large" in message
    assert f"`xmcbench ingest {runs}` will index" in message and "Traceback" not in proc.stderr
    assert db.stat().st_size == limit  # the headers written before the disk was full
    for missing_ok in (False, True):  # readers: no database yet, not a damaged one
        try:
            with Store.open(db, read_only=True, missing_ok=missing_ok) as store:
                assert missing_ok and store.runs() == [] and store.schema_note() is None
        except NoDatabaseError as exc:
            assert not missing_ok and str(exc).startswith(
                f"no results database at {db} yet: its creation was cut short"
            )
    with Store.open(db, repair=True) as store:  # a writer starts a fresh one; nothing is set aside
        store.ingest_record(record_factory("r1"), None)
        assert [r["run_id"] for r in store.runs()] == ["r1"] and store.moved_aside is None
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("results")) == [
        "results.duckdb",
        "results.duckdb.lock",
    ]


def test_a_creation_whose_commit_the_disk_refuses_is_one_clear_error(tmp_path, monkeypatch):
    # DuckDB ends the transaction when its COMMIT fails, so a ROLLBACK then fails too
    _commits_fail_on_a_full_disk(monkeypatch, ends_transaction=True)
    db = tmp_path / "results.duckdb"
    runs = tmp_path / "runs"
    runs.mkdir()
    with pytest.raises(
        DatabaseWriteError,
        match=rf"cannot write to the results database {db} \(Failed to commit.*No space left on device\); the run "
        rf"directories in {runs} still have their records, and `xmcbench ingest {runs}` will index them",
    ):
        with Store.open(db, repair=True, runs_from=runs):
            pass


def test_a_short_file_with_a_write_ahead_log_is_never_deleted(tmp_path, filled_db):
    db = tmp_path / "short.duckdb"
    db.write_bytes(filled_db.read_bytes()[:4096])  # headers only, but its log may hold committed rows
    wal = tmp_path / "short.duckdb.wal"
    wal.write_bytes(b"rows not yet checkpointed")
    with pytest.raises(DamagedDatabaseError):
        with Store.open(db):
            pass
    assert db.read_bytes() == filled_db.read_bytes()[:4096] and wal.read_bytes() == b"rows not yet checkpointed"
    with Store.open(db, repair=True) as store:  # ingest keeps it, moved aside with its log
        assert store.moved_aside is not None
    assert store.moved_aside.read_bytes() == filled_db.read_bytes()[:4096]
    assert store.moved_aside.with_name(store.moved_aside.name + ".wal").read_bytes() == b"rows not yet checkpointed"


REPAIRER = textwrap.dedent(
    """
    import sys
    from xmcbench.store import Store

    with Store.open(sys.argv[1], repair=True, notify=lambda message: None) as store:
        report = store.ingest_dir(sys.argv[2])
    print(store.moved_aside is not None)
    """
)


def test_two_ingests_repairing_at_once_set_the_file_aside_once(filled_db, tmp_path):
    _damage_a_data_block(filled_db)  # found only by a full read, outside the lock: both see it
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", REPAIRER, str(filled_db), str(tmp_path / "runs")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [proc.communicate(timeout=120) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), results
    assert len([p for p in filled_db.parent.iterdir() if ".damaged-" in p.name and not p.name.endswith(".wal")]) == 1
    with Store.open(filled_db, read_only=True) as store:
        store.verify()
        assert {r["run_id"] for r in store.runs()} == {"run0", "run1", "run2"}


def _commits_fail_on_a_full_disk(monkeypatch, ends_transaction: bool = False) -> None:
    """Every writing connection's COMMIT fails as DuckDB's does when the disk is full."""
    real_connect = duckdb.connect

    class FullAtCommit:
        def __init__(self, con):
            self.con = con

        def execute(self, sql, *args):
            if sql == "COMMIT":
                if ends_transaction:
                    self.con.execute("ROLLBACK")
                raise duckdb.TransactionException(
                    'TransactionContext Error: Failed to commit: Could not write file "x.wal": No space left on device'
                )
            return self.con.execute(sql, *args)

        def close(self):
            self.con.close()

    monkeypatch.setattr(
        duckdb,
        "connect",
        lambda path, read_only=False: (
            real_connect(path, read_only=read_only) if read_only else FullAtCommit(real_connect(path))
        ),
    )
