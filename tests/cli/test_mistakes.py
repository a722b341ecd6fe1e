"""A newcomer's slips: a mistyped command, option or value, a setting or smoke recipe that does not
exist. Each is one line on stderr saying what is wrong and where the right spelling is, never a box
or a traceback."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from xmcbench import paths
from xmcbench.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["rnu"], "error: No such command 'rnu'. Did you mean 'run'? (see `xmcbench --help`)"),
        (["run", "smoke/tfidf", "--sett", "a=1"], "error: No such option: --sett"),
        (
            ["runs", "list", "--status", "done"],
            "error: Invalid value for '--status': Value error, 'done' is not one of 'running', 'finished', "
            "'failed', 'interrupted' (see `xmcbench runs list --help`)",
        ),
        (["compare", "a"], "error: Missing argument 'run_b' (see `xmcbench compare --help`)"),
        (["datasets", "synth", "x", "--labels", "1", "--train", "5", "--test", "5"], "error: Invalid value for"),
    ],
)
def test_a_usage_mistake_is_one_line_with_exit_status_2(args, line):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(line) and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.output and "╭" not in result.output


def test_help_and_version_still_exit_0():
    assert runner.invoke(app, ["--version"]).exit_code == 0
    shown = runner.invoke(app, ["runs", "list", "--help"])
    assert shown.exit_code == 0 and "--status" in shown.stdout
    bare = runner.invoke(app, ["datasets"])  # no subcommand: the group's help, as before
    assert "download" in bare.output and "error:" not in bare.output


@pytest.mark.parametrize("setting", ["half", "zeroshot", ""])
def test_table_refuses_a_setting_no_row_can_have(setting):
    result = runner.invoke(app, ["table", "--setting", setting])
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"error: unknown --setting {setting!r}; choose full, few-shot (or one fraction, e.g. few-shot-1%) or zero-shot"
    )


@pytest.mark.parametrize("setting", ["zero_shot", "few", "few-shot-5%", "FULL"])
def test_table_takes_a_setting_or_its_start(setting):
    assert runner.invoke(app, ["table", "--setting", setting]).exit_code == 0


def test_the_tables_help_keeps_its_brackets():
    """Help text is rich markup: a bracketed [@REV] would be eaten as a style tag."""
    shown = runner.invoke(app, ["table", "--help"], env={"COLUMNS": "200"})
    assert "add @REV for a revision" in shown.stdout


def test_smoke_names_the_recipes_only_can_take(tmp_path):
    folder = tmp_path / "smoke"
    folder.mkdir()
    for name in ("alpha", "beta"):
        (folder / f"{name}.yaml").write_text("method: {name: tfidf}\n")
    result = runner.invoke(app, ["smoke", "--recipes-dir", str(folder), "--only", "alpah"])
    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: no smoke recipe alpah in {folder}; --only takes these names: alpha, beta"
    missing = runner.invoke(app, ["smoke", "--recipes-dir", str(tmp_path / "nowhere")])
    assert missing.stderr.startswith(f"error: no such folder: {tmp_path / 'nowhere'}; give --recipes-dir a folder")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert runner.invoke(app, ["smoke", "--recipes-dir", str(empty)]).stderr.strip() == (
        f"error: no smoke recipes (*.yaml) in {empty}"
    )


def test_datasets_info_keeps_the_version_on_its_line(tmp_path):
    """The version id is copied into --dataset-version: a narrow terminal folds it, never breaks it."""
    made = runner.invoke(app, ["datasets", "synth", "tiny", "--labels", "20", "--train", "60", "--test", "10", "-q"])
    assert made.exit_code == 0, made.output
    version = (paths.dataset_prepared_dir("tiny") / "meta.json").read_text()
    info = runner.invoke(app, ["datasets", "info", "tiny"], env={"COLUMNS": "40"})
    header = info.stdout.splitlines()[0]
    assert header.startswith("tiny  query text: title") and header.split("version ")[1] in version
    assert len(header.split("version ")[1]) >= 12


@pytest.mark.parametrize("answer", ["n\n", ""])  # "n", or no terminal to answer on (end of input)
def test_judge_cache_clear_unconfirmed_says_nothing_was_deleted(answer):
    result = runner.invoke(app, ["judge", "cache", "clear"], input=answer)
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: nothing deleted; answer y, or pass --yes to delete without being asked"
