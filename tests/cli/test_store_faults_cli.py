"""Read commands that must not write, damaged and missing databases, dead runs: as the CLI shows them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xmcbench import paths
from xmcbench.cli import app
from xmcbench.store.record import new_record, write_record

runner = CliRunner()
WIDE = {"COLUMNS": "250"}
DATASET = "LF-AmazonTitles-131K"


def _write_run(root: Path, run_id: str, status: str = "finished", pid: int | None = None) -> Path:
    record = new_record(
        run_id,
        task={"dataset": DATASET, "dataset_version": "v1", "split": "test", "n_queries": 10, "n_queries_evaluated": 10},
        model={"method": "tfidf"},
        provenance={"pid": pid, "host": socket.gethostname()} if pid else {},
    )
    record["status"] = status
    if status == "finished":
        record["scores"] = [{"name": "P@1", "value": 41.25}]
    write_record(root / run_id, record)
    return root / run_id


@pytest.fixture
def runs_dir(tmp_path) -> Path:
    root = tmp_path / "runs"
    _write_run(root, "run-a")
    _write_run(root, "run-b")
    return root


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def _one_line_error(result, *parts: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for part in parts:
        assert part in result.output, result.output


READ_COMMANDS = [["runs", "list"], ["runs", "show", "run-a"], ["compare", "run-a", "run-b"]]


@pytest.mark.parametrize("command", READ_COMMANDS)
def test_read_commands_without_a_database_say_so_and_create_nothing(command, tmp_path):
    home = paths.home()
    result = runner.invoke(app, command, env=WIDE)
    _one_line_error(
        result, f"no results database at {paths.default_db_path()}; run a recipe or `xmcbench ingest DIR` first"
    )
    assert not home.exists()

    typo = tmp_path / "typo" / "results.duckdb"  # a mistyped --db: reported, never made
    result = runner.invoke(app, [*command, "--db", str(typo)], env=WIDE)
    _one_line_error(result, f"no results database at {typo}")
    assert not typo.parent.exists()


def test_table_without_a_database_shows_the_published_numbers(tmp_path):
    result = runner.invoke(app, ["table", "-d", DATASET, "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert "dexml:" in result.stdout and "no results database at" in result.stderr
    assert not paths.home().exists()
    result = runner.invoke(app, ["table", "-d", DATASET, "--db", str(tmp_path / "typo.duckdb")])
    _one_line_error(result, f"no results database at {tmp_path / 'typo.duckdb'}")
    assert not (tmp_path / "typo.duckdb").exists()


def test_read_commands_write_nothing(runs_dir):
    assert runner.invoke(app, ["ingest", str(runs_dir)]).exit_code == 0
    (paths.default_db_path().parent / "xmcbench.duckdb.lock").unlink(missing_ok=True)
    before = _listing(paths.home())
    for command in (
        ["runs", "list"],
        ["runs", "show", "run-a"],
        ["table", "-d", DATASET, "--format", "json"],
        ["runs", "list", "--status", "finished"],
    ):
        result = runner.invoke(app, command, env=WIDE)
        assert result.exit_code == 0, result.output
    assert _listing(paths.home()) == before  # no lock file, no log, no migration, same bytes


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes through a read-only mode")
def test_read_commands_work_in_a_read_only_home(runs_dir):
    assert runner.invoke(app, ["ingest", str(runs_dir)]).exit_code == 0
    home = paths.home()
    os.chmod(home, 0o555)
    try:
        assert runner.invoke(app, ["runs", "list"], env=WIDE).exit_code == 0
        assert runner.invoke(app, ["table", "-d", DATASET]).exit_code == 0
    finally:
        os.chmod(home, 0o755)


def test_status_must_be_a_known_one():
    from xmcbench.cli.runs import RunStatus
    from xmcbench.store.record import STATUSES

    assert tuple(s.value for s in RunStatus) == STATUSES
    result = runner.invoke(app, ["runs", "list", "--status", "finishd"])
    assert result.exit_code == 2
    assert "'finishd' is not one of" in result.output
    for status in ("running", "finished", "failed", "interrupted"):
        assert status in result.output


def test_db_below_a_file_or_a_directory_is_one_line(tmp_path):
    (tmp_path / "somefile").write_text("x")
    _one_line_error(
        runner.invoke(app, ["runs", "list", "--db", str(tmp_path / "somefile" / "db")]), "no results database at"
    )
    _one_line_error(
        runner.invoke(app, ["runs", "list", "--db", str(tmp_path)]), "is a directory, not a results database file"
    )
    _one_line_error(
        runner.invoke(app, ["ingest", str(tmp_path), "--db", str(tmp_path / "somefile" / "db")]),
        "cannot write to the results database",
        "is a file, not a folder",
    )


def test_a_damaged_database_is_one_line_and_ingest_rebuilds_it(runs_dir):
    assert runner.invoke(app, ["ingest", str(runs_dir)]).exit_code == 0
    db = paths.default_db_path()
    with open(db, "r+b") as fh:
        fh.truncate(db.stat().st_size // 3)
    damaged = db.read_bytes()
    for command in (
        ["runs", "list"],
        ["runs", "show", "run-a"],
        ["table", "-d", DATASET],
        ["compare", "run-a", "run-b"],
    ):
        _one_line_error(
            runner.invoke(app, command, env=WIDE), f"the results database {db} is damaged", "xmcbench ingest"
        )

    result = runner.invoke(app, ["ingest", str(runs_dir)], env=WIDE)
    assert result.exit_code == 0, result.output
    aside = [p for p in db.parent.iterdir() if p.name.startswith("xmcbench.duckdb.damaged-")]
    assert len(aside) == 1 and aside[0].read_bytes() == damaged
    assert "2 ingested" in result.stdout and str(aside[0]) in result.stderr and "rebuilt" in result.stderr
    listed = runner.invoke(app, ["runs", "list"], env=WIDE)
    assert listed.exit_code == 0 and "run-a" in listed.output and "run-b" in listed.output


def test_a_killed_run_shows_as_interrupted(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    root = tmp_path / "runs"
    _write_run(root, "run-dead", status="running", pid=proc.pid)
    _write_run(root, "run-live", status="running", pid=os.getpid())
    result = runner.invoke(app, ["ingest", str(root)])
    assert result.exit_code == 0 and "1 run(s) recorded as running whose process is gone" in result.output
    again = runner.invoke(app, ["ingest", str(root)])  # nothing changed: nothing to tell again
    assert again.exit_code == 0 and "process is gone" not in again.output and "0 ingested, 2 skipped" in again.output
    listed = runner.invoke(app, ["runs", "list", "--status", "interrupted"], env=WIDE)
    assert "run-dead" in listed.output and "run-live" not in listed.output
    listed = runner.invoke(app, ["runs", "list", "--status", "running"], env=WIDE)
    assert "run-live" in listed.output and "run-dead" not in listed.output
    shown = runner.invoke(app, ["runs", "show", "run-dead"], env=WIDE)
    assert (
        shown.exit_code == 0
        and "interrupted" in shown.output
        and "running" not in shown.output.splitlines()[0].replace("recorded as running", "")
    )


def test_an_older_database_is_read_with_a_note_and_not_migrated(tmp_path):
    import duckdb

    from xmcbench.store.schema import migrate

    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    migrate(con, str(db), target=1)
    con.execute(
        "INSERT INTO runs (run_id, record_schema, status, dataset, split, method, record_sha256, record_json, ingested_at) "
        f"VALUES ('old-run', 1, 'finished', '{DATASET}', 'test', 'tfidf', 'x', '{{}}', now()::TIMESTAMP)"
    )
    con.close()
    before = db.read_bytes()
    result = runner.invoke(app, ["runs", "list", "--db", str(db)], env=WIDE)
    assert result.exit_code == 0 and "old-run" in result.stdout and "schema version 1" in result.stderr
    result = runner.invoke(app, ["table", "-d", DATASET, "--db", str(db), "--format", "json"])
    assert result.exit_code == 0 and "old-run" in result.stdout
    assert db.read_bytes() == before and not (tmp_path / "old.duckdb.lock").exists()


def test_ingest_when_the_disk_is_full_is_one_line(runs_dir, monkeypatch):
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    assert runner.invoke(app, ["ingest", str(runs_dir)]).exit_code == 0
    _write_run(runs_dir, "run-c")
    monkeypatch.setattr("xmcbench.store.lock.file_lock", full)
    result = runner.invoke(app, ["ingest", str(runs_dir)])
    _one_line_error(
        result,
        f"cannot write to the results database {paths.default_db_path()} (No space left on device)",
        f"the run directories in {runs_dir} still have their records, and `xmcbench ingest {runs_dir}` will index them",
    )


def test_a_broken_leaderboard_file_does_not_hide_the_runs(runs_dir, tmp_path, monkeypatch):
    import shutil

    from xmcbench.leaderboard import reference_dir

    folder = tmp_path / "leaderboard"
    shutil.copytree(reference_dir(), folder)
    next(folder.glob("*.yaml")).write_text("rows: [unclosed\n")
    monkeypatch.setenv("XMCBENCH_LEADERBOARD_DIR", str(folder))
    assert runner.invoke(app, ["ingest", str(runs_dir)]).exit_code == 0  # warns, still ingests
    result = runner.invoke(app, ["table", "-d", DATASET, "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert (
        "tfidf,full,run-" in result.stdout
        and "published results not shown" in result.stderr
        and "not valid YAML" in result.stderr
    )


def _limit_file_size():
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an error from write(), as a full disk gives, not a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))


@pytest.mark.skipif(sys.platform == "win32", reason="needs RLIMIT_FSIZE")
def test_ingest_into_a_db_the_disk_cannot_hold_names_the_folder_given(runs_dir, tmp_path):
    db = tmp_path / "elsewhere" / "results.duckdb"
    db.parent.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "xmcbench", "ingest", str(runs_dir), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=_limit_file_size,
        env={**os.environ, **WIDE},
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot write to the results database {db} (")
    assert f"the run directories in {runs_dir} still have their records, and `xmcbench ingest {runs_dir}`" in lines[0]
    assert str(paths.runs_dir()) not in proc.stderr
    # what the disk cut short reads as no database yet, and the next ingest starts it afresh
    result = runner.invoke(app, ["runs", "list", "--db", str(db)], env=WIDE)
    _one_line_error(result, f"no results database at {db} yet: its creation was cut short")
    result = runner.invoke(app, ["ingest", str(runs_dir), "--db", str(db)], env=WIDE)
    assert result.exit_code == 0 and "2 ingested" in result.stdout and "damaged" not in result.output
    assert sorted(p.name for p in db.parent.iterdir()) == ["results.duckdb", "results.duckdb.lock"]
