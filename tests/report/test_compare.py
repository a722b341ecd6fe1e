"""Paired comparison of two runs over a synthetic dataset (library and ``xmcbench compare``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner

from xmcbench import metrics
from xmcbench.cli import app
from xmcbench.data import load_dataset
from xmcbench.errors import XmcbenchError
from xmcbench.report.compare import compare_runs
from xmcbench.store import Store
from xmcbench.store.record import EVAL_ROWS_FILE, PREDICTIONS_FILE, new_record, write_record

K = 5


def _predictions(truth: sp.csr_matrix, hit_rate: float, seed: int) -> sp.csr_matrix:
    """Top-5 scores per query: each slot is a true label with probability ``hit_rate``, else random."""
    rng = np.random.default_rng(seed)
    n, m = truth.shape
    rows, cols = [], []
    for i in range(n):
        positives = list(truth.indices[truth.indptr[i] : truth.indptr[i + 1]])
        rng.shuffle(positives)
        chosen: list[int] = []
        while len(chosen) < K:
            label = positives.pop() if positives and rng.random() < hit_rate else int(rng.integers(m))
            if label not in chosen:
                chosen.append(label)
        rows += [i] * K
        cols += chosen
    scores = np.tile(np.linspace(1.0, 0.5, K), n)  # ranked in the order chosen
    return sp.csr_matrix((scores, (rows, cols)), shape=(n, m))


@pytest.fixture
def dataset(synth_dataset):
    return load_dataset(synth_dataset.name, progress=False)


def _run(
    root: Path, store: Store, run_id: str, ds, preds: sp.csr_matrix, rows: np.ndarray | None = None, **task
) -> str:
    record = new_record(
        run_id,
        task={
            "dataset": ds.name,
            "dataset_version": ds.version,
            "split": "test",
            "n_queries": ds.labels("test").shape[0],
            "n_queries_evaluated": preds.shape[0],
            "n_labels": ds.n_labels,
            "propensity_a": ds.spec.propensity_a,
            "propensity_b": ds.spec.propensity_b,
            "filter": "filter_labels_test.txt",
            **task,
        },
        model={"method": run_id},
    )
    record["status"] = "finished"
    record["scores"] = [{"name": name, "value": 0.0} for name in ("P@1", "P@5", "nDCG@3", "PSP@5")]
    write_record(root / run_id, record)
    sp.save_npz(root / run_id / PREDICTIONS_FILE, preds)
    if rows is not None:
        np.save(root / run_id / EVAL_ROWS_FILE, rows)
    store.ingest_record(record, root / run_id)
    return run_id


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "results.duckdb") as store:
        yield store


def test_difference_matches_independent_evaluation(tmp_path, store, dataset):
    truth = dataset.labels("test")
    good, bad = _predictions(truth, 0.9, seed=1), _predictions(truth, 0.2, seed=2)
    _run(tmp_path, store, "run-good", dataset, good)
    _run(tmp_path, store, "run-bad", dataset, bad)

    result = compare_runs(store, "run-g", "run-b", n_boot=300, seed=0)  # prefixes work
    assert (result.run_a, result.run_b, result.n_queries) == ("run-good", "run-bad", truth.shape[0])
    assert [row.name for row in result.rows] == ["P@1", "P@5", "nDCG@3", "PSP@5"]

    w = metrics.inv_propensity(dataset.labels("train"), dataset.spec.propensity_a, dataset.spec.propensity_b)
    filt = dataset.filter("test")
    names = ["P@1", "P@5", "nDCG@3", "PSP@5"]
    value_a = metrics.evaluate(good, truth, inv_propensity=w, filter=filt, metrics=names)
    value_b = metrics.evaluate(bad, truth, inv_propensity=w, filter=filt, metrics=names)
    for row in result.rows:
        assert row.value_a == pytest.approx(value_a[row.name]) and row.value_b == pytest.approx(value_b[row.name])
        assert row.diff == pytest.approx(value_a[row.name] - value_b[row.name])
        assert row.lo <= row.diff <= row.hi
        assert row.significant and row.diff > 20  # 0.9 vs 0.2 hit rate on 250 queries


def test_similar_runs_are_not_significant(tmp_path, store, dataset):
    truth = dataset.labels("test")
    _run(tmp_path, store, "run-a", dataset, _predictions(truth, 0.5, seed=3))
    _run(tmp_path, store, "run-b", dataset, _predictions(truth, 0.5, seed=4))
    result = compare_runs(store, "run-a", "run-b", n_boot=300)
    p1 = next(row for row in result.rows if row.name == "P@1")
    assert p1.lo < 0 < p1.hi and not p1.significant


def test_refuses_different_conditions(tmp_path, store, dataset):
    truth = dataset.labels("test")
    preds = _predictions(truth, 0.5, seed=3)
    _run(tmp_path, store, "run-a", dataset, preds)
    _run(tmp_path, store, "run-v", dataset, preds, dataset_version="0000")
    _run(tmp_path, store, "run-p", dataset, preds, propensity_a=0.6)
    with pytest.raises(XmcbenchError, match="differ in dataset_version"):
        compare_runs(store, "run-a", "run-v")
    with pytest.raises(XmcbenchError, match="differ in propensity_a"):
        compare_runs(store, "run-a", "run-p")
    with pytest.raises(XmcbenchError, match="give two different runs"):
        compare_runs(store, "run-a", "run-a")
    (tmp_path / "run-a" / PREDICTIONS_FILE).unlink()
    _run(tmp_path, store, "run-b", dataset, preds)
    with pytest.raises(XmcbenchError, match="predictions.npz does not exist"):
        compare_runs(store, "run-a", "run-b")


def test_sampled_queries_are_matched_by_eval_rows(tmp_path, store, dataset):
    truth = dataset.labels("test")
    rows = np.sort(np.random.default_rng(0).choice(truth.shape[0], size=100, replace=False))
    good, bad = _predictions(truth[rows], 0.9, seed=5), _predictions(truth[rows], 0.3, seed=6)
    _run(tmp_path, store, "run-a", dataset, good, rows=rows)
    _run(tmp_path, store, "run-b", dataset, bad, rows=rows)
    result = compare_runs(store, "run-a", "run-b", n_boot=200)
    expected = metrics.evaluate(good, truth[rows], metrics=["P@1"], filter=dataset.filter("test")[rows])["P@1"]
    assert result.n_queries == 100 and result.rows[0].value_a == pytest.approx(expected)

    _run(tmp_path, store, "run-c", dataset, bad, rows=rows[::-1].copy())
    with pytest.raises(XmcbenchError, match="different samples of the queries"):
        compare_runs(store, "run-a", "run-c")
    (tmp_path / "run-b" / EVAL_ROWS_FILE).unlink()
    with pytest.raises(XmcbenchError, match=r"eval_rows.npy \(which ones\) is missing"):
        compare_runs(store, "run-a", "run-b")


def test_cli_prints_differences_and_marks_significant(tmp_path, store, dataset):
    truth = dataset.labels("test")
    _run(tmp_path, store, "run-good", dataset, _predictions(truth, 0.9, seed=1))
    _run(tmp_path, store, "run-bad", dataset, _predictions(truth, 0.2, seed=2))
    result = CliRunner().invoke(
        app,
        ["compare", "run-good", "run-bad", "--db", str(store.path), "--n-boot", "200", "--seed", "1"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "A = run-good" in result.output and "B = run-bad" in result.output
    p1 = next(line for line in result.output.splitlines() if "P@1" in line)
    assert p1.rstrip(" │").endswith("*") and "+" in p1
    refused = CliRunner().invoke(app, ["compare", "run-good", "nope", "--db", str(store.path)])
    assert refused.exit_code == 1 and "no run 'nope'" in refused.output


def test_cli_json_output(tmp_path, store, dataset):
    truth = dataset.labels("test")
    _run(tmp_path, store, "run-good", dataset, _predictions(truth, 0.9, seed=1))
    _run(tmp_path, store, "run-bad", dataset, _predictions(truth, 0.2, seed=2))
    result = CliRunner().invoke(
        app, ["compare", "run-good", "run-bad", "--db", str(store.path), "--n-boot", "100", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    import json

    data = json.loads(result.stdout)
    assert data["run_a"] == "run-good" and data["run_b"] == "run-bad" and data["n_boot"] == 100
    p1 = next(r for r in data["rows"] if r["metric"] == "P@1")
    assert set(p1) == {"metric", "a", "b", "diff", "lo", "hi", "significant"} and p1["significant"] is True


def test_compare_reads_a_prepared_dataset_without_taking_its_lock(tmp_path, store, dataset, monkeypatch):
    """A read-only home cannot hold a lock file; the prepared cache is enough to compare."""
    import errno

    from xmcbench import fsutil

    truth = dataset.labels("test")
    _run(tmp_path, store, "run-a", dataset, _predictions(truth, 0.5, seed=3))
    _run(tmp_path, store, "run-b", dataset, _predictions(truth, 0.5, seed=4))

    def read_only_home(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(args[0]))

    monkeypatch.setattr(fsutil, "file_lock", read_only_home)
    assert compare_runs(store, "run-a", "run-b", n_boot=50).rows


def test_a_metric_only_one_run_reports_is_named_not_dropped_silently(tmp_path, store, dataset):
    truth = dataset.labels("test")
    _run(tmp_path, store, "run-a", dataset, _predictions(truth, 0.5, seed=3))
    _run(tmp_path, store, "run-b", dataset, _predictions(truth, 0.5, seed=4))
    record = store.get_run("run-b")["record"]
    record["scores"] = [s for s in record["scores"] if s["name"] != "P@1"]
    write_record(tmp_path / "run-b", record)
    store.ingest_record(record, tmp_path / "run-b")
    result = CliRunner().invoke(app, ["compare", "run-a", "run-b", "--db", str(store.path), "--n-boot", "100"])
    assert result.exit_code == 0, result.output
    assert "not compared, reported by one run only: P@1" in result.stderr


def test_a_damaged_predictions_file_says_to_run_again_not_to_resave_it(tmp_path, store, dataset):
    truth = dataset.labels("test")
    _run(tmp_path, store, "run-a", dataset, _predictions(truth, 0.5, seed=3))
    _run(tmp_path, store, "run-b", dataset, _predictions(truth, 0.5, seed=4))
    (tmp_path / "run-b" / PREDICTIONS_FILE).write_bytes(b"PK\x03\x04 cut short")
    with pytest.raises(XmcbenchError, match=r"run run-b's predictions cannot be read .*run the recipe again") as info:
        compare_runs(store, "run-a", "run-b", n_boot=10)
    assert "save_npz" not in str(info.value)
