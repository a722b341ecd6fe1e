"""``xmcbench smoke --jobs N``: the smoke recipes as one sweep, each run its own process, floors checked."""

from __future__ import annotations

import subprocess

from sweep_helpers import cli_env, write_recipe, xmcbench

from xmcbench.sweep.smoke import run_smoke_together


def test_runs_every_recipe_fresh_and_reports_broken_ones(recipes):
    (recipes / "broken.yaml").write_text("name: broken\nmethod: {name: tfidf, no_such_key: 1}\n")
    (recipes / "tfidf-b.yaml").unlink()
    seen = []
    outcomes = {o.recipe.stem: o for o in run_smoke_together(recipes, jobs=2, on_change=seen.append)}
    assert sorted(outcomes) == ["broken", "tfidf-a"]
    assert outcomes["tfidf-a"].ok and outcomes["tfidf-a"].result.scores["P@1"] > 0
    assert outcomes["tfidf-a"].result.run_dir.is_dir()
    assert not outcomes["broken"].ok and outcomes["broken"].result is None and outcomes["broken"].failures
    assert seen  # the caller saw the sweep's progress
    # Again: every run is fresh (a smoke check does not reuse the earlier results).
    again = {o.recipe.stem: o for o in run_smoke_together(recipes, jobs=2, only=["tfidf-a"])}
    assert again["tfidf-a"].result.run_dir != outcomes["tfidf-a"].result.run_dir


def test_cli_jobs_prints_the_table_and_fails_on_a_missed_floor(recipes):
    (recipes / "tfidf-b.yaml").unlink()
    write_recipe(recipes, "tfidf-floor", expect={"P@1": ">= 101"})  # a floor no run can meet
    done = subprocess.run(
        xmcbench("smoke", "--recipes-dir", str(recipes), "--jobs", "2", "--quiet"),
        env=cli_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr
    assert "tfidf-a" in done.stdout and "tfidf-floor" in done.stdout  # both rows of the table
    assert "tfidf-floor" in done.stderr and "P@1" in done.stderr


def test_cli_rejects_zero_jobs(recipes):
    from typer.testing import CliRunner

    from xmcbench.cli import app

    result = CliRunner().invoke(app, ["smoke", "--recipes-dir", str(recipes), "--jobs", "0"])
    assert result.exit_code != 0 and "--jobs must be at least 1" in result.output
