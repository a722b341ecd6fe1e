"""`xmcbench validate` and `xmcbench run`: which files are include fragments, and messages that
name what the user gave (the option they typed, the case they are in)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from xmcbench.cli import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def test_a_recipe_in_a_users_base_folder_is_checked_as_a_recipe(tmp_path):
    """A folder named base/ made `validate` skip a broken recipe that `run` refused."""
    (tmp_path / "base").mkdir()
    path = tmp_path / "base" / "exp.yaml"
    path.write_text("name: t\nmethod: {name: nosuch}\n")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1, result.output
    assert "dataset: required key is missing" in result.output and "unknown method 'nosuch'" in result.output
    assert "include fragment" not in result.output


def test_a_fragment_is_one_without_name_or_method_and_its_sections_are_checked(tmp_path):
    good = tmp_path / "data.yaml"
    good.write_text("dataset: {name: synth-x, synthetic: {labels: 50, train: 100, test: 20}}\n")
    result = runner.invoke(app, ["validate", str(good)])
    assert result.exit_code == 0 and "include fragment" in result.output, result.output
    bad = tmp_path / "eval.yaml"
    bad.write_text("evaluation: {k: [1], bootstrap: 1, topk: 5}\n")
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1, result.output
    assert "evaluation.bootstrap" in result.output and "evaluation.topk: unknown key" in result.output
    assert "required key is missing" not in result.output  # the recipes including it give name, method


def test_every_shipped_file_validates_as_the_readme_says(monkeypatch):
    """`xmcbench validate recipes/*.yaml recipes/*/*.yaml`, fragments included."""
    monkeypatch.chdir(REPO)
    files = sorted(str(p.relative_to(REPO)) for p in [*REPO.glob("recipes/*.yaml"), *REPO.glob("recipes/*/*.yaml")])
    assert "recipes/base/synthetic-smoke.yaml" in files
    result = runner.invoke(app, ["validate", *files])
    assert result.exit_code == 0, result.output
    assert result.output.count("include fragment") == len([f for f in files if f.startswith("recipes/base/")])


def test_run_says_which_of_recipe_and_resume_is_wrong():
    """A wrong command line exits 2, as click's own usage errors do, and points at --help."""
    neither = runner.invoke(app, ["run"])
    assert neither.exit_code == 2 and "not both" not in neither.output
    assert "error: give a recipe file (or a shipped recipe's name such as smoke/tfidf), or --resume RUN_ID" in (
        neither.output
    )
    assert "run --help`)" in neither.output
    both = runner.invoke(app, ["run", "smoke/tfidf", "--resume", "x"])
    assert both.exit_code == 2 and "error: give a recipe file or --resume RUN_ID, not both" in both.output
    new_and_old = runner.invoke(app, ["run", "--resume", "x", "--run-id", "y"])
    assert new_and_old.exit_code == 2 and "--run-id names a new run" in new_and_old.output


def test_run_names_the_option_the_user_gave(tmp_path):
    result = runner.invoke(app, ["run", "smoke/tfidf", "--db", str(tmp_path)])
    assert result.exit_code == 1 and f"error: --db {tmp_path} is a folder" in result.output, result.output
    assert "output.db" not in result.output
    afile = tmp_path / "afile"
    afile.write_text("")
    result = runner.invoke(app, ["run", "smoke/tfidf", "--runs-dir", str(afile)])
    assert result.exit_code == 1 and f"error: --runs-dir {afile} is a file" in result.output, result.output
