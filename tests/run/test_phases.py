import logging

import pytest
from scipy import sparse

from xmcbench.methods.tfidf import TfidfMethod
from xmcbench.run import load_recipe, load_record, run_recipe

RECIPE = """
name: phases
dataset: {name: synth-phases, synthetic: {labels: 60, train: 200, test: 40, seed: 1}}
supervision: {mode: zero_shot}
method: {name: tfidf}
evaluation: {k: [1, 3], top_k: 10, bootstrap: 0}
hardware: {devices: cpu}
"""


def _interrupted_after_train(tmp_path, monkeypatch):
    """A run stopped in its predict phase: the fitted model is saved, predictions are not."""
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE)
    real_predict = TfidfMethod.predict

    def interrupted(self, texts, k, ctx):
        raise KeyboardInterrupt

    monkeypatch.setattr(TfidfMethod, "predict", interrupted)
    runs = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        run_recipe(load_recipe(path), db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    monkeypatch.setattr(TfidfMethod, "predict", real_predict)
    (run_dir,) = runs.iterdir()
    assert load_record(run_dir)["phases_done"] == ["prepare", "train"]
    return runs, run_dir


def test_a_damaged_trained_model_is_fitted_again_on_resume(tmp_path, monkeypatch, caplog):
    runs, run_dir = _interrupted_after_train(tmp_path, monkeypatch)
    model_dir = run_dir / "checkpoints" / "model"
    assert model_dir.is_dir() and not list(model_dir.parent.glob(".*.tmp"))  # installed whole
    for f in model_dir.iterdir():
        f.write_bytes(f.read_bytes()[:10])  # cut short by hand or a dying disk
    with caplog.at_level(logging.WARNING, logger="xmcbench.run"):
        result = run_recipe(None, db=tmp_path / "r.duckdb", runs_dir=runs, resume=run_dir.name, progress=False)
    assert result.record["status"] == "finished"
    assert "cannot be read" in caplog.text and "fitting again" in caplog.text
    assert result.scores["P@1"] > 0


def test_a_bug_in_loading_the_trained_model_is_raised_not_refitted(tmp_path, monkeypatch):
    """Only damage is refitted: a bug would otherwise cost a silent second training of hours."""
    runs, run_dir = _interrupted_after_train(tmp_path, monkeypatch)

    def buggy_load(self, folder):
        raise AttributeError("'TfidfMethod' object has no attribute 'vocab'")

    monkeypatch.setattr(TfidfMethod, "load", buggy_load)
    with pytest.raises(AttributeError, match="no attribute 'vocab'"):
        run_recipe(None, db=tmp_path / "r.duckdb", runs_dir=runs, resume=run_dir.name, progress=False)


def test_damaged_predictions_are_made_again_on_resume(tmp_path, monkeypatch, caplog):
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE)
    runs = tmp_path / "runs"
    first = run_recipe(load_recipe(path), db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    pred_path = first.run_dir / "predictions.npz"
    kept = sparse.load_npz(pred_path)
    pred_path.write_bytes(b"PK\x03\x04 cut short")
    record = load_record(first.run_dir)
    record.update(status="interrupted", phases_done=["prepare", "train", "predict"])
    (first.run_dir / "record.json").write_text(__import__("json").dumps(record))
    with caplog.at_level(logging.WARNING, logger="xmcbench.run"):
        again = run_recipe(None, db=tmp_path / "r.duckdb", runs_dir=runs, resume=first.run_dir.name, progress=False)
    assert "predicting again" in caplog.text
    assert again.scores == first.scores
    assert (sparse.load_npz(pred_path) != kept).nnz == 0


def test_k_beyond_the_label_count_is_named_before_training(tmp_path, monkeypatch, caplog):
    """Kept, as the MACLR smoke recipes' R@100 over 40 labels, but said before training starts."""
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.replace("k: [1, 3], top_k: 10", "k: [1, 61, 80], top_k: 100"))
    seen = []

    def fit(self, task, ctx):
        seen.append(caplog.text)
        real_fit(self, task, ctx)

    real_fit = TfidfMethod.fit
    monkeypatch.setattr(TfidfMethod, "fit", fit)
    with caplog.at_level(logging.WARNING, logger="xmcbench.run"):
        result = run_recipe(load_recipe(path), db=tmp_path / "r.duckdb", runs_dir=tmp_path / "runs", progress=False)
    assert "evaluation.k 61, 80: more than the 60 labels of synth-phases" in seen[0]
    assert "P@80" in result.scores  # kept


@pytest.mark.parametrize(("epochs", "said"), [(0, True), (1, False)])
def test_a_supervised_method_given_no_epochs_says_it_will_not_train(tmp_path, monkeypatch, caplog, epochs, said):
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.replace("supervision: {mode: zero_shot}", f"training: {{epochs: {epochs}}}"))
    monkeypatch.setattr(TfidfMethod, "requires_labels", True)  # stands in for DEXML / UniDEC / PRIME
    with caplog.at_level(logging.WARNING, logger="xmcbench.run"):
        run_recipe(load_recipe(path), db=tmp_path / "r.duckdb", runs_dir=tmp_path / "runs", progress=False)
    assert ("training.epochs is 0: tfidf takes no training step" in caplog.text) is said
