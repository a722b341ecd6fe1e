"""A run killed after its record says finished but before the database learnt it.

``_attempt`` saves the finished record, then indexes it: a kill -9 between the two leaves the
database saying "running" (read as interrupted) behind a finished record. Reading the run
(``runs list`` / ``runs show``) or resuming it must bring the database up to date.
"""

import csv
import io
import json
import os
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from xmcbench.cli import app
from xmcbench.errors import XmcbenchError
from xmcbench.run import run_recipe
from xmcbench.store import DatabaseWriteError, Store
from xmcbench.store.record import read_record

RECIPE = """
name: killed
dataset: {name: synth-killed, synthetic: {labels: 60, train: 200, test: 40, seed: 1}}
supervision: {mode: zero_shot}
method: {name: tfidf}
evaluation: {k: [1, 3], top_k: 5, bootstrap: 0, groups: false}
hardware: {devices: cpu}
"""

cli = CliRunner()


def killed_before_indexing(tmp_path):
    """Run a recipe in a process SIGKILLed right where the finished record would be indexed."""
    recipe, db, runs = tmp_path / "killed.yaml", tmp_path / "r.duckdb", tmp_path / "runs"
    recipe.write_text(RECIPE)
    script = textwrap.dedent(f"""
        import os, signal
        from xmcbench.run import runner
        from xmcbench.run.check import load_recipe

        def killed(self, record):  # the record.json on disk already says finished
            os.kill(os.getpid(), signal.SIGKILL)

        runner._Indexer.index_finally = killed
        runner.run_recipe(load_recipe({str(recipe)!r}), db={str(db)!r}, runs_dir={str(runs)!r}, progress=False)
    """)
    done = subprocess.run([sys.executable, "-c", script], env=os.environ, capture_output=True, text=True)
    assert done.returncode == -9, done.stderr
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    assert read_record(run_dir)["status"] == "finished"
    with Store.open(db, read_only=True) as store:
        (row,) = store.runs()
        assert row["status"] == "interrupted"  # the defect: the database is behind the record
    return db, runs, run_dir


def listed(db):
    result = cli.invoke(app, ["runs", "list", "--db", str(db), "-f", "csv"])
    assert result.exit_code == 0, result.output
    return result, list(csv.DictReader(io.StringIO(result.stdout)))


def test_listing_indexes_a_run_killed_after_its_finished_record(tmp_path):
    db, _, run_dir = killed_before_indexing(tmp_path)
    result, rows = listed(db)
    assert [r["status"] for r in rows] == ["finished"]
    assert "indexed it now" in result.stderr
    with Store.open(db, read_only=True) as store:
        run = store.get_run(run_dir.name)
        assert run["status"] == run["record"]["status"] == "finished"
        assert [r["run_id"] for r in store.best_runs("synth-killed")] == [run_dir.name]  # what `table` shows
        recipe_hash = run["record"]["provenance"]["recipe_hash"]
        assert [r["run_id"] for r in store.finished_with_recipe(recipe_hash)] == [run_dir.name]  # what a sweep skips
    result, rows = listed(db)
    assert [r["status"] for r in rows] == ["finished"] and "note" not in result.stderr  # said once, written once
    # the --status filter sees the run as it is now, not as the database had it
    result = cli.invoke(app, ["runs", "list", "--db", str(db), "-f", "csv", "--status", "finished"])
    assert run_dir.name in result.stdout


def test_show_and_resume_index_it_too(tmp_path):
    db, runs, run_dir = killed_before_indexing(tmp_path)
    shown = cli.invoke(app, ["runs", "show", run_dir.name, "--db", str(db), "-f", "json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["status"] == data["recorded_status"] == "finished"

    with Store.open(db) as store:  # back into the killed state, for the resume
        record = read_record(run_dir)
        store.ingest_record({**record, "status": "failed", "error": "x"}, run_dir)
    with pytest.raises(XmcbenchError, match="already finished; nothing to resume; its record is indexed in"):
        run_recipe(None, resume=run_dir.name, runs_dir=runs, db=db, progress=False)
    with Store.open(db, read_only=True) as store:
        assert store.get_run(run_dir.name)["status"] == "finished"


def test_a_database_that_cannot_be_written_now_names_the_ingest(tmp_path, monkeypatch):
    db, _, run_dir = killed_before_indexing(tmp_path)

    def cannot_write(self, record, folder):
        raise DatabaseWriteError("cannot write to the results database (No space left on device)")

    monkeypatch.setattr(Store, "ingest_record", cannot_write)
    result, rows = listed(db)
    assert [r["status"] for r in rows] == ["interrupted"]  # as the database has it; the note says why
    assert f"xmcbench ingest {run_dir}" in result.stderr and "No space left" in result.stderr


def test_the_table_and_a_sweep_index_it_too(tmp_path):
    """`xmcbench table` shows it (it reads the database only), and a sweep of the same recipe skips it."""
    db, _, run_dir = killed_before_indexing(tmp_path)
    shown = cli.invoke(app, ["table", "--dataset", "synth-killed", "--db", str(db), "-f", "csv"])
    assert shown.exit_code == 0, shown.output
    assert run_dir.name in shown.stdout and "indexed it now" in shown.stderr

    from xmcbench.store.heal import index_finished
    from xmcbench.sweep import _earlier_runs
    from xmcbench.sweep.plan import expand

    (tmp_path / "again").mkdir()
    db2, _, run_dir2 = killed_before_indexing(tmp_path / "again")
    plan = expand([str(tmp_path / "again" / "killed.yaml")])
    earlier = _earlier_runs(plan, db2, force=False)
    assert [r["run_id"] for runs in earlier.values() for r in runs] == [run_dir2.name]
    with Store.open(db2, read_only=True) as store:
        assert index_finished(store, store.runs()) == []  # nothing behind any more
