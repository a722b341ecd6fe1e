import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from scipy import sparse

from xmcbench import metrics
from xmcbench.methods.tfidf import TfidfMethod
from xmcbench.run import load_recipe, load_record, run_recipe
from xmcbench.run.phases import build_train_task, ensure_dataset
from xmcbench.store import Store

RECIPE = """
name: t-{tag}
dataset: {{name: synth-runner, synthetic: {{labels: 120, train: 400, test: 80, seed: 3}}}}
supervision: {{mode: zero_shot}}
method: {{name: tfidf}}
evaluation: {{k: [1, 3, 5, 10], top_k: 10, bootstrap: 100}}
hardware: {{devices: cpu}}
"""


@pytest.fixture
def recipe(tmp_path):
    def make(tag="a", extra=""):
        path = tmp_path / f"{tag}.yaml"
        path.write_text(RECIPE.format(tag=tag) + extra)
        return load_recipe(path)

    return make


def test_tfidf_run_end_to_end(recipe, tmp_path):
    db = tmp_path / "r.duckdb"
    result = run_recipe(recipe(), db=db, progress=False)
    rec = result.record
    assert rec["status"] == "finished" and rec["phases_done"] == ["prepare", "train", "predict", "evaluate"]
    assert rec["task"]["n_queries"] == 80 and rec["task"]["n_labels"] == 120
    assert rec["provenance"]["recipe_hash"] and rec["provenance"]["packages"]["numpy"]
    assert set(rec["compute"]["wall_time_s"]) == {"prepare", "train", "predict", "evaluate"}
    assert json.loads((result.run_dir / "record.json").read_text())["status"] == "finished"

    # Predictions hold at most top_k per row and no filtered pair; the recorded scores recompute.
    preds = sparse.load_npz(result.run_dir / "predictions.npz").tocsr()
    assert np.diff(preds.indptr).max() <= 10
    ds = ensure_dataset(recipe(), progress=False)
    filt = ds.filter("test")
    if filt is not None and filt.nnz:
        assert preds.multiply(filt).nnz == 0
    inv = metrics.inv_propensity(ds.labels("train"), ds.spec.propensity_a, ds.spec.propensity_b)
    again = metrics.evaluate(preds, ds.labels("test"), k=(1, 3, 5, 10), inv_propensity=inv)
    for s in rec["scores"]:
        assert again[s["name"]] == pytest.approx(s["value"], abs=1e-9)
        assert s["ci_lo"] <= s["value"] <= s["ci_hi"]

    with Store.open(db) as store:
        runs = store.runs()
    assert [r["run_id"] for r in runs] == [rec["run_id"]]


def test_failed_run_is_recorded(recipe, tmp_path, monkeypatch):
    def boom(self, task, ctx):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(TfidfMethod, "fit", boom)
    with pytest.raises(RuntimeError):
        run_recipe(recipe(), db=tmp_path / "r.duckdb", runs_dir=tmp_path / "runs", progress=False)
    (run_dir,) = (tmp_path / "runs").iterdir()
    rec = load_record(run_dir)
    assert rec["status"] == "failed" and rec["error"] == "RuntimeError: disk on fire"
    with Store.open(tmp_path / "r.duckdb") as store:
        assert store.runs()[0]["status"] == "failed"


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupted_run_resumes_without_refitting(recipe, tmp_path, monkeypatch, how):
    fits = []
    real_fit, real_predict = TfidfMethod.fit, TfidfMethod.predict

    def counting_fit(self, task, ctx):
        fits.append(1)
        real_fit(self, task, ctx)

    def interrupted_predict(self, texts, k, ctx):
        if how == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        raise KeyboardInterrupt

    monkeypatch.setattr(TfidfMethod, "fit", counting_fit)
    monkeypatch.setattr(TfidfMethod, "predict", interrupted_predict)
    runs = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        run_recipe(recipe(), db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    (run_dir,) = runs.iterdir()
    rec = load_record(run_dir)
    assert rec["status"] == "interrupted" and "resume" in rec["error"]
    assert rec["phases_done"] == ["prepare", "train"]

    monkeypatch.setattr(TfidfMethod, "predict", real_predict)
    result = run_recipe(None, db=tmp_path / "r.duckdb", runs_dir=runs, resume=run_dir.name[:20], progress=False)
    assert result.record["status"] == "finished" and result.run_dir == run_dir
    assert len(fits) == 1  # the fitted model was loaded from the checkpoint
    with Store.open(tmp_path / "r.duckdb") as store:
        assert [r["status"] for r in store.runs()] == ["finished"]


def test_killed_process_reads_as_interrupted(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = {"run_id": "x", "status": "running", "provenance": {"host": os.uname().nodename, "pid": dead.pid}}
    (tmp_path / "record.json").write_text(json.dumps(record))
    assert load_record(tmp_path)["status"] == "interrupted"


def test_few_and_zero_shot_supervision(recipe):
    base = recipe("f")
    few = load_recipe_override(base, "supervision", {"mode": "few_shot", "label_fraction": 0.25})
    ds = ensure_dataset(base, progress=False)
    task = build_train_task(few, ds, np.ones(ds.n_labels))
    assert task.seen_labels.sum() == 30
    cols = np.unique(task.train_labels.indices)
    assert task.seen_labels[cols].all()
    assert build_train_task(recipe("z"), ds, np.ones(ds.n_labels)).train_labels is None


def load_recipe_override(recipe, section, value):
    data = recipe.model_dump()
    data[section] = value
    data["method"] = {"name": recipe.method.name}
    return type(recipe).model_validate(data)


@pytest.mark.slow
def test_parallel_runs_on_a_cold_dataset_are_all_recorded(tmp_path):
    """Four `xmcbench run` processes at once, dataset not yet generated, one database: all recorded."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.format(tag="par"))
    env = {**os.environ, "XMCBENCH_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    db = tmp_path / "shared.duckdb"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "xmcbench",
                "run",
                str(recipe),
                "--quiet",
                "--db",
                str(db),
                "--set",
                f"training.seed={i}",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(4)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-2000:] for o in outputs)
    with Store.open(db) as store:
        runs = store.runs()
        assert len(runs) == 4 and {r["status"] for r in runs} == {"finished"}
        assert all(len(store.scores(run_id=r["run_id"])) > 0 for r in runs)
