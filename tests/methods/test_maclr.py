"""MACLR on the tiny BERT: zero-shot and few-shot runs end to end, what reaches fit, bad recipes."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from xmcbench.methods.base import TrainTask
from xmcbench.methods.maclr import MaclrMethod, binarise, ict_pairs, tfidf_topk
from xmcbench.recipe import RecipeError
from xmcbench.run import run_recipe

TINY = ("{name: maclr, stage1_steps: 4, k0: 4, t_k: 1, t_update: 1, label_negatives: 8, stage2_steps: 2, "
        "projection_dim: 8, temperature: 0.1, finetune_steps: 3, finetune_lr: 0.001, encode_batch_size: 64}")


def test_zero_shot_run_never_hands_fit_a_label_array(tiny_recipe, tmp_path, monkeypatch):
    seen = {}
    real_fit = MaclrMethod.fit

    def spy(self, task, ctx):
        seen["task"] = task
        return real_fit(self, task, ctx)

    monkeypatch.setattr(MaclrMethod, "fit", spy)
    recipe = tiny_recipe(TINY, extra="supervision: {mode: zero_shot}\n")
    result = run_recipe(recipe, runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False)
    task = seen["task"]
    assert task.train_labels is None and task.seen_labels is None
    assert not any(isinstance(v, sparse.spmatrix) for v in vars(task).values())  # no label array by any name
    assert task.train_titles is not None and len(task.train_titles) == len(task.train_texts)
    rec = result.record
    assert rec["status"] == "finished" and rec["task"]["supervision"] == "zero_shot"
    acc = rec["accounting"]
    assert acc["supervision"] == {"mode": "zero_shot", "label_fraction": None, "labels_sampled": None,
                                  "train_pairs": 0, "train_queries_with_labels": 0}
    assert acc["stage1_steps"] == 4 and acc["stage2_steps"] == 2 and acc["stage2_pseudo_pairs"] > 0
    assert acc["cluster_refreshes"] == [[1, 8]]  # K0 = 4 doubles every step; refreshed once in the first half
    assert "finetune_pairs" not in acc


def test_few_shot_records_sampled_labels_and_pairs(tiny_recipe, tmp_path):
    recipe = tiny_recipe(TINY, extra="supervision: {mode: few_shot, label_fraction: 0.05, seed: 3}\n")
    result = run_recipe(recipe, runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False)
    acc = result.record["accounting"]
    sup = acc["supervision"]
    assert sup["mode"] == "few_shot" and sup["labels_sampled"] == 3  # round(0.05 * 60)
    assert sup["train_pairs"] == acc["finetune_pairs"] > 0
    assert result.record["task"]["n_labels"] == 60  # evaluation keeps every label


def test_ict_pairs_drop_instances_without_title_or_body():
    task = TrainTask("t", train_texts=["a b", "c", "d e"], label_texts=["x"], train_labels=None,
                     train_titles=["a", "", "d"], train_contents=["b", "c", "e"])
    contexts, titles = ict_pairs(task, 1.0, np.random.default_rng(0))
    assert contexts == ["b", "e"] and titles == ["a", "d"]
    kept, _ = ict_pairs(task, 0.0, np.random.default_rng(0))  # never removed: the title stays in the context
    assert kept == ["a b", "d e"]
    with pytest.raises(Exception, match="needs instance titles"):
        ict_pairs(TrainTask("t", ["a"], ["x"], None), 1.0, np.random.default_rng(0))


def test_tfidf_view_finds_word_overlap():
    top = tfidf_topk(["red shoes for running", "wine glass"], ["red running shoes", "wine glass", "jacket"], 1, 0.98, 2)
    assert binarise(top).toarray().tolist() == [[1, 0, 0], [0, 1, 0]]


@pytest.mark.parametrize("extra, key, words", [
    ("supervision: {mode: zero_shot}\n", "method.k0", "more than the 300"),
])
def test_k0_above_instances_is_refused_at_validation(tiny_recipe, extra, key, words):
    with pytest.raises(RecipeError) as err:
        tiny_recipe(TINY.replace("k0: 4", "k0: 301"), extra=extra)
    assert key in str(err.value) and words in str(err.value)


def test_zero_shot_on_a_dataset_without_titles_is_refused(tmp_path):
    from xmcbench.run import load_recipe

    path = tmp_path / "r.yaml"
    path.write_text("name: x\ndataset: {name: EURLex-4K}\nsupervision: {mode: zero_shot}\nmethod: {name: maclr}\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert "needs instance titles" in str(err.value) and "pretrain: false" in str(err.value)
    path.write_text("name: x\ndataset: {name: EURLex-4K}\nsupervision: {mode: few_shot, label_fraction: 0.05}\n"
                    "method: {name: maclr, pretrain: false, k0: 8}\n")
    assert load_recipe(path).method.name == "maclr"  # the named switch works
