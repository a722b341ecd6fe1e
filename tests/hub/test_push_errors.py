"""Bad input to a push: one clear line each, nothing half-pushed claimed as done, no token shown."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

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


def test_the_stored_login_is_used_without_hf_token(hub, run_copy, monkeypatch, capsys):
    """`hf auth login` stores the token in a file; push takes it from there like huggingface_hub does."""
    import huggingface_hub.constants as c

    monkeypatch.delenv("HF_TOKEN")
    login = Path(c.HF_TOKEN_PATH)  # the hub fixture points it into the test's temp folder
    login.parent.mkdir(parents=True, exist_ok=True)
    login.write_text(FAKE_TOKEN)
    run_dir = run_copy("dexml")
    result = xh.push_run(run_dir, "tester/from-login")
    assert result.commit and xh.pushes(run_dir)[0]["commit"] == result.commit
    assert any(r["headers"].get("authorization") == f"Bearer {FAKE_TOKEN}" for r in hub.requests)
    out = capsys.readouterr()
    assert FAKE_TOKEN not in out.out + out.err
    assert all(FAKE_TOKEN.encode() not in data for data in hub.files("tester/from-login").values())


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


@pytest.mark.parametrize("status", ["failed", "interrupted", "running"])
def test_unfinished_run(hub, run_copy, status):
    run_dir = run_copy("prime")
    record = json.loads((run_dir / "record.json").read_text())
    record["status"] = status
    (run_dir / "record.json").write_text(json.dumps(record))
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, "tester/x")
    assert f"{status}, not finished" in _one_line(exc) and "--resume" in str(exc.value)
    assert hub.requests == [] and xh.pushes(run_dir) == []


@pytest.mark.parametrize(
    "method,missing",
    [
        ("dexml", "label_embeddings.npy"),
        ("dexml", "encoder/model.safetensors"),
        ("dexml", "encoder/tokenizer_config.json"),
        ("unidec", "heads.safetensors"),
        ("prime", "prototype_network.safetensors"),
        ("prime", "label_prototypes.npy"),
    ],
)
def test_missing_model_files(hub, run_copy, method, missing):
    run_dir = run_copy(method)
    (run_dir / "checkpoints" / "model" / missing).unlink()
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, "tester/x")
    assert "model files are missing" in _one_line(exc) and missing in str(exc.value)
    assert hub.requests == [] and xh.pushes(run_dir) == []


@pytest.mark.parametrize("revision", ["bad branch", "a..b", "x.lock", "-x"])
def test_invalid_revision(hub, run_copy, revision):
    run_dir = run_copy("dexml")
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, "tester/x", revision=revision)
    assert "--revision" in _one_line(exc)
    assert hub.requests == []


def test_a_method_without_a_model(hub, tmp_path):
    from xmcbench.hub.folder import check_model_files

    with pytest.raises(XmcbenchError, match="no trained model to publish"):
        check_model_files(tmp_path, "tfidf")


@pytest.mark.parametrize("kind,status,after", [("commit", 500, 0), ("lfs-upload", 403, 1)])
def test_interrupted_push_is_not_claimed_and_a_rerun_completes_it(hub, run_copy, kind, status, after):
    """The connection dies after some LFS objects arrived (or at the commit): nothing is claimed, and
    the rerun sends only what is missing and commits."""
    run_dir = run_copy("unidec")  # three LFS objects: the encoder, the label arrays, the heads
    record_before = (run_dir / "record.json").read_bytes()
    hub.fail(kind, status, after=after)
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, "tester/flaky")
    assert f"cannot push run {run_dir.name} to tester/flaky" in _one_line(exc)
    assert str(status) in str(exc.value) and "run the same push again" in str(exc.value)
    if kind == "lfs-upload":
        assert "the upload of " in str(exc.value)  # which file, not a guess about the token
    assert xh.pushes(run_dir) == [] and not (run_dir / "hub.json").exists()  # nothing claimed
    assert (run_dir / "record.json").read_bytes() == record_before
    assert hub.commit_count("tester/flaky") == 0  # the repo shows nothing of the failed attempt
    stored_before = set(hub.lfs)
    assert stored_before if kind == "lfs-upload" else len(stored_before) == 3  # part (or all) had arrived

    seen = len(hub.requests)
    result = xh.push_run(run_dir, "tester/flaky")
    assert hub.commit_count("tester/flaky") == 1
    assert hub.files("tester/flaky") == {f: (result.folder.path / f).read_bytes() for f in result.folder.files}
    resent = {r["path"].rsplit("/", 1)[1] for r in hub.requests[seen:] if r["method"] == "PUT"}
    assert not (resent & stored_before)  # what had arrived is not sent again
    assert resent | stored_before == set(hub.lfs)  # and what had not, is
    (push,) = xh.pushes(run_dir)
    assert push["commit"] == result.commit == hub.repos[("model", "tester/flaky")].branches["main"]


def test_cli_wrong_token_is_one_red_line(hub, run_copy, monkeypatch):
    from typer.testing import CliRunner

    from xmcbench.cli import app

    monkeypatch.setenv("HF_TOKEN", WRONG_TOKEN)
    run_dir = run_copy("prime")
    res = CliRunner().invoke(app, ["push", str(run_dir), "--repo", "tester/x"])
    assert res.exit_code == 1
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "401" in lines[0], res.output
    assert WRONG_TOKEN not in res.output and xh.pushes(run_dir) == []


def test_cli_errors_are_one_red_line(hub, run_copy):
    from typer.testing import CliRunner

    from xmcbench.cli import app

    run_dir = run_copy("dexml")
    res = CliRunner().invoke(app, ["push", str(run_dir), "--repo", "not a repo"])
    assert res.exit_code == 1
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "ORG/NAME" in lines[0]
