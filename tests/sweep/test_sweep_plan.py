"""Expanding recipes × grid × seeds, and refusing a bad sweep before anything starts."""

from __future__ import annotations

import pytest
from sweep_helpers import write_recipe
from typer.testing import CliRunner

from xmcbench.cli import app
from xmcbench.sweep import SweepError, expand, parse_grid, parse_seeds


def test_two_recipes_two_values_three_seeds_are_twelve_runs(recipes):
    plan = expand([recipes / "tfidf-a.yaml", recipes / "tfidf-b.yaml"], grid=["evaluation.top_k=5,10"], seeds="0,1,2")
    assert len(plan.runs) == 12
    assert len({r.key for r in plan.runs}) == 12
    first = plan.runs[0]
    assert first.key == "tfidf-a top_k=5 seed=0"
    assert first.overrides == ("evaluation.top_k=5", "training.seed=0")
    assert first.recipe.evaluation.top_k == 5 and first.recipe.training.seed == 0
    assert {r.recipe.training.seed for r in plan.runs} == {0, 1, 2}


def test_the_dry_run_lists_every_run(recipes):
    result = CliRunner().invoke(
        app,
        [
            "sweep",
            str(recipes / "tfidf-a.yaml"),
            str(recipes / "tfidf-b.yaml"),
            "--grid",
            "evaluation.top_k=5,10",
            "--seeds",
            "0,1,2",
            "--dry-run",
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "12 runs (dry run)" in result.stdout
    assert result.stdout.count("new run") == 12
    assert "tfidf-b top_k=10 seed=2" in result.stdout


def test_the_same_sweep_has_the_same_id_and_another_sweep_another(recipes):
    a = expand([recipes / "tfidf-a.yaml"], seeds="0,1")
    assert expand([recipes / "tfidf-a.yaml"], seeds="0,1").sweep_id == a.sweep_id
    assert expand([recipes / "tfidf-a.yaml"], seeds="0,1,2").sweep_id != a.sweep_id
    assert expand([recipes / "tfidf-a.yaml"], seeds="0,1", sets=["evaluation.top_k=10"]).sweep_id != a.sweep_id


def test_an_unknown_grid_key_is_named_with_a_suggestion(recipes):
    with pytest.raises(SweepError) as err:
        expand([recipes / "tfidf-a.yaml"], grid=["training.lrr=1,2"], seeds="0,1")
    text = str(err.value)
    assert "training.lrr" in text and "did you mean 'lr'" in text
    assert (
        "--grid training.lrr: training.lrr: unknown key" in text and "all 4 runs" in text
    )  # one line, not one a value


def test_every_failing_run_is_named_before_anything_starts(recipes, tmp_path):
    with pytest.raises(SweepError) as err:
        expand([recipes / "tfidf-a.yaml"], grid=["evaluation.top_k=5,0,-3"])
    text = str(err.value)
    assert "top_k=0" in text and "top_k=-3" in text and "top_k=5" not in text.split("\n", 1)[1]
    assert not (tmp_path / "xmcbench-home" / "sweeps").exists()  # nothing written


def test_a_method_key_missing_from_one_recipe_names_that_recipes_runs(recipes, tmp_path):
    other = write_recipe(tmp_path, "zs", method={"name": "zero_shot"})
    with pytest.raises(SweepError) as err:
        expand([recipes / "tfidf-a.yaml", other], grid=["method.ngram_max=1,2"])
    assert "zs ngram_max=1" in str(err.value) and "tfidf-a" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "seeds"), [("0,1,2", [0, 1, 2]), ("0-3", [0, 1, 2, 3]), ("7", [7]), (None, []), ("1, 5", [1, 5])]
)
def test_seeds(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["a,b", "0,0", "-1", "1-", "5-2", "0-100000000"])
def test_bad_seeds_are_refused(text):
    with pytest.raises(SweepError):
        parse_seeds(text)


def test_grid_values_are_yaml():
    assert parse_grid(["evaluation.k=[1, 5],[1, 10]", "training.lr=1.0e-4,2.0e-4", "method.loss=a,b"]) == [
        ("evaluation.k", ([1, 5], [1, 10])),
        ("training.lr", (1e-4, 2e-4)),
        ("method.loss", ("a", "b")),
    ]


@pytest.mark.parametrize(
    "item", ["training.lr", "=1,2", "training.lr=", "training..lr=1", "training.seed=1,2", "a=[1,"]
)
def test_bad_grids_are_refused(item):
    with pytest.raises(SweepError):
        parse_grid([item])


def test_a_key_gridded_twice_is_refused():
    with pytest.raises(SweepError, match="twice"):
        parse_grid(["training.lr=1,2", "training.lr=3"])


@pytest.mark.parametrize(
    ("recipe", "reason"), [("prime.yaml", "single 80 GB A100"), ("unidec.yaml", "single NVIDIA A6000")]
)
def test_single_gpu_methods_refuse_several_gpus_with_the_papers_reason(recipe, reason):
    from xmcbench.run.shipped import recipes_dir

    with pytest.raises(SweepError) as err:
        expand([recipes_dir() / recipe], sets=["hardware.num_gpus=2"])
    assert "hardware.num_gpus" in str(err.value) and reason in str(err.value)


@pytest.mark.parametrize("item", ["training.lr=1,1", "evaluation.top_k=5,05", "method.ngram_max=[1, 2],[1,2]"])
def test_a_value_given_twice_is_refused(item):
    with pytest.raises(SweepError, match="repeats a value"):
        parse_grid([item])


def test_two_spellings_of_one_value_are_one_run_and_refused(recipes):
    """YAML reads 1e-4 as text and 0.0001 as a number; both resolve to lr 0.0001: the same run twice."""
    with pytest.raises(SweepError, match="the same run") as exc:
        expand([recipes / "tfidf-a.yaml"], grid=["training.lr=1e-4,0.0001"])
    assert "lr=1e-4 = tfidf-a lr=0.0001" in str(exc.value)


@pytest.mark.parametrize(
    ("sets", "grid", "seeds"), [(["training.lr=1"], ["training.lr=2,3"], None), (["training.seed=1"], [], "1,2")]
)
def test_a_key_both_set_and_swept_is_refused(recipes, sets, grid, seeds):
    with pytest.raises(SweepError, match="given with --set and swept too"):
        expand([recipes / "tfidf-a.yaml"], sets=sets, grid=grid, seeds=seeds)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jobs", "0"], "--jobs must be at least 1"),
        (["--launcher", "pbs"], "unknown --launcher 'pbs'"),
        (["--gpus", "0,0"], "distinct GPU ids"),
    ],
)
def test_a_dry_run_refuses_the_options_the_sweep_would(recipes, args, message):
    res = CliRunner().invoke(app, ["sweep", str(recipes / "tfidf-a.yaml"), "--dry-run", *args], env={"COLUMNS": "200"})
    assert res.exit_code == 1 and message in res.output, res.output
