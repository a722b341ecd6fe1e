"""Values that pass the YAML but would crash or escape at run time are refused at validation."""

import pytest

from xmcbench.run import check_recipe

BASE = {
    "name": "t",
    "dataset": "{name: synth-x, synthetic: {labels: 50, train: 100, test: 20}}",
    "method": "{name: tfidf}",
}


def check(tmp_path, **sections):
    text = "\n".join(f"{k}: {v}" for k, v in {**BASE, **sections}.items()) + "\n"
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return check_recipe(path)


@pytest.mark.parametrize(
    "sections, key",
    [
        ({"training": "{seed: -1}"}, "training.seed"),
        ({"training": "{seed: 99999999999999999999}"}, "training.seed"),
        ({"supervision": "{mode: few_shot, label_fraction: 0.1, seed: -5}"}, "supervision.seed"),
        ({"evaluation": "{k: [1, 100000000], top_k: 100000000}"}, "evaluation.k"),
        ({"evaluation": "{top_k: 1000000000}"}, "evaluation.top_k"),
        ({"evaluation": "{propensity_a: .nan}"}, "evaluation.propensity_a"),
        ({"evaluation": "{propensity_b: .inf}"}, "evaluation.propensity_b"),
        ({"evaluation": "{propensity_a: -1}"}, "evaluation.propensity_a"),
        ({"evaluation": "{metrics: [P, MRR]}"}, "evaluation.metrics"),
        ({"evaluation": "{bootstrap: 100000000}"}, "evaluation.bootstrap"),
        ({"training": "{lr: .nan}"}, "training.lr"),
        ({"dataset": "{name: x, synthetic: {labels: 1000000000, train: 10, test: 10}}"}, "dataset.synthetic.labels"),
        ({"dataset": "{name: x, synthetic: {labels: 10, train: 10, test: 10, seed: -1}}"}, "dataset.synthetic.seed"),
        ({"dataset": "{name: ../../etc, synthetic: {labels: 10, train: 10, test: 10}}"}, "dataset.name"),
        ({"dataset": "{name: a/b}"}, "dataset.name"),
        ({"dataset": "{name: .hidden, synthetic: {labels: 10, train: 10, test: 10}}"}, "dataset.name"),
        ({"dataset": "{name: ''}"}, "dataset.name"),
        ({"name": "''"}, "name"),
    ],
)
def test_out_of_range_values_are_refused(tmp_path, sections, key):
    recipe, problems = check(tmp_path, **sections)
    assert recipe is None
    assert key in {p.key for p in problems}, [str(p) for p in problems]


def test_a_path_like_dataset_name_touches_nothing(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("XMCBENCH_HOME", str(home))
    check(tmp_path, dataset="{name: ../escaped}")
    assert not (tmp_path / "escaped").exists()
    assert not home.exists() or not any(home.rglob("*escaped*"))


def test_every_metric_family_comes_from_the_metrics_registry():
    from xmcbench.metrics import METRICS
    from xmcbench.recipe import EvaluationSection

    assert EvaluationSection().metrics == [name for name, _ in METRICS]
