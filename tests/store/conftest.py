"""Run directories for store tests, written through the real record writer.

Test modules get the helpers through fixtures (``record_factory``, ``run_factory``) so they work
whatever pytest import mode the suite uses.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.store.record import PREDICTIONS_FILE, new_record, write_record


def finished_record(
    run_id: str, method: str = "tfidf", dataset: str = "synth-small", scores: dict | None = None, **task
) -> dict:
    """A finished record with the given scores (name -> value) and task fields."""
    record = new_record(
        run_id,
        task={
            "dataset": dataset,
            "dataset_version": "v1",
            "split": "test",
            "n_queries": 100,
            "n_queries_evaluated": 100,
            "n_labels": 50,
            "propensity_a": 0.55,
            "propensity_b": 1.5,
            "filter": None,
            "supervision": "full",
            **task,
        },
        model={"method": method, "encoder": None, "params_total": 0, "params_trainable": 0},
        provenance={"xmcbench_version": "0.1.0", "recipe_hash": "ab" * 32, "seed": 0, "git_dirty": False},
    )
    record["status"] = "finished"
    record["finished_at"] = record["updated_at"]
    record["scores"] = [
        {"name": name, "value": value, "ci_lo": value - 1.0, "ci_hi": value + 1.0, "higher_is_better": True}
        for name, value in (scores or {"P@1": 40.0, "P@5": 20.0}).items()
    ]
    record["compute"] = {
        "device_type": "cpu",
        "device_names": ["cpu"],
        "device_count": 1,
        "wall_time_s": {"prepare": 1.0, "train": 2.0, "predict": 0.5, "evaluate": 0.25},
        "gpu_hours": 0.0,
        "peak_host_mem_gb": 1.5,
    }
    record["accounting"] = {"batch_size": 64, "pool_size_mean": 640.0, "pool_size_max": 700}
    return record


def write_run(root: Path, record: dict, seed: int = 0) -> Path:
    """Write ``record.json`` and a small top-5 ``predictions.npz`` into ``root/<run_id>/``."""
    run_dir = root / record["run_id"]
    write_record(run_dir, record)
    rng = np.random.default_rng(seed)
    n, m = record["task"]["n_queries"], record["task"]["n_labels"]
    cols = np.stack([rng.choice(m, 5, replace=False) for _ in range(n)]).ravel()
    preds = sp.csr_matrix((rng.random(n * 5), cols, np.arange(0, n * 5 + 1, 5)), shape=(n, m))
    sp.save_npz(run_dir / PREDICTIONS_FILE, preds)
    return run_dir


@pytest.fixture
def record_factory():
    return finished_record


@pytest.fixture
def run_factory():
    return write_run
