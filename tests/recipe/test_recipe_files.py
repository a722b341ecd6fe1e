from pathlib import Path

import pytest

from xmcbench.recipe import RecipeError, apply_overrides
from xmcbench.run import check_recipe, load_recipe

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p for p in (REPO / "recipes").rglob("*.yaml") if "base" not in p.parts)


def test_there_are_shipped_recipes():
    assert any(p.parent.name == "smoke" for p in SHIPPED)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_recipe_validates(path):
    recipe, problems = check_recipe(path)
    assert problems == [], "\n".join(map(str, problems))
    assert recipe.hash() == load_recipe(path).hash()


def test_every_shipped_recipe_says_what_it_is_in_its_own_words():
    """`recipes list` shows each recipe's description: none is missing, and the recipes of one
    method do not share one text (a few-shot recipe inherited "no labels" from the zero-shot one)."""
    described = {path: load_recipe(path).description for path in SHIPPED}
    assert [str(p.relative_to(REPO)) for p, d in described.items() if not d] == []
    aliases = {p for p in SHIPPED if p.parent == REPO / "recipes"}  # recipes/dexml.yaml: a headline recipe's alias
    texts = [d for p, d in described.items() if p not in aliases]
    assert len(set(texts)) == len(texts)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


BASE = """
name: t
dataset: {name: synth-x, synthetic: {labels: 50, train: 100, test: 20}}
method: {name: tfidf}
"""


def test_unknown_keys_are_all_reported_with_hints(tmp_path):
    path = write(
        tmp_path,
        "r.yaml",
        BASE.replace("method: {name: tfidf}\n", "")
        + "training: {epochz: 3, batch_size: 8}\nevaluaton: {k: [1]}\nmethod: {name: tfidf, ngram_maxx: 2}\n",
    )
    recipe, problems = check_recipe(path)
    assert recipe is None
    by_key = {p.key: p for p in problems}
    assert by_key["training.epochz"].hint == "did you mean 'epochs'?"
    assert by_key["evaluaton"].hint == "did you mean 'evaluation'?"
    assert by_key["method.ngram_maxx"].hint == "did you mean 'ngram_max'?"
    assert all(p.file == str(path) for p in problems)


def test_unknown_method_suggests(tmp_path):
    path = write(tmp_path, "r.yaml", BASE.replace("name: tfidf", "name: tfdif"))
    _, problems = check_recipe(path)
    assert len(problems) == 1 and "did you mean tfidf" in problems[0].message


def test_bad_values_and_yaml(tmp_path):
    path = write(tmp_path, "r.yaml", BASE + "evaluation: {k: [1, 200], top_k: 100}\nexpect: {'P@1': 'at least 3'}\n")
    _, problems = check_recipe(path)
    messages = " ".join(p.message for p in problems)
    assert "top_k (100) must be at least the largest k (200)" in messages
    assert "not a bound" in messages
    bad = write(tmp_path, "bad.yaml", "name: [unclosed\n")
    _, problems = check_recipe(bad)
    assert "invalid YAML" in problems[0].message and "line" in problems[0].message


def test_include_and_overrides(tmp_path):
    write(tmp_path, "base.yaml", BASE + "training: {epochs: 5, lr: 0.001}\n")
    child = write(tmp_path, "child.yaml", "include: base.yaml\nname: child\ntraining: {epochs: 2}\n")
    recipe = load_recipe(child, ["evaluation.k=[1, 5]", "training.seed=7"])
    assert recipe.name == "child"
    assert recipe.training.epochs == 2 and recipe.training.lr == 0.001 and recipe.training.seed == 7
    assert recipe.evaluation.k == [1, 5]


def test_include_cycle_and_missing(tmp_path):
    write(tmp_path, "a.yaml", "include: b.yaml\n")
    write(tmp_path, "b.yaml", "include: a.yaml\n")
    _, problems = check_recipe(tmp_path / "a.yaml")
    assert "include cycle" in problems[0].message
    _, problems = check_recipe(write(tmp_path, "c.yaml", "include: nope.yaml\n"))
    assert "not found" in problems[0].message


def test_override_syntax_errors():
    with pytest.raises(RecipeError, match="section.key=value"):
        apply_overrides({}, ["training.epochs"])
    with pytest.raises(RecipeError, match="is a value, not a section"):
        apply_overrides({"name": "x"}, ["name.sub=1"])


def test_every_bad_override_is_reported_beside_the_recipes_problems(tmp_path):
    with pytest.raises(RecipeError) as caught:
        apply_overrides({"name": "x"}, ["training.epochs", "name.sub=1", "=3", "ok.key=1"])
    assert [p.key for p in caught.value.problems] == ["training.epochs", "name.sub", "=3"]
    path = write(tmp_path, "r.yaml", BASE + "training: {epochz: 1}\n")
    _, problems = check_recipe(path, ["training", "evaluation.bootstrap=-1"])
    keys = [p.key for p in problems]
    assert keys[0] == "training" and "training.epochz" in keys and "evaluation.bootstrap" in keys
    by_key = {p.key: p.file for p in problems}
    assert by_key["training.epochz"] == str(path)  # the malformed "training" set nothing: the file's key
    assert by_key["evaluation.bootstrap"] == "--set evaluation.bootstrap=-1"


def test_a_problem_an_override_made_names_the_override_not_the_file(tmp_path):
    """A mistyped --set key is not in the file at all: the problem names the --set that made it."""
    path = write(tmp_path, "r.yaml", BASE)
    _, problems = check_recipe(path, ["training.epoch=3", "training.lr=fast", "training.epochs=2"])
    assert {p.key: p.file for p in problems} == {
        "training.epoch": "--set training.epoch=3",
        "training.lr": "--set training.lr=fast",
    }
    assert "--set training.epoch=3: training.epoch: unknown key (did you mean 'epochs'?)" in str(RecipeError(problems))


def test_supervision_rules(tmp_path):
    _, problems = check_recipe(write(tmp_path, "r.yaml", BASE + "supervision: {mode: few_shot}\n"))
    assert "label_fraction" in problems[0].message
    recipe = load_recipe(write(tmp_path, "s.yaml", BASE + "supervision: {mode: few_shot, label_fraction: 0.05}\n"))
    assert recipe.supervision.label_fraction == 0.05


def test_unknown_dataset_without_synthetic_spec(tmp_path):
    _, problems = check_recipe(
        write(tmp_path, "r.yaml", "name: t\ndataset: {name: lf-amazontitle-131k}\nmethod: {name: tfidf}\n")
    )
    assert problems[0].key == "dataset.name"
    assert "LF-AmazonTitles-131K" in problems[0].message


def test_resolved_recipe_fills_method_defaults(tmp_path):
    recipe = load_recipe(write(tmp_path, "r.yaml", BASE))
    resolved = recipe.resolved()
    assert resolved["method"]["name"] == "tfidf" and resolved["method"]["ngram_max"] == 2
    assert len(recipe.hash()) == 64


def test_dataset_problem_reported_alongside_key_problems(tmp_path):
    path = write(
        tmp_path,
        "r.yaml",
        "name: t\ndataset: {name: lf-amazontitle-131k}\nmethod: {name: tfidf}\ntraining: {epoch: 2}\n",
    )
    _, problems = check_recipe(path)
    assert {p.key for p in problems} == {"training.epoch", "dataset.name"}


def test_recipes_list_merges_includes_and_names_unreadable_recipes(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from xmcbench.cli import app

    (tmp_path / "base").mkdir()
    write(tmp_path, "base/data.yaml", "dataset: {name: synth-x, synthetic: {labels: 50, train: 100, test: 20}}\n")
    write(tmp_path, "good.yaml", "include: base/data.yaml\nname: g\nmethod: {name: tfidf}\n")
    write(tmp_path, "a-list.yaml", "- 1\n- 2\n")
    write(tmp_path, "broken.yaml", "name: [x\n")
    monkeypatch.setenv("XMCBENCH_RECIPES_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ["recipes", "list", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["good"]["dataset"] == "synth-x" and rows["good"]["method"] == "tfidf"
    assert rows["a-list"]["description"].startswith("cannot be read: a recipe is a mapping")
    assert rows["broken"]["description"].startswith("cannot be read: invalid YAML")


def test_validate_takes_shipped_names_like_run_and_says_why_a_name_is_unknown():
    from typer.testing import CliRunner

    from xmcbench.cli import app

    result = CliRunner().invoke(app, ["validate", "smoke/tfidf", "smoke/tfdf", "nowhere/*.yaml"])
    assert result.exit_code == 1
    assert "✓" in result.stdout and "smoke/tfidf.yaml" in result.stdout
    assert "did you mean smoke/tfidf" in result.stderr and "a pattern that matched no file" in result.stderr


def test_an_include_may_start_at_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    write(tmp_path / "home", "base.yaml", "dataset: {name: synth-x, synthetic: {labels: 50, train: 100, test: 20}}\n")
    recipe, problems = check_recipe(write(tmp_path, "r.yaml", "include: ~/base.yaml\nname: t\nmethod: {name: tfidf}\n"))
    assert problems == [] and recipe.dataset.name == "synth-x"


@pytest.mark.parametrize(
    "override, key",
    [
        ("training.epochs.x=3", "training.epochs"),  # made a section where a number goes
        ("expect.P@1=30", "expect"),  # a floor is checked with the others, at expect
        ("supervision.mode=few_shot", "supervision"),  # now the section lacks label_fraction
    ],
)
def test_an_override_inside_the_problems_key_is_named_as_its_cause(tmp_path, override, key):
    path = write(tmp_path, "r.yaml", BASE + "expect: {P@5: '>= 1'}\n")
    _, problems = check_recipe(path, ["training.lr=0.001", override])
    assert [(p.key, p.file) for p in problems] == [(key, f"--set {override}")]


def test_a_problem_the_file_has_without_the_override_stays_the_files(tmp_path):
    path = write(tmp_path, "r.yaml", BASE + "expect: {P@1: 30}\nevaluation: {top_k: 5}\n")
    _, problems = check_recipe(path, ["expect.P@5=>= 1", "evaluation.bootstrap=0"])
    assert {p.key: p.file for p in problems} == {"expect": str(path), "evaluation": str(path)}
