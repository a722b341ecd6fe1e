"""``xmcbench ingest``, ``xmcbench runs list`` and ``xmcbench runs show``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xmcbench.cli import app
from xmcbench.store.record import new_record, write_record

runner = CliRunner()
WIDE = {"COLUMNS": "250"}


def _write_run(root: Path, run_id: str, method: str, dataset: str, status: str = "finished") -> Path:
    record = new_record(
        run_id,
        task={
            "dataset": dataset,
            "dataset_version": "v1",
            "split": "test",
            "n_queries": 250,
            "n_queries_evaluated": 250,
            "n_labels": 200,
            "propensity_a": 0.55,
            "propensity_b": 1.5,
            "filter": "filter_labels_test.txt",
        },
        model={
            "method": method,
            "encoder": "all-MiniLM-L6-v2",
            "params_total": 22_700_000,
            "params_trainable": 22_700_000,
        },
        provenance={
            "xmcbench_version": "0.1.0",
            "git_commit": "0123abcd",
            "recipe_hash": "f" * 64,
            "seed": 7,
            "command": "xmcbench run recipes/x.yaml",
            "packages": {"torch": "2.13.0", "numpy": "2.1.0"},
        },
    )
    record["status"] = status
    if status == "failed":
        record["error"] = "RuntimeError: CUDA out of memory"
    else:
        record["scores"] = [
            {"name": "P@1", "value": 41.25, "ci_lo": 40.5, "ci_hi": 42.0},
            {"name": "PSP@5", "value": 30.125, "ci_lo": 29.5, "ci_hi": 30.75},
        ]
        record["groups"] = {"head": {"P@1": 55.5}, "tail": {"P@1": 12.25}}
    record["compute"] = {
        "device_type": "cuda",
        "device_names": ["NVIDIA H100 80GB HBM3"] * 2,
        "device_count": 2,
        "wall_time_s": {"prepare": 3.0, "train": 1800.0, "predict": 60.0, "evaluate": 2.0},
        "gpu_hours": 1.0333,
        "peak_gpu_mem_gb": 61.5,
    }
    record["accounting"] = {
        "batch_size": 1024,
        "pool_size_mean": 10240.0,
        "pool_size_max": 10300,
        "refresh_interval": 5,
    }
    write_record(root / run_id, record)
    return root / run_id


@pytest.fixture
def runs_dir(tmp_path) -> Path:
    root = tmp_path / "runs"
    _write_run(root, "20261121-101500-dexml-synth-a1b2c3", "dexml", "synth-test")
    _write_run(root, "20261121-111500-tfidf-synth-d4e5f6", "tfidf", "synth-test")
    _write_run(root, "20261121-121500-dexml-other-0a0b0c", "dexml", "other", status="failed")
    return root


def test_ingest_then_list(runs_dir):
    result = runner.invoke(app, ["ingest", str(runs_dir)])
    assert result.exit_code == 0, result.output
    assert "3 ingested, 0 skipped, 0 bad" in result.output

    result = runner.invoke(app, ["runs", "list"], env=WIDE)
    assert result.exit_code == 0, result.output
    for run_id in (
        "20261121-101500-dexml-synth-a1b2c3",
        "20261121-111500-tfidf-synth-d4e5f6",
        "20261121-121500-dexml-other-0a0b0c",
    ):
        assert run_id in result.output
    assert "41.25" in result.output and "failed" in result.output

    only = runner.invoke(app, ["runs", "list", "--dataset", "SYNTH-TEST", "--method", "dexml"], env=WIDE)
    assert "a1b2c3" in only.output and "d4e5f6" not in only.output and "0a0b0c" not in only.output
    failed = runner.invoke(app, ["runs", "list", "--status", "failed"], env=WIDE)
    assert "0a0b0c" in failed.output and "a1b2c3" not in failed.output
    none = runner.invoke(app, ["runs", "list", "--method", "prime"], env=WIDE)
    assert none.exit_code == 0 and "no runs in" in none.output


def test_ingest_reports_a_damaged_record_and_continues(runs_dir, tmp_path):
    (runs_dir / "20261121-111500-tfidf-synth-d4e5f6" / "record.json").write_text('{"run_id": ')
    db = tmp_path / "elsewhere.duckdb"
    result = runner.invoke(app, ["ingest", str(runs_dir), "--db", str(db)], env=WIDE)
    assert result.exit_code == 1
    assert "2 ingested, 0 skipped, 1 bad" in result.output
    assert "d4e5f6" in result.output and "invalid JSON" in result.output
    listed = runner.invoke(app, ["runs", "list", "--db", str(db)], env=WIDE)
    assert "a1b2c3" in listed.output and "d4e5f6" not in listed.output

    again = runner.invoke(
        app, ["ingest", str(runs_dir / "20261121-101500-dexml-synth-a1b2c3"), "--db", str(db)], env=WIDE
    )
    assert again.exit_code == 0 and "0 ingested, 1 skipped, 0 bad" in again.output


def test_show_by_prefix_prints_the_whole_record(runs_dir):
    runner.invoke(app, ["ingest", str(runs_dir)])
    result = runner.invoke(app, ["runs", "show", "20261121-1015"], env=WIDE)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "20261121-101500-dexml-synth-a1b2c3" in out and "finished" in out
    assert "synth-test" in out and "filter_labels_test.txt" in out and "0.55" in out  # task
    assert "41.25" in out and "40.50 – 42.00" in out and "55.50" in out and "12.25" in out  # scores, CI, head/tail
    assert "NVIDIA H100 80GB HBM3" in out and "wall train (s)" in out and "1,800" in out and "61.5" in out  # compute
    assert "batch_size" in out and "1,024" in out and "10,240" in out  # accounting
    assert "0123abcd" in out and "torch 2.13.0" in out and "xmcbench run recipes/x.yaml" in out  # provenance

    failed = runner.invoke(app, ["runs", "show", "20261121-1215"], env=WIDE)
    assert failed.exit_code == 0 and "CUDA out of memory" in failed.output


def test_show_errors(runs_dir):
    runner.invoke(app, ["ingest", str(runs_dir)])
    ambiguous = runner.invoke(app, ["runs", "show", "20261121"])
    assert ambiguous.exit_code == 1 and "matches 3 runs" in ambiguous.output
    missing = runner.invoke(app, ["runs", "show", "nope"])
    assert missing.exit_code == 1 and "no run 'nope'" in missing.output


def test_ingest_missing_directory(tmp_path):
    result = runner.invoke(app, ["ingest", str(tmp_path / "nope")])
    assert result.exit_code == 1 and "no such directory" in result.output


@pytest.mark.parametrize("fmt, first_line", [("csv", "run_id,status,dataset"), ("markdown", "| run_id | status |")])
def test_an_empty_listing_still_has_its_header(tmp_path, fmt, first_line):
    (tmp_path / "empty").mkdir()
    assert runner.invoke(app, ["ingest", str(tmp_path / "empty")]).exit_code == 0
    result = runner.invoke(app, ["runs", "list", "--format", fmt])
    assert result.exit_code == 0 and result.stdout.startswith(first_line)


@pytest.mark.parametrize(
    "content",
    [
        b'5\n[1]\n{"epoch": 1, "loss": "abc"}\n{"epoch": 2, "loss": 0.5}\n{"epoch": 3, "loss": 0.25}\n',
        b'{"epoch": 1, "loss": 1.0, "lr": "x", "elapsed_s": true}\n{"epoch": 2, "loss": 0.5}\n',
        b"\xff\xfe\x00garbage\n",
    ],
)
def test_show_survives_a_damaged_train_log(runs_dir, content):
    run_dir = runs_dir / "20261121-101500-dexml-synth-a1b2c3"
    (run_dir / "train_log.jsonl").write_bytes(content)
    assert runner.invoke(app, ["ingest", str(runs_dir)]).exit_code == 0
    result = runner.invoke(app, ["runs", "show", "20261121-1015"], env=WIDE)
    assert result.exit_code == 0, result.output
    as_json = runner.invoke(app, ["runs", "show", "20261121-1015", "--format", "json"])
    assert as_json.exit_code == 0 and all(isinstance(e, dict) for e in json.loads(as_json.stdout)["train_log"])


def test_ingest_of_the_folder_above_the_runs_points_at_them(runs_dir):
    result = runner.invoke(app, ["ingest", str(runs_dir.parent)])
    assert result.exit_code == 0 and "0 ingested" in result.stdout
    assert f"`xmcbench ingest {runs_dir}`" in result.stderr
    assert "note:" not in runner.invoke(app, ["ingest", str(runs_dir)]).stderr


def test_show_piped_keeps_hashes_and_paths_whole(runs_dir):
    """Piped (a file, `| grep`), each section is printed at its full width: the recipe hash and the
    packages line are one line each, whatever the terminal's width was."""
    runner.invoke(app, ["ingest", str(runs_dir)])
    result = runner.invoke(app, ["runs", "show", "20261121-1015"], env={"COLUMNS": "60"})
    assert result.exit_code == 0, result.output
    assert any("f" * 64 in line for line in result.stdout.splitlines())
    assert any("numpy 2.1.0, torch 2.13.0" in line for line in result.stdout.splitlines())
