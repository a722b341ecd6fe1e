"""``xmcbench sweep`` and ``xmcbench table --sweep`` as a user types them."""

from __future__ import annotations

from sweep_helpers import write_recipe
from typer.testing import CliRunner

from xmcbench.cli import app

runner = CliRunner()


def _invoke(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_a_sweep_then_its_table_shows_every_seed(recipes):
    result = _invoke("sweep", str(recipes / "tfidf-a.yaml"), "--seeds", "0,1", "--jobs", "2", "--gpus", "none")
    assert result.exit_code == 0, result.output
    assert "2 finished" in result.stdout
    table = _invoke("table", "--sweep", "latest", "--format", "csv")
    assert table.exit_code == 0, table.output
    assert "tfidf-a seed=0" in table.stdout and "tfidf-a seed=1" in table.stdout
    status = _invoke("sweep", "--status", "latest")
    assert status.exit_code == 0 and "2 finished" in status.stdout


def test_a_run_below_its_floor_fails_the_sweep_and_says_which(tmp_path):
    recipe = write_recipe(tmp_path, "too-hopeful", expect={"P@1": ">= 99"})
    result = _invoke("sweep", str(recipe), "--gpus", "none")
    assert result.exit_code == 1
    assert "too-hopeful" in result.output and "expected >= 99" in result.output


def test_status_and_table_of_an_unknown_sweep_say_so():
    result = _invoke("sweep", "--status", "sweep-0000000000")
    assert result.exit_code == 1 and "no sweep 'sweep-0000000000'" in result.output
    assert _invoke("table", "--sweep", "latest").exit_code == 1


def test_no_recipes_is_an_error_that_says_what_to_give():
    result = _invoke("sweep")
    assert result.exit_code == 2 and "give recipe files" in result.output  # a usage error, as click's
    with_status = _invoke("sweep", "recipes/smoke/tfidf.yaml", "--status", "latest")
    assert with_status.exit_code == 2 and "give no recipes with it" in with_status.output


def test_status_of_a_sweep_killed_outright_says_interrupted_not_queued(recipes, tmp_path):
    """SIGKILL gives a sweep no chance to write how its runs ended: --status tells from the sweep's lock
    (held while it runs) that its queued runs will not start by themselves."""
    from xmcbench import paths
    from xmcbench.sweep import SweepRecord, expand
    from xmcbench.sweep.record import sweep_lock

    plan = expand([recipes / "tfidf-a.yaml"], seeds="0,1")
    SweepRecord.open(plan, command="xmcbench sweep", launcher="local", runs_dir=paths.runs_dir(), db=tmp_path / "db")
    with sweep_lock(plan.sweep_id):  # a live sweep: its queued runs are queued
        live = _invoke("sweep", "--status", plan.sweep_id)
    assert live.exit_code == 0 and "queued" in live.output and "interrupted" not in live.output
    dead = _invoke("sweep", "--status", plan.sweep_id)
    assert dead.exit_code == 0 and "interrupted" in dead.output and "queued" not in dead.output, dead.output
    assert "the same sweep command resumes it" in dead.output
    assert [e["status"] for e in SweepRecord.load(plan.sweep_id).entries] == [
        "queued",
        "queued",
    ]  # shown, not rewritten


def test_status_only_looks_at_the_sweeps_lock(recipes, tmp_path, monkeypatch):
    """--status works on a read-only home: it never creates the lock file, and a lock it cannot
    open leaves the runs as recorded instead of guessing."""
    from xmcbench import paths
    from xmcbench.sweep import SweepRecord, expand
    from xmcbench.sweep import record as sweep_record

    plan = expand([recipes / "tfidf-a.yaml"], seeds="0,1")
    SweepRecord.open(plan, command="xmcbench sweep", launcher="local", runs_dir=paths.runs_dir(), db=tmp_path / "db")
    lock = sweep_record._lock_path(plan.sweep_id)
    lock.unlink(missing_ok=True)
    shown = _invoke("sweep", "--status", plan.sweep_id)
    assert shown.exit_code == 0 and "interrupted" in shown.output and not lock.exists()
    lock.touch()
    real_open = sweep_record.os.open

    def refused(path, flags, *args):
        if str(path) == str(lock):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(sweep_record.os, "open", refused)
    unknown = _invoke("sweep", "--status", plan.sweep_id)
    assert unknown.exit_code == 0 and "queued" in unknown.output and "interrupted" not in unknown.output
