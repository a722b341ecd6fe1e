"""Bad input to a push: one clear line each, nothing half-pushed claimed as done, no token shown."""

from __future__ import annotations

import json
import shutil

import pytest
from fake_hub import FAKE_TOKEN

import xmcbench.hub as xh
from xmcbench import paths
from xmcbench.errors import XmcbenchError

pytestmark = pytest.mark.slow  # every test here starts from a trained run (session fixture)
WRONG_TOKEN = "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42"


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and FAKE_TOKEN not in text and WRONG_TOKEN not in text
    return text


def test_no_token(hub, run_copy, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    run_dir = run_copy("dexml")
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, "tester/x")
    assert "no Hugging Face token" in _one_line(exc) and "HF_TOKEN" in str(exc.value)
    assert hub.requests == [] and xh.pushes(run_dir) == []


def test_wrong_token_is_refused_and_not_shown(hub, run_copy, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", WRONG_TOKEN)
    run_dir = run_copy("dexml")
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, "tester/x")
    assert "401" in _one_line(exc)
    assert xh.pushes(run_dir) == [] and ("model", "tester/x") not in hub.repos
    out = capsys.readouterr()
    assert WRONG_TOKEN not in out.out + out.err


@pytest.mark.parametrize("repo", ["noslash", "a/b/c", "org/bad name", "org/-bad", "org/a..b", "org/" + "x" * 100])
def test_invalid_repo_name_writes_nothing(hub, run_copy, repo):
    run_dir = run_copy("dexml")
    shutil.rmtree(paths.home() / "hub" / "push" / run_dir.name, ignore_errors=True)  # the session home is shared
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, repo)
    assert "--repo" in _one_line(exc)
    assert hub.requests == [] and not (paths.home() / "hub" / "push" / run_dir.name).exists()


def test_unfinished_run(hub, run_copy):
    run_dir = run_copy("prime")
    record = json.loads((run_dir / "record.json").read_text())
    record["status"] = "failed"
    (run_dir / "record.json").write_text(json.dumps(record))
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, "tester/x")
    assert "failed, not finished" in _one_line(exc)
    assert hub.requests == []


def test_missing_model_files(hub, run_copy):
    run_dir = run_copy("unidec")
    (run_dir / "checkpoints" / "model" / "heads.safetensors").unlink()
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, "tester/x")
    assert "model files are missing" in _one_line(exc) and "heads.safetensors" in str(exc.value)
    assert hub.requests == []


def test_a_method_without_a_model(hub, tmp_path):
    from xmcbench.hub.folder import check_model_files

    with pytest.raises(XmcbenchError, match="no trained model to publish"):
        check_model_files(tmp_path, "tfidf")


@pytest.mark.parametrize("kind,status", [("commit", 500), ("lfs-upload", 403)])
def test_interrupted_push_is_not_claimed_and_a_rerun_completes_it(hub, run_copy, kind, status):
    run_dir = run_copy("dexml")
    hub.fail(kind, status)
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, "tester/flaky")
    assert str(status) in _one_line(exc) or "try again" in str(exc.value) or "cannot push" in str(exc.value)
    assert xh.pushes(run_dir) == []  # nothing claimed
    assert hub.commit_count("tester/flaky") == 0  # the repo shows nothing of the failed attempt
    stored_before = set(hub.lfs)

    seen = len(hub.requests)
    result = xh.push_run(run_dir, "tester/flaky")
    assert hub.commit_count("tester/flaky") == 1
    assert hub.files("tester/flaky") == {f: (result.folder.path / f).read_bytes() for f in result.folder.files}
    resent = {r["path"].rsplit("/", 1)[1] for r in hub.requests[seen:] if r["method"] == "PUT"}
    assert not (resent & stored_before)  # what had arrived is not sent again
    (push,) = xh.pushes(run_dir)
    assert push["commit"] == result.commit


def test_cli_errors_are_one_red_line(hub, run_copy):
    from typer.testing import CliRunner

    from xmcbench.cli import app

    run_dir = run_copy("dexml")
    res = CliRunner().invoke(app, ["push", str(run_dir), "--repo", "not a repo"])
    assert res.exit_code == 1
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "ORG/NAME" in lines[0]
