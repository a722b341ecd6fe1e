"""Values that pass the YAML but would crash or escape at run time are refused at validation."""

import pytest

from xmcbench.recipe.schema import MIN_BOOTSTRAP
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
        ({"name": "'   '"}, "name"),
        ({"encoder": "{name: ''}"}, "encoder.name"),
        ({"encoder": "{revision: ''}"}, "encoder.revision"),
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


def test_every_bad_quality_floor_is_named_with_how_to_write_it(tmp_path):
    _, problems = check(tmp_path, expect="{P@1: 30, Q@1: '>= 1', R@5: '< 2'}")
    (problem,) = problems
    assert problem.key == "expect"
    assert 'write P@1: ">= 30"' in problem.message and "'Q@1' is not a metric name" in problem.message
    assert "R@5" not in problem.message


@pytest.mark.parametrize(
    "sections, key, words",
    [
        ({"training": "null"}, "training", "is empty"),
        ({"dataset": "hello"}, "dataset", "not text 'hello'"),
        ({"expect": "[P@1]"}, "expect", "not a list"),
    ],
)
def test_a_section_that_is_not_a_mapping_says_so_in_plain_words(tmp_path, sections, key, words):
    _, problems = check(tmp_path, **sections)
    problem = next(p for p in problems if p.key == key)
    assert words in problem.message and "instance of" not in problem.message


def test_an_exponent_yaml_reads_as_text_gets_the_number_to_write(tmp_path):
    _, problems = check(tmp_path, training="{epochs: 1e3, batch_size: abc}")
    messages = {p.key: p.message for p in problems}
    assert messages["training.epochs"] == "1e3 is read as text by YAML; write it as 1000"
    assert "valid integer" in messages["training.batch_size"]


@pytest.mark.parametrize(
    "value, words",
    [
        ("true", "not true/false"),
        ("false", "not true/false"),
        ("1", "too few resamples (1) for a 95% interval"),
        ("99", "too few resamples (99)"),
    ],
)
def test_bootstrap_is_none_or_enough_resamples_for_an_interval(tmp_path, value, words):
    """`bootstrap: 1` (or `true`, read as 1) printed a "95% CI" of one resample: lo = hi, beside the estimate."""
    _, problems = check(tmp_path, evaluation=f"{{bootstrap: {value}}}")
    (problem,) = problems
    assert problem.key == "evaluation.bootstrap" and words in problem.message
    assert f"0 for no intervals, or {MIN_BOOTSTRAP} or more" in problem.message


@pytest.mark.parametrize("value", [0, MIN_BOOTSTRAP, 1000])
def test_bootstrap_zero_or_at_least_the_minimum_is_accepted(tmp_path, value):
    recipe, problems = check(tmp_path, evaluation=f"{{bootstrap: {value}}}")
    assert problems == [] and recipe.evaluation.bootstrap == value


def test_a_recorded_run_with_few_resamples_still_loads(tmp_path):
    """The minimum is asked of a recipe about to run; a run recorded (or a model published) with
    fewer resamples before it existed must still resume and load."""
    from xmcbench.run import recipe_from_dict

    recipe, _ = check(tmp_path)
    recorded = recipe.resolved()
    recorded["evaluation"]["bootstrap"] = 20
    assert recipe_from_dict(recorded).evaluation.bootstrap == 20
