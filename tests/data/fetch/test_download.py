"""Downloads against a real local HTTP server: resume, faults, archives, manifests, Drive and Hub errors."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import os
import socket
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/ holds the shared server helper
from httpserver import PERMISSION_PAGE, QUOTA_PAGE, FileServer  # noqa: E402

from xmcbench import paths  # noqa: E402
from xmcbench.data import fetch as dl  # noqa: E402
from xmcbench.data.catalog import LF_FILES, DatasetSpec, Source  # noqa: E402
from xmcbench.data.fetch import (  # noqa: E402
    download_dataset,
    fetch_url,
    parse_source,
    raw_status,
    read_manifest,
    record_manifest,
    verify_dataset,
)
from xmcbench.data.fetch import http as http_mod  # noqa: E402
from xmcbench.errors import DownloadError  # noqa: E402
from xmcbench.redact import redact  # noqa: E402


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "home"


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch):
    monkeypatch.setattr(http_mod, "BACKOFF_FACTOR", 0)  # retries without sleeping


@pytest.fixture
def server():
    with FileServer() as srv:
        yield srv


def _bytes(n: int, seed: int) -> bytes:
    return hashlib.shake_256(f"xmcbench-{seed}".encode()).digest(n)  # deterministic, incompressible


def _raw_files(seed: int = 0) -> dict[str, bytes]:
    return {name: _bytes(2_000 + 500 * i, seed * 10 + i) for i, name in enumerate(LF_FILES)}


def _targz(files: dict[str, bytes], prefix: str = "Tiny-1K/") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(prefix + name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _spec(*sources: Source, name: str = "Tiny-1K", files=LF_FILES) -> DatasetSpec:
    return DatasetSpec(
        name=name,
        raw_group=name,
        format="lf-json",
        query_text="title",
        files=list(files),
        sources=list(sources),
        paper_counts={"train": 10, "test": 5, "labels": 20},
        propensity_a=0.55,
        propensity_b=1.5,
    )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _listing(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


# --------------------------------------------------------------------------------------------
# parse_source / redact


def test_parse_source_kinds(tmp_path):
    src = parse_source("https://example.org/data/LF-Amazon-131K.raw.zip?x=1")
    assert (src.kind, src.filename, src.archive) == ("url", "LF-Amazon-131K.raw.zip", True)
    src = parse_source("http://example.org/trn.json.gz")
    assert (src.kind, src.filename, src.archive) == ("url", "trn.json.gz", False)
    assert parse_source("gdrive:1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E") == Source(
        kind="gdrive", ref="1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E"
    )
    for link in (
        "https://drive.google.com/file/d/1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E/view?usp=sharing",
        "https://drive.google.com/uc?id=1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E&export=download",
    ):
        assert parse_source(link) == Source(kind="gdrive", ref="1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E")
    assert parse_source("hf://org/repo") == Source(kind="hf", ref="org/repo")
    assert parse_source("hf://org/repo/LF-Amazon-131K/raw/") == Source(
        kind="hf", ref="org/repo", subdir="LF-Amazon-131K/raw"
    )
    assert parse_source(str(tmp_path)) == Source(kind="local", ref=str(tmp_path.resolve()))
    (tmp_path / "x.tar.gz").write_bytes(_targz({"a": b"a"}))
    src = parse_source(f"file://{tmp_path / 'x.tar.gz'}")
    assert (src.kind, src.ref, src.archive) == ("local", str((tmp_path / "x.tar.gz").resolve()), True)
    for bad, why in [
        ("hf://org", "hf://ORG/REPO"),
        ("gdrive:x", "Google Drive id"),
        (str(tmp_path / "nope"), "nor an existing"),
    ]:
        with pytest.raises(DownloadError, match=why):
            parse_source(bad)


def test_redact_hides_credentials():
    text = redact("GET https://user:pw@host/x.zip?token=hf_abcdefghijklmnop&part=2 with hf_zyxwvutsrqponm")
    assert "pw" not in text and "hf_abcdefghijklmnop" not in text and "hf_zyxwvutsrqponm" not in text
    assert "part=2" in text and "host/x.zip" in text


# --------------------------------------------------------------------------------------------
# fetch_url


def test_fetch_url_plain(server, tmp_path):
    data = _bytes(150_000, 1)
    target = fetch_url(server.serve("f.bin", data), tmp_path / "f.bin", progress=False)
    assert target.read_bytes() == data
    assert _listing(tmp_path) == ["f.bin"]


def test_dropped_connection_keeps_part_and_resumes(server, tmp_path):
    data = _bytes(200_000, 2)
    url = server.serve("f.bin", data, fault="drop", drops=1)
    with pytest.raises(
        DownloadError, match="dropped after 100,000 of 200,000 bytes.*run the same command again to resume"
    ):
        fetch_url(url, tmp_path / "f.bin", progress=False, resumes=0)
    assert _listing(tmp_path) == ["f.bin.part", "f.bin.part.validator"]  # never a final-named partial file
    assert (tmp_path / "f.bin.part").read_bytes() == data[:100_000]
    fetch_url(url, tmp_path / "f.bin", progress=False, resumes=0)
    assert _sha((tmp_path / "f.bin").read_bytes()) == _sha(data)
    assert server.statuses("f.bin") == [(None, 200), ("bytes=100000-", 206)]
    assert _listing(tmp_path) == ["f.bin"]


def test_dropped_connection_is_resumed_automatically(server, tmp_path):
    data = _bytes(200_000, 3)
    url = server.serve("f.bin", data, fault="drop", drops=2)
    fetch_url(url, tmp_path / "f.bin", progress=False)
    assert (tmp_path / "f.bin").read_bytes() == data
    assert server.statuses("f.bin") == [(None, 200), ("bytes=100000-", 206), ("bytes=150000-", 206)]


def _part_of_version(folder: Path, head: bytes, **validator) -> None:
    """A partial download ``f.bin.part`` whose validator file says it came from ``validator``."""
    (folder / "f.bin.part").write_bytes(head)
    (folder / "f.bin.part.validator").write_text(
        json.dumps({"etag": None, "last_modified": None, "size": None, **validator})
    )


def test_server_ignoring_range_restarts(server, tmp_path):
    data = _bytes(50_000, 4)
    url = server.serve("f.bin", data, fault="ignore-range")
    _part_of_version(tmp_path, b"stale bytes from some other file")
    fetch_url(url, tmp_path / "f.bin", progress=False)
    assert (tmp_path / "f.bin").read_bytes() == data
    assert server.statuses("f.bin") == [("bytes=32-", 200)]
    assert _listing(tmp_path) == ["f.bin"]


def test_part_as_long_as_file_restarts(server, tmp_path):
    data = _bytes(1_000, 5)
    url = server.serve("f.bin", data)
    _part_of_version(tmp_path, b"x" * 5_000)
    fetch_url(url, tmp_path / "f.bin", progress=False)
    assert (tmp_path / "f.bin").read_bytes() == data
    assert server.statuses("f.bin") == [("bytes=5000-", 416), (None, 200)]


def _interrupted(server, tmp_path, data: bytes, **serve) -> str:
    """Serve ``data``, download half of it and stop (the connection drops); returns the URL."""
    url = server.serve("f.bin", data, fault="drop", drops=1, **serve)
    with pytest.raises(DownloadError, match="run the same command again to resume"):
        fetch_url(url, tmp_path / "f.bin", progress=False, resumes=0)
    assert (tmp_path / "f.bin.part").read_bytes() == data[: len(data) // 2]
    return url


@pytest.mark.parametrize(
    "validators",
    [{}, {"etag": False}, {"last_modified": False}],
    ids=["both", "last-modified-only", "etag-only"],
)
def test_unchanged_file_resumes_with_if_range(server, tmp_path, validators):
    data = _bytes(200_000, 20)
    url = _interrupted(server, tmp_path, data, **validators)
    fetch_url(url, tmp_path / "f.bin", progress=False, resumes=0)
    assert (tmp_path / "f.bin").read_bytes() == data
    assert server.statuses("f.bin") == [(None, 200), ("bytes=100000-", 206)]  # the first half is not sent again
    if_range = server.if_range_headers("f.bin")[-1]
    if validators.get("etag", True):  # a strong ETag is preferred over the date
        assert if_range == f'"{_sha(data)[:16]}"'
    else:
        assert if_range is not None and if_range.endswith(" GMT")
    assert _listing(tmp_path) == ["f.bin"]


@pytest.mark.parametrize(
    "validators",
    [{}, {"etag": False}, {"last_modified": False}],
    ids=["both", "last-modified-only", "etag-only"],
)
def test_file_changed_on_the_server_is_fetched_whole(server, tmp_path, validators, capsys):
    old, new = _bytes(200_000, 21), _bytes(200_000, 22)
    url = _interrupted(server, tmp_path, old, **validators)
    server.serve("f.bin", new, **validators)  # a new version of the same size, at the same URL
    fetch_url(url, tmp_path / "f.bin", progress=True, resumes=0)
    assert _sha((tmp_path / "f.bin").read_bytes()) == _sha(new)
    assert server.statuses("f.bin") == [(None, 200), ("bytes=100000-", 200)]  # If-Range: the whole new file
    assert "changed on the server since the partial download" in capsys.readouterr().err
    assert _listing(tmp_path) == ["f.bin"]


def test_file_changed_on_a_server_ignoring_if_range_is_fetched_whole(server, tmp_path):
    old, new = _bytes(200_000, 23), _bytes(200_000, 24)
    url = _interrupted(server, tmp_path, old)
    server.serve("f.bin", new, fault="ignore-if-range")  # answers 206 with the new file's tail
    fetch_url(url, tmp_path / "f.bin", progress=False, resumes=0)
    assert _sha((tmp_path / "f.bin").read_bytes()) == _sha(new)
    assert server.statuses("f.bin") == [(None, 200), ("bytes=100000-", 206), (None, 200)]


def test_file_of_another_size_on_a_server_without_validators_is_fetched_whole(server, tmp_path):
    old, new = _bytes(200_000, 25), _bytes(300_000, 26)
    url = _interrupted(server, tmp_path, old, etag=False, last_modified=False)
    server.serve("f.bin", new, etag=False, last_modified=False)
    fetch_url(url, tmp_path / "f.bin", progress=False, resumes=0)
    assert _sha((tmp_path / "f.bin").read_bytes()) == _sha(new)
    assert server.if_range_headers("f.bin") == [None, None, None]
    assert server.statuses("f.bin") == [(None, 200), ("bytes=100000-", 206), (None, 200)]


@pytest.mark.parametrize("validator", [None, "not json", "[1, 2]", '{"etag": 5}'], ids=["none", "text", "list", "type"])
def test_part_without_a_readable_validator_starts_over(server, tmp_path, validator):
    data = _bytes(50_000, 27)
    url = server.serve("f.bin", data)
    (tmp_path / "f.bin.part").write_bytes(data[:1_000][::-1])  # bytes of unknown origin
    if validator is not None:
        (tmp_path / "f.bin.part.validator").write_text(validator)
    fetch_url(url, tmp_path / "f.bin", progress=False)
    assert (tmp_path / "f.bin").read_bytes() == data
    assert server.statuses("f.bin") == [(None, 200)]
    assert _listing(tmp_path) == ["f.bin"]


@pytest.mark.parametrize("fault, status", [("404", "HTTP 404 Not Found"), ("500", "HTTP 500 Internal Server Error")])
def test_http_errors(server, tmp_path, fault, status):
    url = server.serve("f.bin", b"data", fault=fault)
    with pytest.raises(DownloadError, match=f"{status} from {url}"):
        fetch_url(url, tmp_path / "f.bin", progress=False)
    assert _listing(tmp_path) == []


def test_connection_refused(tmp_path):
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(DownloadError, match="unreachable \\(connection refused\\)"):
        fetch_url(f"http://127.0.0.1:{port}/x.zip", tmp_path / "x.zip", progress=False)
    assert _listing(tmp_path) == []


def test_html_page_instead_of_file(server, tmp_path):
    url = server.serve("LF.raw.zip", b"", fault="html")
    with pytest.raises(
        DownloadError, match="returned a web page instead of the file \\(its download quota is exceeded"
    ):
        fetch_url(url, tmp_path / "LF.raw.zip", progress=False)
    assert _listing(tmp_path) == []


def test_disk_full_while_writing(server, tmp_path, monkeypatch):
    monkeypatch.setattr(http_mod, "CHUNK", 16_384)
    written = []

    def write(out, block):
        if written:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(len(block))
        out.write(block)

    monkeypatch.setattr(http_mod, "_write_chunk", write)
    with pytest.raises(DownloadError, match="disk full while downloading .* needed 100,000 bytes, [0-9,]+ bytes free"):
        fetch_url(server.serve("f.bin", _bytes(100_000, 6)), tmp_path / "f.bin", progress=False)
    assert _listing(tmp_path) == []  # the partial file was cleaned up


def test_not_enough_space_is_caught_before_writing(server, tmp_path, monkeypatch):
    class Usage:
        total, used, free = 10**9, 10**9 - 1_000, 1_000

    monkeypatch.setattr(dl.shutil, "disk_usage", lambda path: Usage)
    with pytest.raises(DownloadError, match="needed 100,000 bytes .*1,000 free"):
        fetch_url(server.serve("f.bin", _bytes(100_000, 7)), tmp_path / "f.bin", progress=False)
    assert _listing(tmp_path) == []


def test_interrupt_keeps_part_then_resumes(server, tmp_path, monkeypatch):
    data = _bytes(100_000, 8)
    url = server.serve("f.bin", data)
    monkeypatch.setattr(http_mod, "CHUNK", 16_384)
    calls = []

    def write(out, block):
        calls.append(1)
        out.write(block)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(http_mod, "_write_chunk", write)
    with pytest.raises(KeyboardInterrupt):
        fetch_url(url, tmp_path / "f.bin", progress=False)
    assert _listing(tmp_path) == ["f.bin.part", "f.bin.part.validator"]
    assert (tmp_path / "f.bin.part").read_bytes() == data[:32_768]
    monkeypatch.setattr(http_mod, "_write_chunk", lambda out, block: out.write(block))
    fetch_url(url, tmp_path / "f.bin", progress=False)
    assert (tmp_path / "f.bin").read_bytes() == data
    assert server.statuses("f.bin")[-1] == ("bytes=32768-", 206)


# --------------------------------------------------------------------------------------------
# download_dataset / verify_dataset


def test_download_archive_records_manifest_and_is_then_a_noop(server, home, capsys):
    files = _raw_files()
    url = server.serve("tiny.tar.gz", _targz(files))
    spec = _spec(Source(kind="url", ref=url, filename="tiny.tar.gz", archive=True))
    raw = download_dataset(spec, progress=False)
    assert raw == paths.dataset_raw_dir("Tiny-1K")
    assert _listing(raw) == sorted([*LF_FILES, "manifest.json"])  # no archive, staging or .part left
    for name, data in files.items():
        assert (raw / name).read_bytes() == data
    manifest = read_manifest(raw)
    assert {n: (e["sha256"], e["size"], e["source"]) for n, e in manifest.items()} == {
        n: (_sha(d), len(d), url) for n, d in files.items()
    }
    assert verify_dataset(spec).ok and raw_status(spec) == "complete"

    download_dataset(spec, progress=True)
    assert "already downloaded and verified" in capsys.readouterr().err
    assert len(server.statuses("tiny.tar.gz")) == 1  # nothing fetched the second time


def test_verify_reports_tampered_and_missing_files(server, home):
    files = _raw_files()
    spec = _spec(Source(kind="url", ref=server.serve("t.tar.gz", _targz(files)), filename="t.tar.gz", archive=True))
    raw = download_dataset(spec, progress=False)
    (raw / "lbl.json.gz").write_bytes(b"X" + files["lbl.json.gz"][1:])
    (raw / "tst.json.gz").unlink()
    report = verify_dataset(spec)
    assert not report.ok and raw_status(spec) == "partial"
    status = {f.name: f.status for f in report.files}
    assert status["lbl.json.gz"] == "changed" and status["tst.json.gz"] == "missing" and status["trn.json.gz"] == "ok"
    assert any("sha256" in p for p in report.problems())
    # A new download restores both from the same source; the manifest still holds the first hashes.
    download_dataset(spec, progress=False)
    assert verify_dataset(spec).ok
    assert (raw / "lbl.json.gz").read_bytes() == files["lbl.json.gz"]


def test_changed_upstream_content_is_refused(server, home):
    spec = _spec(
        Source(kind="url", ref=server.serve("t.tar.gz", _targz(_raw_files(0))), filename="t.tar.gz", archive=True)
    )
    raw = download_dataset(spec, progress=False)
    before = (raw / "manifest.json").read_bytes()
    server.serve("t.tar.gz", _targz(_raw_files(1)))  # the source now serves different files
    (raw / "trn.json.gz").unlink()
    with pytest.raises(DownloadError, match="differs from the copy recorded .* delete manifest.json to accept"):
        download_dataset(spec, progress=False)
    assert not (raw / "trn.json.gz").exists() and (raw / "manifest.json").read_bytes() == before
    assert _listing(raw) == sorted([*LF_FILES[1:], "manifest.json"])


def test_a_twin_of_another_form_is_compared_by_content_and_replaces_the_old_one(home, tmp_path):
    """trn.json fetched where trn.json.gz was recorded (or the reverse): the readers take either, so
    the same texts replace the old form (never two forms side by side, the stale one read) and other
    texts are refused like any changed file."""
    import gzip

    plain = {name.removesuffix(".gz"): data for name, data in _raw_files().items()}
    first = tmp_path / "gzipped"
    first.mkdir()
    for name, data in plain.items():
        (first / f"{name}.gz").write_bytes(gzip.compress(data))
    spec = _spec(Source(kind="local", ref=str(first)))
    raw = download_dataset(spec, progress=False)
    same = tmp_path / "plain-trn"
    same.mkdir()
    for name in plain:
        (same / f"{name}.gz").write_bytes((first / f"{name}.gz").read_bytes())
    (same / "trn.json.gz").unlink()
    (same / "trn.json").write_bytes(plain["trn.json"])
    download_dataset(
        spec.model_copy(update={"sources": [Source(kind="local", ref=str(same))]}), progress=False, force=True
    )
    assert (raw / "trn.json").read_bytes() == plain["trn.json"] and not (raw / "trn.json.gz").exists()
    assert "trn.json" in json.loads((raw / "manifest.json").read_text()) and verify_dataset(spec).ok
    # other texts under the other form again: refused, nothing touched
    other = tmp_path / "other"
    other.mkdir()
    for name in plain:
        data = gzip.compress(b"other texts\n") if name == "trn.json" else (first / f"{name}.gz").read_bytes()
        (other / f"{name}.gz").write_bytes(data)
    before = _listing(raw), (raw / "manifest.json").read_bytes()
    with pytest.raises(DownloadError, match=r"trn.json.gz \(content compared with the recorded trn.json\) .* differs"):
        download_dataset(
            spec.model_copy(update={"sources": [Source(kind="local", ref=str(other))]}), progress=False, force=True
        )
    assert (_listing(raw), (raw / "manifest.json").read_bytes()) == before


def test_download_without_manifest_is_not_complete(home):
    spec = _spec()
    raw = paths.dataset_raw_dir(spec.raw_group)
    raw.mkdir(parents=True)
    for name, data in _raw_files().items():
        (raw / name).write_bytes(data)
    report = verify_dataset(spec)
    assert not report.manifest_found and not report.ok and "not downloaded by xmcbench" in report.problems()[0]
    with pytest.raises(DownloadError, match="has no download source"):
        download_dataset(spec, progress=False)
    record_manifest(raw, list(spec.files), source="synthetic")
    assert verify_dataset(spec).ok and download_dataset(spec, progress=False) == raw


def test_interrupt_during_extraction_keeps_the_complete_archive(server, home, monkeypatch):
    files = _raw_files()
    url = server.serve("t.tar.gz", _targz(files))
    spec = _spec(Source(kind="url", ref=url, filename="t.tar.gz", archive=True))
    real_extract = dl.extract_archive

    def interrupted(archive, dest, on_progress=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(dl, "extract_archive", interrupted)
    with pytest.raises(KeyboardInterrupt):
        download_dataset(spec, progress=False)
    raw = paths.dataset_raw_dir("Tiny-1K")
    kept = _listing(raw)
    assert len(kept) == 2 and kept[0] == ".downloads" and kept[1].endswith("-t.tar.gz")  # no staging, no data files
    monkeypatch.setattr(dl, "extract_archive", real_extract)
    download_dataset(spec, progress=False)
    assert len(server.statuses("t.tar.gz")) == 1  # the complete archive was reused, not fetched again
    assert _listing(raw) == sorted([*LF_FILES, "manifest.json"])


def test_no_space_to_extract_keeps_the_complete_archive(server, home, monkeypatch):
    from xmcbench.data.fetch import extract as extract_mod

    url = server.serve("t.tar.gz", _targz(_raw_files()))
    spec = _spec(Source(kind="url", ref=url, filename="t.tar.gz", archive=True))
    real_usage = extract_mod.shutil.disk_usage

    class Full:
        total, used, free = 10**9, 10**9 - 1_000, 1_000

    # room for the download, none for its extraction
    monkeypatch.setattr(
        extract_mod.shutil, "disk_usage", lambda path: Full if ".archive" in str(path) else real_usage(path)
    )
    with pytest.raises(DownloadError, match=r"not enough disk space to extract .*complete download .* is kept"):
        download_dataset(spec, progress=False)
    raw = paths.dataset_raw_dir("Tiny-1K")
    kept = _listing(raw)
    assert len(kept) == 2 and kept[0] == ".downloads" and kept[1].endswith("-t.tar.gz")  # no staging, no data files
    monkeypatch.setattr(extract_mod.shutil, "disk_usage", real_usage)  # space was freed
    download_dataset(spec, progress=False)
    assert len(server.statuses("t.tar.gz")) == 1  # the archive was not fetched again
    assert _listing(raw) == sorted([*LF_FILES, "manifest.json"])


def test_synthetic_dataset_download_regenerates(home):
    from xmcbench.data.synth import make_synthetic_spec

    spec = make_synthetic_spec("Syn-1K", n_labels=20, n_train=30, n_test=10, seed=1)
    raw = download_dataset(spec, progress=False)
    assert sorted(read_manifest(raw)) == sorted(LF_FILES) and verify_dataset(spec).ok
    first = (raw / "trn.json.gz").read_bytes()
    (raw / "trn.json.gz").unlink()
    download_dataset(spec, progress=False)
    assert (raw / "trn.json.gz").read_bytes() == first  # same parameters, same bytes
    assert verify_dataset(spec).ok


def test_corrupt_archive_leaves_nothing(server, home):
    data = _targz({n: _bytes(60_000, i) for i, n in enumerate(LF_FILES)})
    url = server.serve("t.tar.gz", data[: len(data) * 2 // 3])  # served complete, but truncated content
    spec = _spec(Source(kind="url", ref=url, filename="t.tar.gz", archive=True))
    with pytest.raises(DownloadError, match="corrupt or truncated.*the downloaded copy was deleted: running the same"):
        download_dataset(spec, progress=False)
    assert _listing(paths.dataset_raw_dir("Tiny-1K")) == []


def test_missing_expected_files_are_listed(server, home):
    files = _raw_files()
    del files["lbl.json.gz"]
    spec = _spec(Source(kind="url", ref=server.serve("t.tar.gz", _targz(files)), filename="t.tar.gz", archive=True))
    with pytest.raises(DownloadError, match="lbl.json.gz not found in http.*found: Tiny-1K/filter_labels_test.txt"):
        download_dataset(spec, progress=False)
    assert _listing(paths.dataset_raw_dir("Tiny-1K")) == []


def test_unsafe_archive_is_refused_by_download(server, home, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name in ["trn.json.gz", "../../../../evil"]:
            info = tarfile.TarInfo(name)
            info.size = 4
            tf.addfile(info, io.BytesIO(b"evil"))
    spec = _spec(Source(kind="url", ref=server.serve("t.tgz", buf.getvalue()), filename="t.tgz", archive=True))
    with pytest.raises(DownloadError, match="refusing to extract"):
        download_dataset(spec, progress=False)
    assert not any(p.name == "evil" for p in tmp_path.rglob("*"))
    assert _listing(paths.dataset_raw_dir("Tiny-1K")) == []


def test_url_with_token_never_reaches_manifest_or_errors(server, home):
    files = _raw_files()
    url = server.serve("t.tar.gz", _targz(files)) + "?token=hf_SecretSecretSecret1"
    raw = download_dataset(_spec(), source=url, progress=False)
    assert "Secret" not in (raw / "manifest.json").read_text()
    server.serve("gone.tar.gz", b"", fault="404")
    with pytest.raises(DownloadError) as err:
        download_dataset(
            _spec(name="Other-1K"), source=server.url("gone.tar.gz") + "?token=hf_SecretSecretSecret1", progress=False
        )
    assert "HTTP 404" in str(err.value) and "Secret" not in str(err.value)


def test_multi_file_sources_and_plain_twins(server, home):
    files = {"trn.raw.json.gz": _bytes(3_000, 1), "tst.raw.json.gz": _bytes(2_000, 2), "Yf.txt": b"label -> A\n"}
    sources = [Source(kind="url", ref=server.serve(f"wiki/{n}", d), filename=n) for n, d in files.items()]
    spec = _spec(*sources, name="Wiki-Tiny", files=list(files))
    raw = download_dataset(spec, progress=False)
    assert {n: (raw / n).read_bytes() for n in files} == files
    # a mirror that ships trn.json instead of trn.json.gz satisfies the spec under its own name
    twin = _raw_files()
    twin["trn.json"] = twin.pop("trn.json.gz")
    raw = download_dataset(_spec(name="Twin-1K"), source=server.serve("twin.tar.gz", _targz(twin)), progress=False)
    assert (raw / "trn.json").read_bytes() == twin["trn.json"] and not (raw / "trn.json.gz").exists()
    assert "trn.json" in read_manifest(raw) and verify_dataset(_spec(name="Twin-1K")).ok


def test_local_directory_and_archive_sources(home, tmp_path):
    files = _raw_files()
    src = tmp_path / "mirror" / "nested"
    src.mkdir(parents=True)
    for name, data in files.items():
        (src / name).write_bytes(data)
    (tmp_path / "mirror" / "README").write_text("unrelated")
    raw = download_dataset(_spec(), source=str(tmp_path / "mirror"), progress=False)
    assert {n: (raw / n).read_bytes() for n in files} == files
    assert sorted(p.name for p in src.iterdir()) == sorted(files)  # the source is left as it was
    (tmp_path / "t.tar.gz").write_bytes(_targz(files))
    raw = download_dataset(_spec(name="Arch-1K"), source=str(tmp_path / "t.tar.gz"), progress=False)
    assert {n: (raw / n).read_bytes() for n in files} == files
    assert (tmp_path / "t.tar.gz").exists()
    (tmp_path / "cut.tar.gz").write_bytes(_targz(files)[:3_000])
    with pytest.raises(DownloadError, match=r"cut.tar.gz is corrupt or truncated .*download it again$"):
        download_dataset(_spec(name="Cut-1K"), source=str(tmp_path / "cut.tar.gz"), progress=False)
    assert (tmp_path / "cut.tar.gz").exists()  # the user's own file: never deleted, and not said to be


def test_files_put_into_the_raw_folder_by_hand_are_recorded(home):
    files = _raw_files()
    raw = paths.dataset_raw_dir("Tiny-1K")
    raw.mkdir(parents=True)
    for name, data in files.items():
        (raw / name).write_bytes(data)
    assert download_dataset(_spec(), source=str(raw), progress=False) == raw
    assert _listing(raw) == sorted([*LF_FILES, "manifest.json"])
    assert {n: (raw / n).read_bytes() for n in files} == files and verify_dataset(_spec()).ok


def test_ambiguous_files_need_a_subdir(home, tmp_path):
    for sub in ("a", "b"):
        (tmp_path / "m" / sub).mkdir(parents=True)
        for name, data in _raw_files().items():
            (tmp_path / "m" / sub / name).write_bytes(data)
    with pytest.raises(DownloadError, match="holds several trn.json.gz"):
        download_dataset(_spec(), source=str(tmp_path / "m"), progress=False)


# --------------------------------------------------------------------------------------------
# Google Drive (gdown) and Hugging Face Hub


def _fake_gdown(monkeypatch, payload: bytes | None = None, error: Exception | None = None):
    import gdown

    calls = []

    def download(*, id, output, quiet, resume, progress, timeout):
        calls.append(id)
        if error is not None:
            raise error
        Path(output).write_bytes(payload)
        progress(len(payload), len(payload))
        return output

    monkeypatch.setattr(gdown, "download", download)
    return calls


@pytest.mark.parametrize(
    "page, reason", [(QUOTA_PAGE, "download quota is exceeded"), (PERMISSION_PAGE, "not shared publicly")]
)
def test_gdrive_html_page_is_a_clear_error(home, monkeypatch, page, reason):
    _fake_gdown(monkeypatch, payload=page)
    spec = _spec(Source(kind="gdrive", ref="1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E", filename="Tiny.raw.zip", archive=True))
    with pytest.raises(DownloadError) as err:
        download_dataset(spec, progress=False)
    message = str(err.value)
    assert "Google Drive refused the download of Tiny-1K" in message and reason in message
    assert "--source URL|DIR|hf://ORG/REPO" in message and "\n" not in message
    assert _listing(paths.dataset_raw_dir("Tiny-1K")) == []


def test_gdrive_retrieval_error_is_a_clear_error(home, monkeypatch):
    import gdown

    _fake_gdown(
        monkeypatch,
        error=gdown.exceptions.FileURLRetrievalError("Too many users have viewed or downloaded this file recently."),
    )
    with pytest.raises(DownloadError, match="refused the download of Tiny-1K: its download quota is exceeded"):
        download_dataset(_spec(), source="gdrive:1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E", progress=False)


def test_gdrive_archive_download(home, monkeypatch):
    files = _raw_files()
    calls = _fake_gdown(monkeypatch, payload=_targz(files, prefix="Tiny-1K/Tiny-1K/"))
    spec = _spec(
        Source(
            kind="gdrive",
            ref="1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E",
            filename="Tiny.raw.zip",
            archive=True,
            subdir="Tiny-1K",
        )
    )
    raw = download_dataset(spec, progress=False)
    assert calls == ["1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E"]
    assert {n: (raw / n).read_bytes() for n in files} == files
    assert {e["source"] for e in read_manifest(raw).values()} == {"gdrive:1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E"}


def test_hf_offline_is_a_clear_error(home, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(DownloadError, match="hf://org/repo/sub: HF_HUB_OFFLINE is set"):
        download_dataset(_spec(), source="hf://org/repo/sub", progress=False)
    assert _listing(paths.dataset_raw_dir("Tiny-1K")) == []


def test_hf_error_never_shows_the_endpoints_password(home, monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def unreachable(*args, **kwargs):
        raise LocalEntryNotFoundError("cannot reach the endpoint")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "https://user:Pa55word@hub.example.org")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    with pytest.raises(DownloadError, match=r"hub\.example\.org\): cannot reach") as err:
        download_dataset(_spec(), source="hf://org/repo", progress=False)
    assert "Pa55word" not in str(err.value)


def test_hf_connection_dropped_mid_file_is_one_line_saying_to_rerun(home, monkeypatch):
    import httpx2
    import huggingface_hub

    def dropped(*args, **kwargs):
        try:
            raise httpx2.ReadTimeout("timed out")
        except httpx2.ReadTimeout as exc:  # huggingface_hub wraps the client's error in its own
            raise RuntimeError("download failed") from exc

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", dropped)
    with pytest.raises(DownloadError, match=r"connection to the Hub failed \(ReadTimeout: timed out\); run the same"):
        download_dataset(_spec(), source="hf://org/repo", progress=False)


def _fake_hub(monkeypatch, repo: dict[str, bytes]):
    """Replace snapshot_download by a stand-in that 'downloads' the matching files of ``repo``
    into local_dir, filtering with huggingface_hub's own pattern matcher."""
    import huggingface_hub
    from huggingface_hub.utils import filter_repo_objects

    calls = []

    def snapshot_download(repo_id, *, repo_type, allow_patterns, local_dir, local_files_only, endpoint):
        calls.append(
            {
                "repo_id": repo_id,
                "repo_type": repo_type,
                "patterns": allow_patterns,
                "offline": local_files_only,
                "endpoint": endpoint,
            }
        )
        for name in filter_repo_objects(list(repo), allow_patterns=allow_patterns):
            (Path(local_dir) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(local_dir) / name).write_bytes(repo[name])
        return str(local_dir)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return calls


def test_hf_repo_files_under_a_subdir(home, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")
    files = _raw_files()
    repo = {f"Tiny-1K/{n}": d for n, d in files.items()}
    repo.update({f"Other/{n}": b"other" for n in files})
    calls = _fake_hub(monkeypatch, repo)
    raw = download_dataset(_spec(), source="hf://org/xc-mirror/Tiny-1K", progress=False)
    assert {n: (raw / n).read_bytes() for n in files} == files
    assert len(calls) == 1 and calls[0]["repo_type"] == "dataset" and calls[0]["repo_id"] == "org/xc-mirror"
    assert calls[0]["endpoint"] == "http://127.0.0.1:1" and calls[0]["offline"] is False
    assert all(p.startswith("Tiny-1K/") for p in calls[0]["patterns"])
    assert {e["source"] for e in read_manifest(raw).values()} == {"hf://org/xc-mirror/Tiny-1K"}
    assert _listing(raw) == sorted([*LF_FILES, "manifest.json"])


def test_hf_repo_holding_only_the_archive(home, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    files = _raw_files()
    calls = _fake_hub(monkeypatch, {"Tiny-1K.tar.gz": _targz(files), "README.md": b"# mirror"})
    raw = download_dataset(_spec(), source="hf://org/xc-mirror", progress=False)
    assert {n: (raw / n).read_bytes() for n in files} == files
    assert len(calls) == 2 and any(p.endswith(".tar.gz") for p in calls[1]["patterns"])  # files first, then archives


def test_manifest_file_is_plain_json(server, home):
    raw = download_dataset(_spec(), source=server.serve("t.tar.gz", _targz(_raw_files())), progress=False)
    data = json.loads((raw / "manifest.json").read_text())
    assert sorted(data) == sorted(LF_FILES)
    assert set(data["trn.json.gz"]) == {"sha256", "size", "source", "downloaded_at"}


# --------------------------------------------------------------------------------------------
# retries and stale temps


def test_503_is_retried_then_succeeds(server, tmp_path):
    data = _bytes(20_000, 11)
    url = server.serve("busy.bin", data, fault="503", drops=2)
    fetch_url(url, tmp_path / "busy.bin", progress=False)
    assert (tmp_path / "busy.bin").read_bytes() == data
    assert server.statuses("busy.bin") == [(None, 503), (None, 503), (None, 200)]


def test_503_for_too_long_is_one_clear_error(server, tmp_path, monkeypatch):
    monkeypatch.setattr(http_mod, "RETRIES", 1)
    url = server.serve("busy.bin", b"x", fault="503", drops=5)
    with pytest.raises(DownloadError, match="HTTP 503 .*from"):
        fetch_url(url, tmp_path / "busy.bin", progress=False)
    assert len(server.statuses("busy.bin")) == 2 and _listing(tmp_path) == []


def test_retry_and_connection_logs_never_show_url_secrets(server, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    secret = "?token=Secret1234Secret&sig=Sig5678Sig"
    url = server.serve("busy.bin", b"data", fault="503", drops=1) + secret
    fetch_url(url.replace("http://", "http://user:Pa55word@"), tmp_path / "busy.bin", progress=False)
    with pytest.raises(DownloadError):
        fetch_url(f"http://127.0.0.1:{_free_port()}/x.zip{secret}", tmp_path / "x.zip", progress=False)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "busy.bin" in logged and "x.zip" in logged  # the retries were logged ...
    assert "Secret" not in logged and "Sig5678" not in logged and "Pa55word" not in logged  # ... redacted


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_messages_print_paths_as_written(capsys):
    from xmcbench.data.fetch.common import say_for

    path = "/data/[red]x/" + "long-folder-name/" * 20
    say_for(True)(f"raw files saved in {path}")
    say_for(False)("never shown")
    assert capsys.readouterr().err == f"raw files saved in {path}\n"  # no markup eaten, no line broken


def _dead_pid() -> int:
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_staging_of_a_dead_process_is_removed_and_part_files_kept(server, home):
    files = _raw_files()
    url = server.serve("t.tar.gz", _targz(files))
    spec = _spec(Source(kind="url", ref=url, filename="t.tar.gz", archive=True))
    raw = paths.dataset_raw_dir(spec.raw_group)
    dead = raw / f".staging.{_dead_pid()}.abcd1234.tmp"
    live = raw / f".staging.{os.getpid()}.beef0000.tmp"
    for folder in (dead, live):
        (folder / "part0").mkdir(parents=True)
    other = raw / ".downloads" / "0123456789-other.zip.part"  # another source's partial download
    other.parent.mkdir()
    other.write_bytes(b"half")
    download_dataset(spec, progress=False)
    assert not dead.exists() and live.is_dir()  # a live writer's temp folder is not touched
    assert other.read_bytes() == b"half"  # kept for its Range resume


def _offline(kind: str):
    import requests
    from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NameResolutionError, NewConnectionError

    url = "/uc?id=1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E&export=download"
    if kind == "dns":
        reason = NameResolutionError(
            "drive.google.com", None, OSError("[Errno -3] Temporary failure in name resolution")
        )
        return requests.ConnectionError(MaxRetryError(None, url, reason))
    if kind == "refused":
        reason = NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused")
        return requests.ConnectionError(MaxRetryError(None, url, reason))
    if kind == "no route":  # at once, not after a timeout (urllib3 files it under ConnectTimeoutError)
        reason = NewConnectionError(None, "Failed to establish a new connection: [Errno 113] No route to host")
        return requests.ConnectionError(MaxRetryError(None, url, reason))
    return requests.ConnectTimeout(MaxRetryError(None, url, ConnectTimeoutError(None, "timed out")))


@pytest.mark.parametrize(
    "kind, why",
    [
        ("dns", "its name did not resolve: no network, or no DNS"),
        ("refused", "connection refused"),
        ("no route", "no route to host"),
        ("timeout", "no answer within 60 s"),
    ],
)
def test_an_unreachable_google_drive_says_why_in_words(home, monkeypatch, kind, why):
    """Offline, requests' 'Max retries exceeded with url ... (Caused by ...)' named the pool and the
    URL, not the cause; the error says the Drive is unreachable and why, on one line."""
    _fake_gdown(monkeypatch, error=_offline(kind))
    with pytest.raises(DownloadError) as err:
        download_dataset(_spec(), source="gdrive:1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E", progress=False)
    message = str(err.value)
    assert f"Google Drive is unreachable ({why}); check the network and run the same command again" in message
    assert "Max retries" not in message and "\n" not in message
