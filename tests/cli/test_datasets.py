"""`xmcbench datasets ...` end to end: a synthetic dataset served over local HTTP, downloaded,
prepared, inspected, verified and tampered with; synth; Drive errors through the CLI."""

from __future__ import annotations

import gzip
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds the shared server helper
from httpserver import QUOTA_PAGE, FileServer  # noqa: E402

from xmcbench import paths  # noqa: E402
from xmcbench.cli.datasets import app  # noqa: E402
from xmcbench.data.catalog import LF_FILES, DatasetSpec, Source, get_spec, save_local_spec  # noqa: E402

runner = CliRunner()


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("COLUMNS", "200")  # wide tables: no cut-off names in assertions
    return tmp_path / "home"


@pytest.fixture
def server():
    with FileServer() as srv:
        yield srv


def _lines(path: Path) -> int:
    with gzip.open(path, "rb") as fh:
        return sum(1 for _ in fh)


@pytest.fixture
def served(synth_raw_dir, server, home):
    """The session's synthetic LF dataset packed as tar.gz (nested in a folder, like the XC archives)
    and served; registered as 'Served-1K' whose default source is a dead link, so --source is needed.
    Returns the URL, the raw files and their counts (train, test, labels)."""
    src = synth_raw_dir
    counts = tuple(_lines(src / name) for name in ("trn.json.gz", "tst.json.gz", "lbl.json.gz"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name in LF_FILES:
            tf.add(src / name, arcname=f"Served-1K/{name}")
    url = server.serve("mirror/Served-1K.tar.gz", buf.getvalue())
    dead = server.serve("gone.tar.gz", b"", fault="404")
    save_local_spec(
        DatasetSpec(
            name="Served-1K",
            raw_group="Served-1K",
            format="lf-json",
            query_text="title",
            files=list(LF_FILES),
            sources=[Source(kind="url", ref=dead, filename="gone.tar.gz", archive=True)],
            paper_counts=dict(zip(("train", "test", "labels"), counts)),
            propensity_a=0.55,
            propensity_b=1.5,
        )
    )
    return url, {name: (src / name).read_bytes() for name in LF_FILES}, counts


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_download_info_verify_tamper(served):
    url, files, (n_train, n_test, n_labels) = served
    result = invoke("download", "served-1k", "--source", url, "--quiet")
    assert result.exit_code == 0, result.output
    raw = paths.dataset_raw_dir("Served-1K")
    assert f"raw files: {raw}" in result.output and "prepared:" in result.output
    assert f"{n_train:,} train, {n_test:,} test, {n_labels:,} labels" in result.output
    assert {n: (raw / n).read_bytes() for n in LF_FILES} == files

    result = invoke("info", "Served-1K", "--quiet")
    assert result.exit_code == 0, result.output
    assert "train queries" in result.output and "head labels" in result.output and "tail labels" in result.output
    stats = json.loads(invoke("info", "Served-1K", "--json").output)
    assert (stats["counts"]["train"], stats["counts"]["test"], stats["counts"]["labels"]) == (n_train, n_test, n_labels)
    assert stats["stats"]["train"]["queries"] == n_train

    listing = invoke("list")
    assert listing.exit_code == 0
    row = next(line for line in listing.output.splitlines() if line.strip().startswith("Served-1K"))
    assert "prepared" in row and f"{n_train:,}" in row and "0.55/1.5" in row

    result = invoke("verify", "Served-1K")
    assert result.exit_code == 0 and "all 5 raw files match manifest.json" in result.output

    again = invoke("download", "Served-1K", "--source", url, "--quiet")
    assert again.exit_code == 0 and "already downloaded and verified" not in again.output  # quiet: says nothing
    again = invoke("download", "Served-1K", "--source", url)
    assert "already downloaded and verified" in again.output

    data = bytearray((raw / "lbl.json.gz").read_bytes())
    data[len(data) // 2] ^= 0x01
    (raw / "lbl.json.gz").write_bytes(bytes(data))
    result = invoke("verify", "Served-1K")
    assert result.exit_code == 1
    assert "lbl.json.gz: changed" in result.output and "error:" in result.output


def test_default_source_error_is_one_line(served):
    result = invoke("download", "Served-1K", "--quiet")  # the registered source answers 404
    assert result.exit_code == 1
    error = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "HTTP 404" in error[0] and "gone.tar.gz" in error[0]


def test_no_prepare_then_prepare(served):
    url = served[0]
    result = invoke("download", "Served-1K", "--source", url, "--no-prepare", "--quiet")
    assert result.exit_code == 0, result.output
    assert "prepared:" not in result.output and not paths.dataset_prepared_dir("Served-1K").exists()
    row = next(line for line in invoke("list").output.splitlines() if line.strip().startswith("Served-1K"))
    assert row.rstrip().endswith("raw")
    assert invoke("prepare", "Served-1K", "--quiet").exit_code == 0
    assert (paths.dataset_prepared_dir("Served-1K") / "meta.json").exists()
    assert "up to date" in invoke("prepare", "Served-1K").output


def test_info_and_verify_before_download(served):
    result = invoke("info", "Served-1K")
    assert result.exit_code == 1 and "not downloaded here; run `xmcbench datasets download Served-1K`" in result.output
    result = invoke("verify", "Served-1K")
    assert result.exit_code == 1 and "no manifest.json" in result.output
    result = invoke("info", "Served-1")
    assert result.exit_code == 1 and "did you mean Served-1K" in result.output


def test_synth_registers_prepares_and_verifies(home):
    result = invoke("synth", "Mini", "--labels", "40", "--train", "120", "--test", "30", "--seed", "2", "--quiet")
    assert result.exit_code == 0, result.output
    assert "synthetic dataset Mini" in result.output and "train queries" in result.output
    spec = get_spec("mini")
    assert spec.synthetic["n_labels"] == 40 and spec.synthetic["seed"] == 2
    manifest = json.loads((paths.dataset_raw_dir("Mini") / "manifest.json").read_text())
    assert sorted(manifest) == sorted(LF_FILES) and manifest["trn.json.gz"]["source"].startswith("synthetic")
    assert invoke("verify", "Mini").exit_code == 0
    stats = json.loads(invoke("info", "Mini", "--json").output)["counts"]
    assert (stats["train"], stats["test"], stats["labels"]) == (120, 30, 40)

    result = invoke("synth", "Mini", "--labels", "50", "--train", "120", "--test", "30")
    assert result.exit_code == 1 and "already exists with other parameters" in result.output
    result = invoke("synth", "Mini", "--labels", "50", "--train", "120", "--test", "30", "--force", "--quiet")
    assert result.exit_code == 0, result.output
    assert json.loads(invoke("info", "Mini", "--json").output)["counts"]["labels"] == 50

    result = invoke("download", "Mini", "--quiet")  # complete and verified: nothing to fetch
    assert result.exit_code == 0
    result = invoke("synth", "LF-AmazonTitles-131K", "--labels", "5", "--train", "5", "--test", "5")
    assert result.exit_code == 1 and "built-in" in result.output


def test_google_drive_quota_page_through_cli(home, monkeypatch):
    import gdown

    def quota(*, id, output, **kwargs):
        Path(output).write_bytes(QUOTA_PAGE)
        return output

    monkeypatch.setattr(gdown, "download", quota)
    result = invoke("download", "LF-AmazonTitles-131K", "--quiet")
    assert result.exit_code == 1
    error = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1
    assert "Google Drive refused the download of LF-AmazonTitles-131K" in error[0]
    assert "quota" in error[0] and "--source URL|DIR|hf://ORG/REPO" in error[0]
    assert [p.name for p in paths.dataset_raw_dir("LF-Amazon-131K").iterdir()] == []


def test_help_texts():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("list", "download", "prepare", "info", "verify", "synth"):
        assert command in result.output
    assert "hf://ORG/REPO" in invoke("download", "--help").output


def test_info_json_stdout_is_pure_json(synth_dataset):
    """Progress bars and messages go to stderr: `datasets info --json > f` gives a JSON file."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "FORCE_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "xmcbench", "datasets", "info", "synth-test", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # the cache was prepared by this call: its bars went to stderr
    assert data["counts"]["train"] == 1000
    assert data["rows_without_labels"] == {
        "train": data["stats"]["train"]["empty_rows"],
        "test": data["stats"]["test"]["empty_rows"],
    }


def test_info_shows_rows_without_labels(synth_dataset):
    result = invoke("info", "synth-test", "--quiet")
    assert result.exit_code == 0, result.output
    assert "rows without any label: 0 of 250 test, 0 of 1,000 train" in result.output


def test_read_only_or_full_home_is_one_error_line_and_a_current_cache_still_reads(home, monkeypatch):
    import errno

    from xmcbench import fsutil
    from xmcbench.cli import app as main_app

    assert invoke("synth", "Mini", "--labels", "40", "--train", "120", "--test", "30", "--quiet").exit_code == 0

    def read_only(path, **kwargs):  # what taking a lock does on a read-only $XMCBENCH_HOME
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(fsutil, "file_lock", read_only)
    result = invoke("info", "Mini", "--json")  # current cache: read without the lock
    assert result.exit_code == 0 and json.loads(result.output)["counts"]["labels"] == 40
    truth = home.parent / "truth.txt"
    truth.write_text("1 40\n0:1\n")
    result = runner.invoke(main_app, ["evaluate", "-p", str(truth), "--dataset", "Mini", "--format", "json"])
    assert result.exit_code == 1 and "shape (1, 40) but the ground truth has shape (30, 40)" in result.output
    for args, hint in [
        (("prepare", "Mini", "--force", "--quiet"), "writable or set XMCBENCH_HOME elsewhere"),
        (("synth", "Other", "--labels", "5", "--train", "5", "--test", "5"), "writable or set XMCBENCH_HOME"),
    ]:
        result = invoke(*args)
        assert result.exit_code == 1 and isinstance(result.exception, (SystemExit, type(None)))
        assert result.output.startswith("error: Read-only file system: ") and hint in result.output
        assert len(result.output.strip().splitlines()) == 1, result.output

    def full(path, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(fsutil, "file_lock", full)
    result = invoke("prepare", "Mini", "--force", "--quiet")
    assert result.exit_code == 1 and "No space left on device" in result.output and "larger disk" in result.output


def test_out_of_memory_is_one_error_line(home, monkeypatch):
    import xmcbench.data

    def too_big(*args, **kwargs):
        raise MemoryError  # numpy: "Unable to allocate 74.5 GiB" for --labels 10000000000

    monkeypatch.setattr(xmcbench.data, "load_dataset", too_big)
    result = invoke("synth", "Huge", "--labels", "10000000000", "--train", "1", "--test", "1")
    assert result.exit_code == 1 and isinstance(result.exception, (SystemExit, type(None)))
    assert result.output.startswith("error: out of memory") and len(result.output.strip().splitlines()) == 1


def test_another_source_for_verified_files_says_it_is_unused_and_force_fetches_it(served, server):
    url, files, _ = served
    assert invoke("download", "Served-1K", "--source", url, "--no-prepare", "--quiet").exit_code == 0
    mirror = server.serve("other-mirror/Served-1K.tar.gz", server._files["mirror/Served-1K.tar.gz"].data)
    result = invoke("download", "Served-1K", "--source", mirror, "--no-prepare", "--quiet")
    assert result.exit_code == 0, result.output
    assert f"already downloaded and verified in {paths.dataset_raw_dir('Served-1K')} (from {url})" in result.output
    assert "--source was not used: add --force to download them again from it" in result.output  # even with --quiet
    assert server.statuses("other-mirror/Served-1K.tar.gz") == []

    result = invoke("download", "Served-1K", "--source", mirror, "--no-prepare", "--force", "--quiet")
    assert result.exit_code == 0, result.output
    assert server.statuses("other-mirror/Served-1K.tar.gz") == [(None, 200)]
    raw = paths.dataset_raw_dir("Served-1K")
    assert {n: (raw / n).read_bytes() for n in LF_FILES} == files
    assert invoke("verify", "Served-1K").exit_code == 0
    again = invoke("download", "Served-1K", "--source", mirror, "--no-prepare", "--quiet")
    assert "--source was not used" not in again.output  # the manifest now names the mirror


def test_force_from_a_mirror_with_other_files_keeps_the_verified_ones(served, server):
    url, files, _ = served
    assert invoke("download", "Served-1K", "--source", url, "--no-prepare", "--quiet").exit_code == 0
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name in LF_FILES:
            data = gzip.compress(b'{"uid": "x", "title": "other", "target_ind": [0]}\n')
            info = tarfile.TarInfo(f"Served-1K/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    mirror = server.serve("bad-mirror/Served-1K.tar.gz", buf.getvalue())
    result = invoke("download", "Served-1K", "--source", mirror, "--force", "--quiet")
    assert result.exit_code == 1 and "differs from the copy recorded" in result.output
    raw = paths.dataset_raw_dir("Served-1K")
    assert {n: (raw / n).read_bytes() for n in LF_FILES} == files  # nothing replaced
    assert invoke("verify", "Served-1K").exit_code == 0


def test_the_same_source_again_says_nothing_when_quiet(served):
    url = served[0]
    assert invoke("download", "Served-1K", "--source", url, "--no-prepare", "--quiet").exit_code == 0
    again = invoke("download", "Served-1K", "--source", url, "--no-prepare", "--quiet")
    assert again.exit_code == 0 and "not used" not in again.output and "verified" not in again.output


def test_ctrl_c_during_download_says_the_same_command_resumes(served, monkeypatch):
    from xmcbench.data.fetch import http as http_mod

    def interrupted(out, block):
        raise KeyboardInterrupt

    monkeypatch.setattr(http_mod, "_write_chunk", interrupted)
    result = invoke("download", "Served-1K", "--source", served[0], "--quiet")
    assert result.exit_code == 130
    assert result.output.strip() == "interrupted: run the same command again to resume the download"


def test_ctrl_c_while_preparing_says_the_download_is_done(served, monkeypatch):
    import xmcbench.data

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(xmcbench.data, "load_dataset", interrupted)
    result = invoke("download", "Served-1K", "--source", served[0], "--quiet")
    assert result.exit_code == 130
    assert "interrupted while preparing: the raw files are downloaded" in result.output
    assert "`xmcbench datasets prepare Served-1K`" in result.output
