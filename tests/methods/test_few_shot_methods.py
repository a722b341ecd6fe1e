"""Few-shot supervision through the runner's TrainTask alone, for every supervised method (tiny BERT)."""

from __future__ import annotations

import pytest

from xmcbench.run import run_recipe


@pytest.mark.slow
@pytest.mark.parametrize(
    "method",
    [
        "{name: dexml, regime: hard_negatives, hard_negatives: 2, shortlist_k: 10, refresh_every: 1, temperature: 0.1}",
        "{name: unidec, dim: 16, positives_per_query: 2, hard_negatives: 2, refresh_every: 1, cluster_start_epoch: 1, "
        "cluster_size: 8, temperature: 0.1, classifier_lr: 0.01}",
        "{name: prime, free_vectors: 16, prototype_ffn: 64, cluster_start_epoch: 1, cluster_size: 8}",
    ],
)
def test_every_supervised_method_runs_few_shot(tiny_recipe, tmp_path, method):
    recipe = tiny_recipe(method, epochs=1, extra="supervision: {mode: few_shot, label_fraction: 0.05}\n")
    result = run_recipe(recipe, runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False)
    assert result.record["status"] == "finished"
    sup = result.record["accounting"]["supervision"]
    assert sup["labels_sampled"] == 3 and sup["train_pairs"] > 0
