"""Download a dataset's raw files: resumable, atomic, checksummed, safely extracted.

``download_dataset("LF-AmazonTitles-131K")`` fetches the raw group's files from the registry's
default source (or one given as ``source=``), extracts archives, finds the expected files (archives
nest them in folders), moves them into ``paths.dataset_raw_dir(spec.raw_group)`` and records a
``manifest.json`` there::

    {"trn.json.gz": {"sha256": "...", "size": 123, "source": "gdrive:1Wuq...", "downloaded_at": "..."}, ...}

Later calls and ``verify_dataset`` recompute the sha256 of every file against that manifest (no
official checksums are published for the XC datasets, so the first download is the reference).

Sources (``parse_source``): ``gdrive:ID`` (or a drive.google.com link) via gdown; ``http(s)://``
URLs, resumed with HTTP Range from a ``.part`` file; ``hf://ORG/REPO[/subdir]`` Hugging Face Hub
dataset repos (honours ``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE``); a local directory or
archive.

Guarantees: a file only ever gets its final name once complete and verified (an interrupted
download keeps only its ``.part`` file, which the next call resumes); work happens in hidden
folders inside the raw folder (``.downloads/``, ``.staging-*``) that are cleaned up; every failure
is one ``DownloadError`` line saying what failed, where, and what to do. Credentials in URLs and
Hugging Face tokens are never printed or written to the manifest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import http.client
import inspect
import json
import os
import re
import shutil
import socket
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable, Iterator, Literal

from rich.console import Console
from rich.filesize import decimal as human_size

from xmcbench import __version__, paths
from xmcbench.data.fetch.extract import archive_kind, extract_archive, is_archive_name
from xmcbench.errors import DownloadError

if TYPE_CHECKING:
    from xmcbench.data.catalog import DatasetSpec, Source

__all__ = [
    "MANIFEST_NAME",
    "FileCheck",
    "VerifyReport",
    "download_dataset",
    "verify_dataset",
    "parse_source",
    "describe_source",
    "redact",
    "read_manifest",
    "record_manifest",
    "write_manifest",
    "raw_status",
    "fetch_url",
    "sha256_file",
]

MANIFEST_NAME = "manifest.json"
_DOWNLOADS = ".downloads"  # fetched archives/files and their .part files, inside the raw folder
_CHUNK = 1 << 20  # 1 MiB reads: fast, and a smooth progress bar
_TIMEOUT_S = 60  # seconds without a byte before a connection counts as dropped
_RESUMES = 3  # automatic resumes after a dropped connection, per file
_SOURCE_HELP = "pass --source URL|DIR|hf://ORG/REPO"

_console = Console(stderr=True)


# --------------------------------------------------------------------------------------------
# sources


def parse_source(text: str) -> "Source":
    """A ``Source`` from what a user typed after ``--source``.

    ``https://host/x.tar.gz`` / ``http://..`` -> url (archive judged by the name);
    ``https://drive.google.com/file/d/ID/..`` or ``gdrive:ID`` -> gdrive;
    ``hf://ORG/REPO[/subdir]`` -> Hugging Face Hub dataset repo; an existing directory or file
    (``file://`` allowed) -> local.
    """
    from xmcbench.data.catalog import Source

    raw = text.strip()
    low = raw.lower()
    if low.startswith("gdrive:"):
        file_id = raw[len("gdrive:"):].strip()
        if not re.fullmatch(r"[A-Za-z0-9_-]{10,}", file_id):
            raise DownloadError(f"--source {text!r}: a Google Drive id looks like gdrive:1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E")
        return Source(kind="gdrive", ref=file_id)
    if low.startswith(("http://", "https://")):
        drive_id = _google_drive_id(raw)
        if drive_id:
            return Source(kind="gdrive", ref=drive_id)
        name = PurePosixPath(urllib.parse.unquote(urllib.parse.urlsplit(raw).path)).name or "download"
        return Source(kind="url", ref=raw, filename=name, archive=is_archive_name(name))
    if low.startswith("hf://"):
        parts = [p for p in raw[len("hf://"):].split("/") if p]
        if len(parts) < 2:
            raise DownloadError(f"--source {text!r}: a Hugging Face dataset repo is written hf://ORG/REPO[/subdir]")
        return Source(kind="hf", ref=f"{parts[0]}/{parts[1]}", subdir="/".join(parts[2:]) or None)
    if low.startswith("file://"):
        raw = urllib.request.url2pathname(urllib.parse.urlsplit(raw).path)
    path = Path(raw).expanduser()
    if path.is_dir():
        return Source(kind="local", ref=str(path.resolve()))
    if path.is_file():
        archive = is_archive_name(path.name) or archive_kind(path) is not None
        return Source(kind="local", ref=str(path.resolve()), filename=path.name, archive=archive)
    raise DownloadError(
        f"--source {text!r} is not an http(s):// URL, hf://ORG/REPO[/subdir], gdrive:ID, "
        "nor an existing directory or archive"
    )


def _google_drive_id(url: str) -> str | None:
    parts = urllib.parse.urlsplit(url)
    if parts.hostname not in ("drive.google.com", "docs.google.com", "drive.usercontent.google.com"):
        return None
    match = re.search(r"/d/([A-Za-z0-9_-]{10,})", parts.path)
    if match:
        return match.group(1)
    ids = urllib.parse.parse_qs(parts.query).get("id")
    return ids[0] if ids else None


_SECRET_QUERY = re.compile(r"(token|key|secret|sig|signature|auth|password|credential)", re.I)
_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{8,}")


def redact(text: str) -> str:
    """``text`` with URL passwords, secret-looking query values and Hugging Face tokens masked."""
    text = _HF_TOKEN.sub("hf_***", text)

    def fix_url(match: re.Match) -> str:
        parts = urllib.parse.urlsplit(match.group(0))
        netloc = parts.netloc
        if "@" in netloc:
            netloc = "***@" + netloc.rsplit("@", 1)[1]
        query = urllib.parse.urlencode(
            [(k, "***" if _SECRET_QUERY.search(k) else v)
             for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)],
            safe="*",
        )
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))

    return re.sub(r"https?://[^\s'\"]+", fix_url, text)


def describe_source(source: "Source") -> str:
    """How a source is written in messages and in the manifest (no credentials)."""
    if source.kind == "gdrive":
        return f"gdrive:{source.ref}"
    if source.kind == "hf":
        return f"hf://{source.ref}" + (f"/{source.subdir}" if source.subdir else "")
    if source.kind == "synthetic":
        return "synthetic"
    return redact(source.ref)


# --------------------------------------------------------------------------------------------
# manifest and verification


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(raw_dir: str | os.PathLike) -> dict[str, dict]:
    """``{file: {"sha256", "size", "source", "downloaded_at"}}``; ``{}`` when there is none."""
    path = Path(raw_dir) / MANIFEST_NAME
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DownloadError(f"{path} is not readable JSON ({exc}); delete it and download the dataset again") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) and "sha256" in v for v in data.values()):
        raise DownloadError(f"{path} is not an xmcbench manifest; delete it and download the dataset again")
    return data


def _save_manifest(raw_dir: Path, entries: dict[str, dict]) -> Path:
    path = raw_dir / MANIFEST_NAME
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".tmp", dir=raw_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(dict(sorted(entries.items())), fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def record_manifest(raw_dir: str | os.PathLike, files: list[str], source: str) -> dict[str, dict]:
    """Hash ``files`` (names relative to ``raw_dir``; a gzipped/plain twin counts) and write the manifest.

    For raw files made here rather than downloaded (``datasets synth``, a user's own files).
    Entries whose content did not change keep their original ``downloaded_at``. Returns the entries.
    """
    from xmcbench.data.catalog import find_raw_file

    raw_dir = Path(raw_dir)
    old = read_manifest(raw_dir)
    now = _now()
    entries = {}
    for name in files:
        path = find_raw_file(raw_dir, name)
        if path is None:
            raise DownloadError(f"cannot record {MANIFEST_NAME}: {name} is missing in {raw_dir}")
        key = path.relative_to(raw_dir).as_posix()
        digest = sha256_file(path)
        prev = old.get(key)
        if prev and prev.get("sha256") == digest:
            entries[key] = prev
        else:
            entries[key] = {"sha256": digest, "size": path.stat().st_size, "source": redact(source),
                            "downloaded_at": now}
    _save_manifest(raw_dir, entries)
    return entries


def write_manifest(spec: "str | DatasetSpec", raw_dir: str | os.PathLike, source: str) -> dict[str, dict]:
    """``record_manifest`` for every raw file of ``spec``."""
    return record_manifest(raw_dir, list(_resolve_spec(spec).files), source)


@dataclass
class FileCheck:
    name: str
    status: Literal["ok", "missing", "changed", "unrecorded"]
    detail: str = ""


@dataclass
class VerifyReport:
    """Outcome of ``verify_dataset``: one ``FileCheck`` per expected file."""

    dataset: str
    raw_dir: Path
    manifest_found: bool
    files: list[FileCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.manifest_found and all(f.status == "ok" for f in self.files)

    def problems(self) -> list[str]:
        if not self.manifest_found:
            return [f"no {MANIFEST_NAME} in {self.raw_dir}: {self.dataset} was not downloaded by xmcbench here"]
        return [f"{f.name}: {f.status}" + (f" ({f.detail})" if f.detail else "") for f in self.files if f.status != "ok"]


def verify_dataset(name: "str | DatasetSpec") -> VerifyReport:
    """Recompute size and sha256 of every expected raw file and compare with the manifest."""
    from xmcbench.data.catalog import find_raw_file

    spec = _resolve_spec(name)
    raw_dir = paths.dataset_raw_dir(spec.raw_group)
    manifest = read_manifest(raw_dir)
    report = VerifyReport(dataset=spec.name, raw_dir=raw_dir, manifest_found=bool(manifest))
    for expected in spec.files:
        path = find_raw_file(raw_dir, expected)  # also accepts the gzipped/plain twin
        if path is None:
            report.files.append(FileCheck(expected, "missing", f"expected at {raw_dir / expected}"))
            continue
        key = path.relative_to(raw_dir).as_posix()
        entry = manifest.get(key)
        size = path.stat().st_size
        if entry is None:
            report.files.append(FileCheck(key, "unrecorded", f"not in {MANIFEST_NAME}"))
        elif size != entry.get("size"):
            report.files.append(FileCheck(key, "changed", f"size {size:,}, recorded {entry.get('size'):,}"))
        else:
            digest = sha256_file(path)
            if digest != entry["sha256"]:
                report.files.append(FileCheck(key, "changed", f"sha256 {digest[:12]}…, recorded {entry['sha256'][:12]}…"))
            else:
                report.files.append(FileCheck(key, "ok"))
    return report


def raw_status(name: "str | DatasetSpec") -> Literal["complete", "partial", "missing"]:
    """Quick presence check without hashing: 'complete' when every expected file exists with the
    size its manifest entry records."""
    from xmcbench.data.catalog import find_raw_file

    spec = _resolve_spec(name)
    raw_dir = paths.dataset_raw_dir(spec.raw_group)
    try:
        manifest = read_manifest(raw_dir)
    except DownloadError:
        return "partial"
    found = [find_raw_file(raw_dir, n) for n in spec.files]
    if not any(found):
        return "missing"
    complete = all(
        p is not None and manifest.get(p.relative_to(raw_dir).as_posix(), {}).get("size") == p.stat().st_size
        for p in found
    )
    return "complete" if complete else "partial"


# --------------------------------------------------------------------------------------------
# the download


def download_dataset(name_or_spec: "str | DatasetSpec", source: str | None = None, progress: bool = True) -> Path:
    """Download, extract and verify a dataset's raw files; returns the raw folder.

    ``source`` overrides the registry's default (see ``parse_source``). When the raw files are
    already present and match their manifest this is a no-op (it says so when ``progress``).
    """
    spec = _resolve_spec(name_or_spec)
    raw_dir = paths.dataset_raw_dir(spec.raw_group)
    say = _console.print if progress else (lambda *a, **k: None)
    raw_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive(raw_dir, say):
        report = verify_dataset(spec)
        if report.ok:
            say(f"{spec.raw_group}: raw files already downloaded and verified in {raw_dir}", highlight=False)
            return raw_dir
        manifest = read_manifest(raw_dir)
        if manifest and any(f.status == "changed" for f in report.files):
            say(f"[yellow]{spec.raw_group}: local files differ from {MANIFEST_NAME}; downloading again[/]",
                highlight=False)
        if not source and spec.synthetic is not None:  # "downloading" a synthetic dataset regenerates it
            from xmcbench.data.synth import synthesize

            synthesize(raw_dir, **spec.synthetic)
            record_manifest(raw_dir, list(spec.files), source="synthetic")
            say(f"{spec.raw_group}: synthetic raw files regenerated in {raw_dir}", highlight=False)
            return raw_dir
        sources = [parse_source(source)] if source else _default_sources(spec)
        if not sources:
            raise DownloadError(
                f"{spec.name} has no download source (its files were made locally); {_SOURCE_HELP}"
            )
        _download_into(spec, sources, raw_dir, manifest, say, progress)
    return raw_dir


def _default_sources(spec: "DatasetSpec") -> "list[Source]":
    """What a plain download fetches (``DatasetSpec.default_sources``); none for a dataset made
    locally (synthetic)."""
    if not spec.sources:
        return []
    return [s for s in spec.default_sources() if s.kind != "synthetic"]


def _download_into(spec, sources, raw_dir: Path, manifest: dict, say, progress: bool) -> None:
    downloads = raw_dir / _DOWNLOADS
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=raw_dir))
    fetched: list[Path] = []  # complete downloads in .downloads/, removed once used or found bad
    try:
        candidates: dict[PurePosixPath, Path] = {}
        for i, src in enumerate(sources):
            got = _fetch(spec, src, downloads, progress, say)
            if _inside(got, downloads):  # never a user's own folder, even one inside the raw folder
                fetched.append(got)
            candidates.update(_gather(spec, src, got, staging / f"part{i}", progress))
        where = " + ".join(describe_source(s) for s in sources)
        found = _locate(spec, sources, candidates, where)
        # Everything goes into staging first (copied from local/hf folders, moved from .downloads),
        # is hashed and compared with the manifest, and only then renamed into the raw folder.
        placed: dict[str, Path] = {}
        for name, path in found.items():
            dest = staging / "final" / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if _inside(path, downloads) or _inside(path, staging):  # ours: move; anything else: copy
                os.replace(path, dest)
            else:
                _copy_file(path, dest)
            placed[name] = dest
        entries = {}
        now = _now()
        for name, path in placed.items():
            digest = sha256_file(path)
            prev = manifest.get(name)
            if prev and prev["sha256"] != digest:
                raise DownloadError(
                    f"{name} from {where} (sha256 {digest[:12]}…) differs from the copy recorded in "
                    f"{raw_dir / MANIFEST_NAME} on {prev.get('downloaded_at', '?')} from {prev.get('source', '?')} "
                    f"(sha256 {prev['sha256'][:12]}…); the source changed or is a different version — "
                    f"delete {MANIFEST_NAME} to accept the new files"
                )
            entries[name] = prev or {"sha256": digest, "size": path.stat().st_size, "source": where, "downloaded_at": now}
        for name, path in placed.items():
            final = raw_dir / name
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, final)
        _save_manifest(raw_dir, entries)
        say(f"{spec.raw_group}: {len(placed)} raw files saved in {raw_dir}", highlight=False)
    except KeyboardInterrupt:
        raise  # keep complete downloads and .part files for the next try
    except BaseException:
        for path in fetched:  # complete but unusable (corrupt, wrong content): do not reuse it
            _remove(path)
        raise
    else:
        for path in fetched:
            _remove(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            downloads.rmdir()  # only when empty: .part files of other sources stay


def _fetch(spec, src: "Source", downloads: Path, progress: bool, say) -> Path:
    """A local path holding what ``src`` names: a file or folder (downloaded ones under ``downloads``)."""
    if src.kind == "local":
        path = Path(src.ref).expanduser()
        if not path.exists():
            raise DownloadError(f"cannot copy {spec.name} from {src.ref}: no such file or directory")
        return path
    downloads.mkdir(parents=True, exist_ok=True)
    # Prefix with a hash of the source so a reused complete download is always the right one.
    tag = hashlib.sha1(f"{src.kind}:{src.ref}:{src.subdir}".encode()).hexdigest()[:10]
    if src.kind == "hf":
        return _fetch_hf(spec, src, downloads / f"hf-{tag}", progress)
    name = src.filename or (f"{src.ref}.download" if src.kind == "gdrive" else "download")
    target = downloads / f"{tag}-{name}"
    if target.exists():  # only a complete, verified download ever has this name
        say(f"reusing {target.name} downloaded before", highlight=False)
        return target
    if src.kind == "url":
        return fetch_url(src.ref, target, progress=progress, what=spec.name)
    if src.kind == "gdrive":
        return _fetch_gdrive(spec, src, target, progress)
    raise DownloadError(f"{spec.name}: cannot download a source of kind {src.kind!r}")


def _gather(spec, src: "Source", got: Path, work: Path, progress: bool) -> dict[PurePosixPath, Path]:
    """Files available from one fetched source, by relative path; archives extracted into ``work``."""
    expected = {PurePosixPath(f).name for f in spec.files}
    if got.is_dir():
        files = _walk(got)
        if expected <= {p.name for p in files}:
            return files
        # The expected files are not lying there: maybe the folder holds the archive.
        archives = [(rel, p) for rel, p in sorted(files.items()) if is_archive_name(rel.name)]
        for i, (rel, archive) in enumerate(archives):
            # keyed under the archive's own path, so the same name in two archives stays distinct
            files.update({rel / inner: p for inner, p in _extract(archive, work / f"archive{i}", progress).items()})
        return files
    if src.archive or (got.name not in expected and archive_kind(got) is not None):
        return _extract(got, work / "archive", progress)
    # A single data file: it is named after what it is, not after its download name.
    name = src.filename or got.name
    return {PurePosixPath(name): got}


def _extract(archive: Path, dest: Path, progress: bool) -> dict[PurePosixPath, Path]:
    with _bar(progress, f"extracting {archive.name}", archive.stat().st_size) as update:
        extract_archive(archive, dest, on_progress=update)
    return _walk(dest)


def _walk(root: Path) -> dict[PurePosixPath, Path]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        # hidden folders are working areas (ours: .downloads, .staging-*; HF's local_dir .cache), not data
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for fname in filenames:
            path = Path(dirpath) / fname
            if path.is_file():
                out[PurePosixPath(path.relative_to(root).as_posix())] = path
    return out


def _locate(spec, sources, candidates: dict[PurePosixPath, Path], where: str) -> dict[str, Path]:
    """For each expected file, the candidate whose path ends with it (a subdir given in the source
    is preferred; otherwise the shallowest match)."""
    subdirs = [s.subdir.strip("/") for s in sources if s.subdir]
    found, missing = {}, []
    for name in spec.files:
        exact = PurePosixPath(name)
        # Some mirrors ship trn.json for trn.json.gz (or the reverse); the readers accept both.
        wanted = [exact.with_name(t) for t in _twins(exact.name)]
        matches = [rel for rel in candidates if any(rel.parts[-len(w.parts):] == w.parts for w in wanted)]
        preferred = [rel for rel in matches if any(f"/{sd}/" in f"/{rel.as_posix()}" for sd in subdirs)]
        matches = sorted(preferred or matches, key=lambda r: (r.name != exact.name, len(r.parts), r.as_posix()))
        if not matches:
            missing.append(name)
            continue
        best = matches[0]
        rivals = [m for m in matches[1:] if m.name == best.name and len(m.parts) == len(best.parts)]
        if rivals:
            raise DownloadError(
                f"{where} holds several {best.name} ({', '.join(m.as_posix() for m in [best, *rivals][:4])}); "
                "point --source at the folder that holds the right one (hf://ORG/REPO/subdir or a directory)"
            )
        found[(exact.parent / best.name).as_posix()] = candidates[best]  # trn.json stays trn.json
    if missing:
        seen = sorted(rel.as_posix() for rel in candidates)
        shown = ", ".join(seen[:15]) + (f" … ({len(seen)} files)" if len(seen) > 15 else "")
        raise DownloadError(
            f"{spec.name}: {', '.join(missing)} not found in {where}; found: {shown or 'nothing'}"
        )
    return found


# --------------------------------------------------------------------------------------------
# http(s)


class _Dropped(Exception):
    """The connection ended before the announced size arrived (resumable)."""


def fetch_url(url: str, target: str | os.PathLike, *, progress: bool = True, what: str | None = None,
              resumes: int = _RESUMES) -> Path:
    """Download ``url`` to ``target`` through ``target.part``, resuming with HTTP Range.

    An existing ``.part`` is resumed when the server answers 206 and restarted when it answers 200.
    The received size must match the announced one before the ``.part`` is renamed to ``target``.
    A dropped connection is resumed up to ``resumes`` times; after that the ``.part`` is kept for the
    next call. Returns ``target``.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    label = what or target.name
    with _bar(progress, label, None) as update:
        for attempt in range(resumes + 1):
            try:
                _fetch_once(url, part, label, update)
                break
            except _Dropped as exc:
                if attempt == resumes:
                    raise DownloadError(
                        f"cannot download {label}: {exc}; the partial download is kept in {part} — "
                        "run the same command again to resume"
                    ) from None
    page = None if target.name.lower().endswith((".htm", ".html")) else _html_head(part)
    if page is not None:  # e.g. a share link that answers with a quota or sign-in page
        part.unlink()
        reason = _page_reason(page) or "not the file"
        raise DownloadError(
            f"cannot download {label}: {redact(url)} returned a web page instead of the file ({reason}); "
            f"{_SOURCE_HELP} with a direct link"
        )
    os.replace(part, target)
    return target


def _fetch_once(url: str, part: Path, label: str, update: Callable[[int, int | None], None]) -> None:
    offset = part.stat().st_size if part.exists() else 0
    response = _open(url, offset, label)
    if offset and response.status == 416:  # the .part is already as long as the file (or longer)
        response.close()
        part.unlink()
        offset = 0
        response = _open(url, 0, label)
    with response:
        if offset and response.status == 206:
            start, total = _content_range(response, url, label)
            if start != offset:
                raise DownloadError(f"cannot download {label}: {url} resumed at byte {start:,}, not {offset:,}")
            mode = "ab"
        elif response.status == 200:
            offset, mode = 0, "wb"  # the server ignored Range: start over
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        else:
            raise DownloadError(f"cannot download {label}: HTTP {response.status} from {redact(url)}")
        if total is not None:
            _check_space(part.parent, total - offset, url, label)
        done = offset
        update(done, total)
        try:
            with open(part, mode) as out:
                while True:
                    try:
                        block = response.read(_CHUNK)
                    except (http.client.IncompleteRead, ConnectionError, socket.timeout, TimeoutError) as exc:
                        of = f" of {total:,}" if total is not None else ""
                        raise _Dropped(
                            f"connection to {redact(url)} dropped after {done:,}{of} bytes ({type(exc).__name__})"
                        ) from None
                    if not block:
                        break
                    _write_chunk(out, block)
                    done += len(block)
                    update(done, total)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                part.unlink(missing_ok=True)
                free = shutil.disk_usage(part.parent).free
                need = f"{total - offset:,} bytes" if total is not None else "more space"
                raise DownloadError(
                    f"disk full while downloading {label} into {part.parent}: needed {need}, "
                    f"{free:,} bytes free; the partial file was deleted — free some space or set "
                    "XMCBENCH_HOME to a larger disk"
                ) from None
            raise
    if total is not None and done < total:
        raise _Dropped(f"connection to {redact(url)} dropped after {done:,} of {total:,} bytes")
    if total is not None and done > total:
        part.unlink()
        raise DownloadError(f"cannot download {label}: {redact(url)} sent {done:,} bytes, more than the announced {total:,}")


def _write_chunk(out, block: bytes) -> None:
    out.write(block)


def _open(url: str, offset: int, label: str):
    headers = {"User-Agent": f"xmcbench/{__version__}", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        return urllib.request.urlopen(request, timeout=_TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:
            return exc  # an HTTPError is also a response; the caller restarts from zero
        exc.close()
        raise DownloadError(f"cannot download {label}: HTTP {exc.code} {exc.reason} from {redact(url)}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ConnectionRefusedError):
            reason = "connection refused"
        raise DownloadError(f"cannot download {label}: {redact(url)} is unreachable ({reason})") from None
    except (http.client.HTTPException, OSError) as exc:
        raise DownloadError(f"cannot download {label}: {redact(url)} failed ({type(exc).__name__}: {exc})") from None


def _content_range(response, url: str, label: str) -> tuple[int, int | None]:
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", response.headers.get("Content-Range", "").strip())
    if not match:
        raise DownloadError(f"cannot download {label}: {redact(url)} answered 206 without a valid Content-Range")
    total = match.group(3)
    return int(match.group(1)), (int(total) if total != "*" else None)


def _check_space(folder: Path, needed: int, url: str, label: str) -> None:
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise DownloadError(
            f"not enough disk space to download {label} into {folder}: needed {needed:,} bytes "
            f"({human_size(needed)}), {free:,} free ({human_size(free)}); free some space or set "
            "XMCBENCH_HOME to a larger disk"
        )


# --------------------------------------------------------------------------------------------
# Google Drive


_DRIVE_REASONS = [
    (re.compile(r"too many users|quota|download limit", re.I), "its download quota is exceeded (too many users downloaded it recently)"),
    (re.compile(r"virus", re.I), "Drive answered with its virus-scan warning page instead of the file"),
    (re.compile(r"permission|request access|you need access|sign in|servicelogin|not shared|public link", re.I),
     "the file is not shared publicly (permission denied)"),
]


def _page_reason(text: str) -> str | None:
    return next((why for pattern, why in _DRIVE_REASONS if pattern.search(text)), None)


def _drive_refused(what: str, text: str) -> DownloadError:
    reason = _page_reason(text) or "Drive returned a web page instead of the file"
    return DownloadError(
        f"Google Drive refused the download of {what}: {reason}; try again later, or get the files "
        f"elsewhere and {_SOURCE_HELP}"
    )


def _html_head(path: Path) -> str | None:
    """The start of ``path`` when it is an HTML page (an error page where a file was expected)."""
    with open(path, "rb") as fh:
        head = fh.read(64 * 1024)
    if re.match(rb"\s*(<!doctype html|<html)", head, re.I):
        return head.decode("utf-8", "replace")
    return None


def _fetch_gdrive(spec, src: "Source", target: Path, progress: bool) -> Path:
    import gdown
    import requests

    # gdown keeps its own resumable '<tmp>*.part' next to this temporary name; the file only gets
    # the final name after we checked it is not an HTML error page.
    tmp = target.with_name(target.name + ".gdown")
    try:
        with _bar(progress, spec.name, None) as update:
            # progress/timeout arrived in later gdown releases; pass them where they exist
            accepted = inspect.signature(gdown.download).parameters
            extra = {k: v for k, v in (("progress", update), ("timeout", _TIMEOUT_S)) if k in accepted}
            gdown.download(id=src.ref, output=str(tmp), quiet=True, resume=True, **extra)
    except gdown.exceptions.FileURLRetrievalError as exc:
        raise _drive_refused(spec.name, str(exc)) from None
    except (gdown.exceptions.DownloadError, requests.RequestException) as exc:
        raise DownloadError(
            f"cannot download {spec.name} from Google Drive (gdrive:{src.ref}): {redact(str(exc)).splitlines()[0]}; "
            f"run the same command again to resume, or {_SOURCE_HELP}"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            for leftover in tmp.parent.glob(tmp.name + "*.part"):
                leftover.unlink(missing_ok=True)
            raise DownloadError(
                f"disk full while downloading {spec.name} into {tmp.parent} "
                f"({shutil.disk_usage(tmp.parent).free:,} bytes free); the partial file was deleted — "
                "free some space or set XMCBENCH_HOME to a larger disk"
            ) from None
        raise
    if not tmp.is_file():
        raise DownloadError(f"cannot download {spec.name}: gdown wrote nothing for gdrive:{src.ref}; {_SOURCE_HELP}")
    page = _html_head(tmp)
    if page is not None:
        tmp.unlink()
        raise _drive_refused(spec.name, page)
    os.replace(tmp, target)
    return target


# --------------------------------------------------------------------------------------------
# Hugging Face Hub


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _fetch_hf(spec, src: "Source", local_dir: Path, progress: bool) -> Path:
    """Snapshot of the expected files (or, failing that, the archives) of a Hub dataset repo."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    offline = _env_true("HF_HUB_OFFLINE")
    endpoint = os.environ.get("HF_ENDPOINT") or None
    where = describe_source(src)
    prefix = f"{src.subdir.strip('/')}/" if src.subdir else ""
    wanted = [f"{prefix}*{name}" for f in spec.files for name in _twins(PurePosixPath(f).name)]
    archives = [f"{prefix}*{suffix}" for suffix in (".zip", ".tar", ".tar.gz", ".tgz")]
    was_disabled = are_progress_bars_disabled()
    if not progress:
        disable_progress_bars()
    try:
        for patterns in (wanted, archives):  # files first; the archives only when they are absent
            folder = Path(snapshot_download(
                src.ref, repo_type="dataset", allow_patterns=patterns, local_dir=local_dir,
                local_files_only=offline, endpoint=endpoint,
            ))
            names = {p.name for p in _walk(folder)}
            if all(any(t in names for t in _twins(PurePosixPath(f).name)) for f in spec.files):
                break
        return folder
    except LocalEntryNotFoundError as exc:
        if offline:
            raise DownloadError(
                f"cannot download {spec.name} from {where}: HF_HUB_OFFLINE is set and the files are not "
                "cached; unset HF_HUB_OFFLINE, or pass --source DIR with the files"
            ) from None
        first = redact(str(exc)).splitlines()[0]
        raise DownloadError(f"cannot download {spec.name} from {where} ({endpoint or 'huggingface.co'}): {first}") from None
    except (RepositoryNotFoundError, GatedRepoError) as exc:
        raise DownloadError(
            f"cannot download {spec.name}: dataset repo {where} not found or not accessible "
            f"({type(exc).__name__}); check the name, or set HF_TOKEN for a private/gated repo"
        ) from None
    except HfHubHTTPError as exc:
        raise DownloadError(f"cannot download {spec.name} from {where}: {redact(str(exc)).splitlines()[0]}") from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DownloadError(
                f"disk full while downloading {spec.name} into {local_dir} "
                f"({shutil.disk_usage(local_dir.parent).free:,} bytes free); free some space or set "
                "XMCBENCH_HOME to a larger disk"
            ) from None
        raise
    finally:
        if not progress and not was_disabled:
            enable_progress_bars()


# --------------------------------------------------------------------------------------------
# small helpers


def _resolve_spec(name_or_spec) -> "DatasetSpec":
    if isinstance(name_or_spec, str):
        from xmcbench.data.catalog import get_spec

        return get_spec(name_or_spec)
    return name_or_spec


def _twins(name: str) -> tuple[str, str]:
    """A raw file name and its gzipped/plain twin ('trn.json.gz' -> 'trn.json'), as the readers accept both."""
    return (name, name[:-3]) if name.endswith(".gz") else (name, name + ".gz")


def _inside(path: Path, folder: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _copy_file(src: Path, dest: Path) -> None:
    try:
        shutil.copyfile(src, dest)
    except OSError as exc:
        dest.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise DownloadError(
                f"disk full while copying {src} into {dest.parent}: needed {src.stat().st_size:,} bytes, "
                f"{shutil.disk_usage(dest.parent).free:,} free; free some space or set XMCBENCH_HOME to a larger disk"
            ) from None
        raise DownloadError(f"cannot copy {src} to {dest.parent}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _bar(enabled: bool, description: str, total: int | None) -> Iterator[Callable[[int, int | None], None]]:
    """A rich progress bar (bytes, speed, ETA) on stderr, or a no-op when disabled."""
    if not enabled:
        yield lambda done, total=None: None
        return
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=_console) as bar:
        task = bar.add_task(description, total=total)

        def update(done: int, total: int | None = None) -> None:
            bar.update(task, completed=done, **({"total": total} if total is not None else {}))

        yield update


@contextlib.contextmanager
def _exclusive(raw_dir: Path, say) -> Iterator[None]:
    """One download per raw folder at a time (another process waits), where flock exists."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; concurrent downloads are the user's call
        yield
        return
    fd = os.open(raw_dir, os.O_RDONLY)  # lock the folder itself, so no lock file is left behind
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another xmcbench process downloading into {raw_dir} …", highlight=False)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock

