"""Recipe files that are not what they seem: one clear problem each, quickly (issue #9, point 10)."""

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xmcbench.recipe import RecipeError, read_recipe
from xmcbench.recipe.load import MAX_DEPTH
from xmcbench.run import check_recipe

GOOD = "name: t\ndataset: {name: synth-x, synthetic: {labels: 50, train: 100, test: 20}}\nmethod: {name: tfidf}\n"


def problems_of(path):
    recipe, problems = check_recipe(path)
    assert recipe is None and problems
    return " | ".join(str(p) for p in problems)


@pytest.mark.parametrize(
    "content, expected",
    [
        (GOOD.encode("utf-16"), "not UTF-8"),
        (b"name: t\n\xff\xfe garbage\n", "not UTF-8"),
        (bytes(range(256)) * 4, "not UTF-8"),
        (b"name: a\nname: b\ndataset: {name: x}\nmethod: {name: tfidf}\n", "duplicate key 'name'"),
        (b"name: t\nmethod: {name: tfidf, name: dexml}\n", "duplicate key 'name'"),
        (b"[" * 5000 + b"]" * 5000, "nested deeper"),
        (b"a: " + b"{b: " * 200 + b"1" + b"}" * 200, "nested deeper"),
        (b"- 1\n- 2\n", "a recipe is a mapping"),
        (b"name: t\ndataset:\n\tname: x\n", "indent with spaces: YAML does not allow tabs"),
    ],
)
def test_bad_files_give_one_clear_problem(tmp_path, content, expected):
    path = tmp_path / "r.yaml"
    path.write_bytes(content)
    assert expected in problems_of(path)


def test_a_folder_is_not_a_recipe(tmp_path):
    assert "is a folder" in problems_of(tmp_path)
    (tmp_path / "r.yaml").write_text("include: sub\n" + GOOD)
    (tmp_path / "sub").mkdir()
    assert "is a folder" in problems_of(tmp_path / "r.yaml")


def test_an_alias_bomb_is_refused(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    (tmp_path / "r.yaml").write_text("\n".join(lines) + "\n")
    start = time.perf_counter()
    assert "values" in problems_of(tmp_path / "r.yaml")
    assert time.perf_counter() - start < 30  # refused, not expanded (generous: never a speed test)


def test_a_diamond_of_includes_is_read_once_per_file(tmp_path, monkeypatch):
    """Each layer includes the next layer twice: 2**20 routes, 21 files."""
    from xmcbench.recipe import load

    for i in range(20):
        (tmp_path / f"l{i}.yaml").write_text(f"include: [l{i + 1}.yaml, l{i + 1}.yaml]\ntraining: {{epochs: {i}}}\n")
    (tmp_path / "l20.yaml").write_text(GOOD)
    reads = []
    real = load.parse_yaml
    monkeypatch.setattr(load, "parse_yaml", lambda path: reads.append(path) or real(path))
    data = read_recipe(tmp_path / "l0.yaml")
    assert data["training"]["epochs"] == 0 and data["method"]["name"] == "tfidf"
    assert len(reads) == 21


def test_too_many_included_files(tmp_path):
    for i in range(100):
        (tmp_path / f"l{i}.yaml").write_text(f"include: l{i + 1}.yaml\n")
    (tmp_path / "l100.yaml").write_text(GOOD)
    with pytest.raises(RecipeError, match="more than"):
        read_recipe(tmp_path / "l0.yaml")


def test_depth_limit_allows_real_recipes(tmp_path):
    nested = "a: " + "{b: " * (MAX_DEPTH - 2) + "1" + "}" * (MAX_DEPTH - 2) + "\n"
    (tmp_path / "r.yaml").write_text(nested)
    assert read_recipe(tmp_path / "r.yaml")["a"]


yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20))
yaml_values = st.recursive(
    yaml_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.dictionaries(
        st.sampled_from(
            [
                "name",
                "dataset",
                "method",
                "training",
                "evaluation",
                "supervision",
                "hardware",
                "output",
                "expect",
                "encoder",
                "junk",
                "include",
            ]
        ),
        yaml_values,
        max_size=8,
    )
)
def test_any_mapping_is_a_recipe_or_a_list_of_problems(tmp_path, data):
    """Fuzz: whatever the sections hold, validation answers with problems, never an exception."""
    import yaml

    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(data))
    recipe, problems = check_recipe(path)
    assert (recipe is None) == bool(problems)
    assert all(str(p) for p in problems)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=300))
def test_any_bytes_are_a_recipe_or_a_list_of_problems(tmp_path, raw):
    path = tmp_path / "fuzz.yaml"
    path.write_bytes(raw)
    recipe, problems = check_recipe(path)
    assert recipe is None and problems


@pytest.mark.parametrize(
    "text",
    [
        "base: &b {x: 1, y: 2}\nm: {<<: *b, x: 3}\n",  # the mapping's own key wins
        "b: &b {x: 1}\nc: &c {x: 2, y: 2}\nm: {<<: [*b, *c], z: 3}\n",  # the first merged mapping wins
        "a: &a {x: 1}\nc: {<<: &b {<<: *a, x: 2}, z: 3}\nd: *b\n",  # merged inline, then used again
        "=: 1\n",
    ],
)
def test_merge_keys_read_as_safe_load_reads_them(tmp_path, text):
    import yaml

    from xmcbench.recipe.load import parse_yaml

    (tmp_path / "r.yaml").write_text(text)
    assert parse_yaml(tmp_path / "r.yaml") == yaml.safe_load(text)


def test_a_recipe_with_merge_keys_validates(tmp_path):
    (tmp_path / "r.yaml").write_text(
        "name: t\ndataset: {name: synth-x, synthetic: {labels: 50, train: 100, test: 20}}\n"
        "method:\n  <<: {name: tfidf, ngram_max: 1}\n  ngram_max: 2\n"
    )
    recipe, problems = check_recipe(tmp_path / "r.yaml")
    assert problems == [] and recipe.method_config().ngram_max == 2


def test_x_keys_hold_anchors_and_are_ignored(tmp_path):
    """An anchor needs a key to live under; a top-level x- key is one the schema does not refuse."""
    (tmp_path / "r.yaml").write_text(
        "x-method: &m {name: tfidf, ngram_max: 1}\nname: t\n"
        "dataset: {name: synth-x, synthetic: {labels: 50, train: 100, test: 20}}\n"
        "method: {<<: *m, ngram_max: 2}\n"
    )
    recipe, problems = check_recipe(tmp_path / "r.yaml")
    assert problems == [] and recipe.method_config().ngram_max == 2
    (tmp_path / "r.yaml").write_text("y-method: 1\nname: t\nmethod: {name: tfidf}\n")
    _, problems = check_recipe(tmp_path / "r.yaml")
    assert [p.key for p in problems if "unknown" in p.message] == ["y-method"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("b: &b {x: 1}\nm: {<<: *b, y: 1, y: 2}\n", "duplicate key 'y'"),  # explicit keys stay unique
        ("m: {<<: {x: 1, x: 2}}\n", "duplicate key 'x'"),  # so do a merged mapping's own
        ("a: &a {<<: *a}\n", "a mapping merges itself"),
        ("m: {<<: 3}\n", "expected a mapping or list of mappings for merging"),
    ],
)
def test_merge_keys_do_not_hide_a_mistake(tmp_path, text, expected):
    (tmp_path / "r.yaml").write_text(text)
    assert expected in problems_of(tmp_path / "r.yaml")


def test_a_merge_key_bomb_is_refused(tmp_path):
    """Each level merges the one below ten times: 10**9 pairs once merged, refused before merging."""
    lines = ["a0: &a0 {" + ", ".join(f"k{j}: {j}" for j in range(10)) + "}"]
    lines += [f"a{i}: &a{i} {{<<: [{', '.join([f'*a{i - 1}'] * 10)}]}}" for i in range(1, 9)]
    (tmp_path / "r.yaml").write_text("\n".join(lines) + "\n")
    start = time.perf_counter()
    assert "merge keys (<<) expand to more than" in problems_of(tmp_path / "r.yaml")
    assert time.perf_counter() - start < 30  # generous: never a speed test
