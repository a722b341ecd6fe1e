"""``xmcbench sweep`` and ``xmcbench table --sweep`` as a user types them."""

from __future__ import annotations

from sweep_helpers import write_recipe
from typer.testing import CliRunner

from xmcbench.cli import app

runner = CliRunner()


def _invoke(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_a_sweep_then_its_table_shows_every_seed(recipes):
    result = _invoke("sweep", str(recipes / "tfidf-a.yaml"), "--seeds", "0,1", "--jobs", "2", "--gpus", "none")
    assert result.exit_code == 0, result.output
    assert "2 finished" in result.stdout
    table = _invoke("table", "--sweep", "latest", "--format", "csv")
    assert table.exit_code == 0, table.output
    assert "tfidf-a seed=0" in table.stdout and "tfidf-a seed=1" in table.stdout
    status = _invoke("sweep", "--status", "latest")
    assert status.exit_code == 0 and "2 finished" in status.stdout


def test_a_run_below_its_floor_fails_the_sweep_and_says_which(tmp_path):
    recipe = write_recipe(tmp_path, "too-hopeful", expect={"P@1": ">= 99"})
    result = _invoke("sweep", str(recipe), "--gpus", "none")
    assert result.exit_code == 1
    assert "too-hopeful" in result.output and "expected >= 99" in result.output


def test_status_and_table_of_an_unknown_sweep_say_so():
    result = _invoke("sweep", "--status", "sweep-0000000000")
    assert result.exit_code == 1 and "no sweep 'sweep-0000000000'" in result.output
    assert _invoke("table", "--sweep", "latest").exit_code == 1


def test_no_recipes_is_an_error_that_says_what_to_give():
    result = _invoke("sweep")
    assert result.exit_code == 1 and "give recipe files" in result.output
