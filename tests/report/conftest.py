"""A results store holding a few reproduced runs and published results for report tests."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta

import pytest

from xmcbench.leaderboard import ReferenceRow
from xmcbench.store import Store
from xmcbench.store.record import new_record

DATASET = "LF-AmazonTitles-131K"


def run_record(run_id: str, method: str, scores: dict[str, float], minute: int = 0, gpus: int = 0, **task) -> dict:
    """A finished run of ``method`` created ``minute`` minutes after a fixed time."""
    record = new_record(
        run_id,
        task={
            "dataset": DATASET,
            "dataset_version": "abc123",
            "split": "test",
            "n_queries": 1000,
            "n_queries_evaluated": 1000,
            "n_labels": 500,
            "propensity_a": 0.6,
            "propensity_b": 2.6,
            "filter": "filter_labels_test.txt",
            "supervision": "full",
            **task,
        },
        model={"method": method, "encoder": "all-MiniLM-L6-v2" if method != "tfidf" else None},
    )
    record["created_at"] = (datetime(2026, 1, 1) + timedelta(minutes=minute)).isoformat() + "+00:00"
    record["status"] = "finished"
    record["scores"] = [{"name": n, "value": v, "ci_lo": v - 0.5, "ci_hi": v + 0.5} for n, v in scores.items()]
    record["compute"] = (
        {
            "device_type": "cuda",
            "device_names": ["NVIDIA H100 80GB HBM3"] * gpus,
            "device_count": gpus,
            "gpu_hours": 0.5 * gpus,
        }
        if gpus
        else {"device_type": "cpu", "device_names": ["cpu"], "device_count": 1, "gpu_hours": 0.0}
    )
    record["accounting"] = {"batch_size": 256, "pool_size_mean": 2560.0, "pool_size_max": 2600} if gpus else {}
    return record


def ref(
    paper: str, table: str, method: str, metrics: dict, setting: str = "full", dataset: str = DATASET, **extra
) -> ReferenceRow:
    return ReferenceRow(
        paper=paper,
        table=table,
        dataset=dataset,
        method=method,
        printed_name=extra.pop("printed_name", method),
        setting=setting,
        metrics=metrics,
        **extra,
    )


REFERENCES = [
    ref(
        "dexml",
        "Table 2",
        "DEXML",
        {"P@1": 42.5, "P@5": 20.6, "PSP@1": 35.0},
        batch_size=2048,
        label_pool=131073,
        gpus=16,
        gpu_type="A100",
        train_time_hours=3.0,
    ),
    ref("dexml", "Table 2", "DEXML", {"P@1": 43.9}, variant="SoftTop-5", printed_name="SoftTop-5 DEXML"),
    ref("unidec", "Table 3", "DEXML", {"P@1": 42.0, "P@5": 20.0}),
    ref("unidec", "Table 3", "NGAME", {"P@1": 46.0, "P@5": 21.5, "PSP@1": 38.0}),
    ref("maclr", "Table 4", "MACLR", {"P@1": 9.0, "P@5": 4.0}, setting="zero-shot"),
    ref("lmtx", "Table 2", "LMTX", {"P@1": 60.0}, test_queries=500),  # a sample: never best
    ref("prime", "Table 2", "PRIME", {"P@1": 70.0}, dataset_variant="another copy"),  # never shown
    ref("dexml", "Table 2", "DEXML", {"P@1": 46.0}, dataset="LF-WikiSeeAlso-320K"),
]


@pytest.fixture(name="run_record")
def run_record_fixture():
    return run_record


@pytest.fixture(scope="session")
def template_db(tmp_path_factory):
    """Runs: two dexml (the better, 44.0, is older), one tfidf, one failed; published rows above.

    Built once; each test gets its own copy (writing to DuckDB costs ~0.1 s a transaction).
    """
    path = tmp_path_factory.mktemp("report") / "results.duckdb"
    with Store.open(path) as store:
        store.ingest_record(
            run_record("r-dexml-best", "dexml", {"P@1": 44.0, "P@5": 21.0, "PSP@1": 34.0}, minute=0, gpus=2), None
        )
        store.ingest_record(
            run_record("r-dexml-new", "dexml", {"P@1": 43.0, "P@5": 21.5, "PSP@1": 36.0}, minute=10, gpus=2), None
        )
        store.ingest_record(run_record("r-tfidf", "tfidf", {"P@1": 30.0, "P@5": 15.0, "PSP@1": 25.0}, minute=5), None)
        failed = run_record("r-failed", "dexml", {"P@1": 99.0}, minute=20)
        failed["status"] = "failed"
        store.ingest_record(failed, None)
        store.load_reference_results(REFERENCES)
    return path


@pytest.fixture
def store(tmp_path, template_db):
    shutil.copy(template_db, tmp_path / "results.duckdb")
    with Store.open(tmp_path / "results.duckdb") as store:
        yield store
