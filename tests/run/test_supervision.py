"""Supervision regimes in the runner, shared by every method: what each regime lets fit see."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from xmcbench.recipe import RecipeError
from xmcbench.run import load_recipe
from xmcbench.run.phases import build_train_task, ensure_dataset

RECIPE = """
name: t-sup
dataset: {{name: synth-sup, synthetic: {{labels: 200, train: 600, test: 50, seed: 5}}}}
supervision: {supervision}
method: {{name: tfidf}}
evaluation: {{k: [1, 5], top_k: 10, bootstrap: 0}}
hardware: {{devices: cpu}}
"""


def make(tmp_path, supervision: str):
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.format(supervision=supervision))
    return load_recipe(path)


def test_few_shot_keeps_every_pair_of_the_sampled_labels_and_nothing_else(tmp_path):
    recipe = make(tmp_path, "{mode: few_shot, label_fraction: 0.05, seed: 7}")
    ds = ensure_dataset(recipe, progress=False)
    full = ds.labels("train")
    task = build_train_task(recipe, ds, np.ones(ds.n_labels))
    seen = task.seen_labels
    assert seen.sum() == 10  # round(0.05 * 200)
    again = build_train_task(recipe, ds, np.ones(ds.n_labels)).seen_labels
    assert (again == seen).all()  # the recipe's seed decides
    kept = sparse.csr_matrix(full.multiply(seen[None, :].astype(np.float32)))
    kept.eliminate_zeros()
    assert (task.train_labels != kept).nnz == 0  # all pairs of the sampled labels, no other
    assert task.supervision == {
        "mode": "few_shot",
        "label_fraction": 0.05,
        "labels_sampled": 10,
        "train_pairs": int(kept.nnz),
        "train_queries_with_labels": int(np.count_nonzero(np.diff(kept.indptr))),
    }
    assert task.n_labels == 200  # every label stays a candidate


def test_zero_shot_hands_no_label_array(tmp_path):
    recipe = make(tmp_path, "{mode: zero_shot}")
    ds = ensure_dataset(recipe, progress=False)
    task = build_train_task(recipe, ds, np.ones(ds.n_labels))
    assert task.train_labels is None and task.seen_labels is None
    assert not any(isinstance(v, sparse.spmatrix) for v in vars(task).values())


@pytest.mark.parametrize(
    "supervision, words",
    [
        ("{mode: few_shot}", "needs label_fraction"),
        ("{mode: few_shot, label_fraction: 0}", "greater than 0"),
        ("{mode: few_shot, label_fraction: 1.5}", "less than or equal to 1"),
        ("{mode: zero_shot, label_fraction: 0.1}", "only applies to mode few_shot"),
    ],
)
def test_bad_supervision_is_one_clear_error_at_validation(tmp_path, supervision, words):
    with pytest.raises(RecipeError) as err:
        make(tmp_path, supervision)
    assert words in str(err.value) and "supervision" in str(err.value)
