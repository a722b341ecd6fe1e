"""A sweep given secrets (a URL password, a token, a secret environment value) keeps none of them:
not in its record, its logs, the database's sweeps table, nor what --status and table --sweep print.
The runs themselves still get the real values (they need them to download)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from xmcbench import paths
from xmcbench.cli import app
from xmcbench.store import Store
from xmcbench.store.record import read_record
from xmcbench.sweep import SweepError, SweepRecord, expand
from xmcbench.sweep.launch import outcome
from xmcbench.sweep.record import sweep_folder, sweep_path

URL_PASSWORD = "pw12345678"
HUB_TOKEN = "hf_secretXXXX"
ENV_SECRET = "zz-env-secret-42"  # no token shape: only the environment says it is a secret
SECRETS = ("pw12345678", "secretXXXX", ENV_SECRET)

runner = CliRunner()


def _invoke(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def test_a_sweeps_record_logs_rows_and_status_hold_no_secret(recipes, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", ENV_SECRET)
    source = f"https://alice:{URL_PASSWORD}@mirror.example/x.tar.gz"
    args = [
        str(recipes / "tfidf-a.yaml"),
        "--set",
        f"description={HUB_TOKEN} {ENV_SECRET}",
        "--grid",
        f"dataset.source={source}",  # a grid value is part of the run's name too
        "--gpus",
        "none",
    ]
    dry = _invoke("sweep", *args, "--dry-run")
    assert dry.exit_code == 0 and "***" in dry.output and not _leaks(dry.output), dry.output
    result = _invoke("sweep", *args)
    assert result.exit_code == 0, result.output
    assert not _leaks(result.output)

    plan = expand([str(recipes / "tfidf-a.yaml")], sets=[args[2]], grid=[args[4]])
    files = [sweep_path(plan.sweep_id), *(p for p in sweep_folder(plan.sweep_id).rglob("*") if p.is_file())]
    assert any(p.suffix == ".log" for p in files)
    for path in files:
        assert not _leaks(path.read_text(encoding="utf-8", errors="replace")), path
    with Store.open(read_only=True) as store:
        rows = store.sweep_runs(plan.sweep_id)
    assert rows and not _leaks(repr(rows))

    status = _invoke("sweep", "--status", plan.sweep_id)
    table = _invoke("table", "--sweep", plan.sweep_id, "--format", "csv")
    assert status.exit_code == 0 and table.exit_code == 0, status.output + table.output
    assert "source=https://***@mirror.example" in table.stdout  # the run is still named by its value
    assert not _leaks(status.output + table.output)

    # the run was given the real values: the recipe it ran hashes as the plan's, not as a masked one
    entry = SweepRecord.load(plan.sweep_id).entries[0]
    assert entry["status"] == "finished"
    run = read_record(paths.runs_dir() / entry["run_id"])
    assert run["provenance"]["recipe_hash"] == plan.runs[0].recipe_hash


def test_a_runs_error_quoting_a_secret_is_masked(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", ENV_SECRET)
    log = tmp_path / "run.log"
    log.write_text(f"error: cannot download https://alice:{URL_PASSWORD}@mirror.example/x.tar.gz with {ENV_SECRET}\n")
    reason = outcome(tmp_path / "runs", "missing-run", 1, log)["error"]
    assert "https://***@mirror.example/x.tar.gz" in reason and not _leaks(reason)


def test_grid_values_differing_only_in_a_secret_are_refused(recipes):
    with pytest.raises(SweepError, match="would share one name"):
        expand([str(recipes / "tfidf-a.yaml")], grid=["description=hf_aaaaaaaa1111,hf_bbbbbbbb2222"])
