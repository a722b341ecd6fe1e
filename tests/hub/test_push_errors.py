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


@pytest.mark.parametrize(
    "damage", [lambda r: r.pop("model"), lambda r: r["model"].pop("method"), lambda r: r.update(task=[])]
)
def test_a_record_without_its_model_or_task_is_one_line(hub, run_copy, damage):
    run_dir = run_copy("prime")
    record = json.loads((run_dir / "record.json").read_text())
    damage(record)
    (run_dir / "record.json").write_text(json.dumps(record))
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, "tester/x", dry_run=True)
    assert "the run record is damaged; run the recipe again" in _one_line(exc)


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


@pytest.mark.parametrize("where", ["user-folder", "run-folder", "inside-run", "above-run", "a-file"])
def test_out_that_is_not_a_push_folder_is_never_emptied(hub, run_copy, tmp_path, where):
    """--out is emptied before the folder is built: only a folder xmcbench built may be (a typo such as
    `--out .` or `--out /` once deleted whatever it named, the run included)."""
    run_dir = run_copy("dexml")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    (tmp_path / "a-file").write_text("keep me too")
    out = {
        "user-folder": mine,
        "run-folder": run_dir,
        "inside-run": run_dir / "checkpoints",
        "above-run": run_dir.parent,
        "a-file": tmp_path / "a-file",
    }[where]
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, "tester/x", dry_run=True, out=out)
    assert "--out" in _one_line(exc) and (
        "not empty" in str(exc.value) or "overlaps" in str(exc.value) or "not a folder" in str(exc.value)
    )
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert (mine / "notes.txt").read_text() == "keep me" and (run_dir / "record.json").is_file()


def test_out_built_before_is_rebuilt_and_an_unwritable_one_is_one_line(hub, run_copy, tmp_path):
    run_dir = run_copy("dexml")
    out = tmp_path / "upload"
    first = xh.push_run(run_dir, "tester/x", dry_run=True, out=out)
    (out / "stale.bin").write_bytes(b"from an older build")
    second = xh.push_run(run_dir, "tester/x", dry_run=True, out=out)  # its own folder: emptied and rebuilt
    assert second.folder.files == first.folder.files and not (out / "stale.bin").exists()
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder should be")
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, "tester/x", dry_run=True, out=blocker / "upload")
    assert "upload folder" in _one_line(exc) and blocker.read_text().startswith("a file")


def test_a_build_stopped_half_way_leaves_nothing_and_the_same_push_then_works(hub, run_copy, monkeypatch):
    """A full disk or Ctrl-C half-way leaves a folder the next push knows as its own (its marker file
    stays) and builds again, even though no model.json was written yet."""
    import errno

    from xmcbench.hub import folder as hub_folder

    run_dir = run_copy("dexml")
    real = hub_folder._write_st_config

    def full(out):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hub_folder, "_write_st_config", full)
    with pytest.raises(XmcbenchError, match="No space left on device"):
        xh.push_run(run_dir, "tester/x", dry_run=True)
    monkeypatch.setattr(hub_folder, "_write_st_config", real)
    built = xh.push_run(run_dir, "tester/x", dry_run=True)
    assert "xmcbench/model.json" in built.folder.files
    assert not (built.folder.path / hub_folder.BUILDING).exists()
    assert all(hub_folder.BUILDING not in name for name in built.folder.files)


def test_an_existing_out_is_built_in_place(hub, run_copy, tmp_path):
    """A mount point, or a folder whose parent is not writable, cannot be replaced by a rename: the
    upload is built inside the folder given, which keeps its owner and mode."""
    run_dir = run_copy("dexml")
    out = tmp_path / "mounted"
    out.mkdir()
    inode = out.stat().st_ino
    xh.push_run(run_dir, "tester/x", dry_run=True, out=out)
    again = xh.push_run(run_dir, "tester/x", dry_run=True, out=out)
    assert out.stat().st_ino == inode and "README.md" in again.folder.files


def test_a_git_clone_of_the_repo_is_never_rebuilt(hub, run_copy, tmp_path):
    run_dir = run_copy("dexml")
    clone = tmp_path / "clone"
    xh.push_run(run_dir, "tester/x", dry_run=True, out=clone)
    (clone / ".git").mkdir()  # the user cloned the model repo here: its history is not ours to drop
    (clone / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    with pytest.raises(XmcbenchError, match="not a folder xmcbench built"):
        xh.push_run(run_dir, "tester/x", dry_run=True, out=clone)
    assert (clone / ".git" / "HEAD").is_file()


def test_push_results_never_empties_a_project_that_looks_alike(hub, tmp_path, trained):
    finished_db = trained["db"]
    project = tmp_path / "project"
    (project / "runs").mkdir(parents=True)
    (project / "README.md").write_text("# my project\n")
    (project / "runs" / "exp1.log").write_text("keep")
    with pytest.raises(XmcbenchError, match="not a folder xmcbench built"):
        xh.push_results("tester/res", db=finished_db, dry_run=True, out=project)
    assert (project / "runs" / "exp1.log").read_text() == "keep"
    built = tmp_path / "built"
    first = xh.push_results("tester/res", db=finished_db, dry_run=True, out=built)
    again = xh.push_results("tester/res", db=finished_db, dry_run=True, out=built)  # its own: rebuilt
    assert again.folder.files == first.folder.files


def test_pushed_files_hold_no_local_paths(hub, run_copy, tiny_encoder_dir, tmp_path):
    """The card, record and recipe are public: the run's folders (encoder, recipe, command line) on this
    machine are cut to their last part."""
    run_dir = run_copy("prime")
    result = xh.push_run(run_dir, "tester/no-paths")
    files = hub.files("tester/no-paths")
    encoder_name = Path(tiny_encoder_dir).name
    for name in ("README.md", "record.json", "recipe.yaml"):
        text = files[name].decode()
        assert tiny_encoder_dir not in text and str(tmp_path) not in text, name
        assert f"<local>/{encoder_name}" in text, name
    assert "<local>/" in json.loads(files["record.json"])["model"]["encoder"]
    loaded = xh.load(str(result.folder.path))  # the published recipe still loads
    assert loaded.predict(["a query"], k=3).shape[0] == 1


def _stall(hub, what: str, release, where: str = "/commit/") -> list[str]:
    """The fake Hub answers requests whose path holds ``where`` with silence (``release`` ends it) or a
    dropped connection; returns the paths it did that to, as they come."""
    handle, hit = hub._handle, []

    def handler(h, method):
        if where in h.path:
            hit.append(h.path)
            if what == "silence":
                release.wait(30)
            else:
                h.connection.close()
                return None
        return handle(h, method)

    hub._handle = handler
    return hit


@pytest.mark.parametrize("what", ["silence", "dropped"])
def test_a_stalled_or_dropped_hub_ends_in_one_line_not_a_hang(hub, run_copy, monkeypatch, what):
    import threading

    # silence: a short wait ends it; dropped: a long one, so a slow machine cannot turn it into a timeout
    monkeypatch.setenv("XMCBENCH_HUB_TIMEOUT", "1" if what == "silence" else "30")
    release = threading.Event()
    _stall(hub, what, release)
    run_dir = run_copy("dexml")
    try:
        with pytest.raises(XmcbenchError) as exc:
            xh.push_run(run_dir, "tester/stalled")
    finally:
        release.set()
    text = _one_line(exc)
    assert ("did not answer within 1 s" if what == "silence" else "connection to the Hub broke off") in text
    assert "XMCBENCH_HUB_TIMEOUT" in text or what == "dropped"
    assert hub.url in text  # where it went: the address, never the token (checked by _one_line)
    assert "run the same push again" in text and xh.pushes(run_dir) == []


@pytest.mark.parametrize(
    ("what", "timeout", "said"),
    [
        ("silence", "1", "did not answer within 1 s"),
        ("dropped", "2", "kept failing for 2 s (last: "),
        ("retry-after", "3", "answered HTTP 503 and asked to wait 9 s, longer than XMCBENCH_HUB_TIMEOUT (3 s)"),
    ],
)
def test_an_upload_the_hub_stalls_is_not_retried_past_the_timeout(hub, run_copy, monkeypatch, what, timeout, said):
    """huggingface_hub tries an LFS upload 6 times, with pauses of 1-8 s or what Retry-After says: a
    stalled Hub cost 6 timeouts and more (29 s at 1 s). The push ends within XMCBENCH_HUB_TIMEOUT
    (plus at most one pause), so an object is tried once when silent, a few times when dropped."""
    import threading

    monkeypatch.setenv("XMCBENCH_HUB_TIMEOUT", timeout)
    release, handle = threading.Event(), hub._handle
    if what == "retry-after":
        hub.fail("lfs-upload", 503, times=99, headers={"Retry-After": "9"})
        hit: list[str] = []
    else:
        hit = _stall(hub, what, release, where="/lfs-objects/")
    run_dir = run_copy("dexml")
    try:
        with pytest.raises(XmcbenchError) as exc:
            xh.push_run(run_dir, "tester/stalled-upload")
    finally:
        release.set()
    text = _one_line(exc)
    assert f"cannot push run {run_dir.name} to tester/stalled-upload: the Hub at {hub.url} {said}" in text
    assert "run the same push again" in text and xh.pushes(run_dir) == []
    if what == "retry-after":
        hit = [r["path"] for r in hub.requests if r["method"] == "PUT"]
    tries = {path: hit.count(path) for path in hit}
    assert tries and max(tries.values()) <= (1 if what != "dropped" else 3), tries  # 6 without the bound

    hub._handle = handle  # the Hub is back: the next push is not held by the last one's stall
    hub._faults.clear()
    xh.push_run(run_dir, "tester/stalled-upload")
    assert len(xh.pushes(run_dir)) == 1


def test_push_results_ends_when_the_hub_asks_to_wait_past_the_timeout(hub, trained, tmp_path, monkeypatch):
    monkeypatch.setenv("XMCBENCH_HUB_TIMEOUT", "3")
    hub.fail("preupload", 429, times=99, headers={"Retry-After": "3600"})  # huggingface_hub would sleep 1 h
    with pytest.raises(XmcbenchError) as exc:
        xh.push_results("tester/res", db=trained["db"], out=tmp_path / "res")
    assert f"the Hub at {hub.url} answered HTTP 429 and asked to wait 3600 s" in _one_line(exc)
    assert "run push-results again" in str(exc.value)
    assert sum("/preupload/" in r["path"] for r in hub.requests) == 1


def test_the_timeout_is_put_back_after_a_push(hub, run_copy, monkeypatch):
    import huggingface_hub.constants as c
    from huggingface_hub.utils import _http

    before = _http._GLOBAL_CLIENT_FACTORY
    monkeypatch.setattr(c, "HF_HUB_DISABLE_XET", False)  # Xet is off during a push (the fake Hub has no Xet)
    handle, xet_off = hub._handle, []

    def handler(h, method):
        xet_off.append(c.HF_HUB_DISABLE_XET)
        return handle(h, method)

    hub._handle = handler
    xh.push_run(run_copy("dexml"), "tester/timeouts")
    assert xet_off and all(xet_off)  # uploads through LFS, which the push's timeout bounds
    assert _http._GLOBAL_CLIENT_FACTORY is before  # a library user's own client settings are left alone
    assert c.HF_HUB_DISABLE_XET is False


@pytest.mark.parametrize("value", ["abc", "0", "-5", "inf"])
def test_a_bad_timeout_is_refused_before_anything_is_sent(hub, run_copy, monkeypatch, value):
    monkeypatch.setenv("XMCBENCH_HUB_TIMEOUT", value)
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_copy("dexml"), "tester/x")
    assert "XMCBENCH_HUB_TIMEOUT" in _one_line(exc) and hub.requests == []


@pytest.mark.parametrize("license", ["MIT", "", "apache 2.0", "x" * 100])
def test_a_license_the_hub_would_refuse_is_refused_first(hub, run_copy, license):
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_copy("dexml"), "tester/x", license=license)
    assert "--license" in _one_line(exc) and hub.requests == []


def test_a_card_the_hub_refuses_says_why_not_to_rerun(hub, run_copy):
    """A 4xx for what was sent (here the Hub's README metadata check) fails the same way again: the Hub's
    reason is the news, not "run it again"."""
    hub._validate_yaml = lambda data: (400, {}, {"errors": [{"message": '"license" must be one of [mit]'}]})
    run_dir = run_copy("dexml")
    with pytest.raises(XmcbenchError) as exc:
        xh.push_run(run_dir, "tester/refused", license="apache-2.0")
    text = _one_line(exc)
    assert "the Hub refused it (400)" in text and '"license" must be one of [mit]' in text
    assert "run the same push again" not in text and xh.pushes(run_dir) == []


def test_push_results_reads_the_database_without_creating_one(hub, tmp_path):
    missing = tmp_path / "typo" / "results.duckdb"
    with pytest.raises(XmcbenchError) as exc:
        xh.push_results("tester/results", db=missing, dry_run=True)
    assert "no results database at" in _one_line(exc)
    assert not missing.parent.exists() and hub.requests == []
