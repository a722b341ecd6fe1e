"""Small things: help text reflowed, run on a folder, validate on base/ fragments, recipes by name, bad --db."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from xmcbench.cli import app, reflow

runner = CliRunner()


def test_help_paragraphs_are_reflowed():
    assert (
        reflow("One line\n    broken here.\n\n    - item\n    - item two\n")
        == "One line broken here.\n\n- item\n- item two"
    )
    result = runner.invoke(app, ["table", "--help"], env={"COLUMNS": "200"})
    assert (
        "By default a curated table: each paper's main-table rows, one per method and setting, in sections"
        in result.output
    )


def test_run_on_a_folder_is_one_line():
    result = runner.invoke(app, ["run", "recipes/"])
    assert result.exit_code == 1 and "is a folder, not a recipe" in result.output and "Traceback" not in result.output


def test_validate_skips_include_fragments():
    result = runner.invoke(app, ["validate", "recipes/base/synthetic-smoke.yaml", "recipes/smoke/tfidf.yaml"])
    assert result.exit_code == 0, result.output
    assert "include fragment" in result.output


def test_recipes_list_and_names():
    rows = json.loads(runner.invoke(app, ["recipes", "list", "--format", "json"]).stdout)
    names = {r["name"] for r in rows}
    assert {"smoke/tfidf", "dexml/lf-amazontitles-131k-all-negatives"} <= names
    assert all(set(r) == {"name", "method", "dataset", "description", "path"} for r in rows)
    from xmcbench.run.shipped import resolve_recipe

    assert resolve_recipe("dexml/lf-amazontitles-131k").name == "lf-amazontitles-131k-all-negatives.yaml"
    assert resolve_recipe("recipes/smoke/tfidf.yaml").is_file()
    bad = runner.invoke(app, ["run", "smoke/tfdif"])
    assert bad.exit_code == 1 and "smoke/tfidf" in bad.output  # did you mean


def test_read_commands_refuse_a_missing_db(tmp_path):
    for args in (["runs", "list"], ["table", "-d", "LF-AmazonTitles-131K"], ["runs", "show", "x"]):
        result = runner.invoke(app, [*args, "--db", str(tmp_path / "nope.duckdb")])
        assert result.exit_code == 1 and "no results database" in result.output, (args, result.output)
        assert not (tmp_path / "nope.duckdb").exists()
