"""``xmcbench judge eval`` and ``xmcbench judge cache`` with the deterministic judge."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from xmcbench.cli import app


def test_judge_eval_reports_quality_and_injection_then_the_cache_answers(tmp_path):
    runner = CliRunner()
    args = [
        "judge",
        "eval",
        "--dataset",
        "synth-judge-cli",
        "--synth",
        "50,120,20,0",
        "--backend",
        "fake",
        "--model",
        "word-overlap",
        "--sample",
        "15",
        "--json",
    ]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    out = json.loads(first.stdout)  # stderr carries the log lines
    assert (
        out["n_pairs"] == 30
        and 0 <= out["auc"] <= 1
        and set(out["groups"]) <= {"head", "torso", "tail"}
        and out["groups"]
    )
    assert sum(g["pairs"] for g in out["groups"].values()) == 30
    assert out["judge"]["asked"] == 30 and len(out["injection"]) == 2
    again = json.loads(runner.invoke(app, args + ["--no-injection"]).stdout)
    assert again["judge"]["asked"] == 0 and again["judge"]["cache_hits"] == 30
    stats = runner.invoke(app, ["judge", "cache", "stats"])
    assert "30 judgements" in stats.output
    assert runner.invoke(app, ["judge", "cache", "export", str(tmp_path / "j.csv")]).exit_code == 0
    assert "30 judgements deleted" in runner.invoke(app, ["judge", "cache", "clear", "--yes"]).output


def test_judge_eval_with_a_bad_prompt_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("Is {label_text} right?")
    result = CliRunner().invoke(
        app,
        [
            "judge",
            "eval",
            "--dataset",
            "synth-judge-cli",
            "--synth",
            "50,120,20,0",
            "--backend",
            "fake",
            "--model",
            "x",
            "--prompt",
            str(bad),
        ],
    )
    assert result.exit_code == 1 and "{doc} and {label_text}" in result.output
