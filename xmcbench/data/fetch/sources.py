"""Download sources: what a user types after ``--source``, and how a source is shown.

``gdrive:ID`` (or a drive.google.com link); ``http(s)://`` URLs; ``hf://ORG/REPO[/subdir]``
Hugging Face Hub dataset repos; a local directory or archive (``file://`` allowed). Sources are
shown without credentials (``describe_source``), in messages and in the manifest alike.
"""

from __future__ import annotations

import re
import urllib.parse
import urllib.request
from pathlib import Path, PurePosixPath

from xmcbench.data.catalog import DatasetSpec, Source
from xmcbench.data.fetch.extract import archive_kind, is_archive_name
from xmcbench.errors import DownloadError
from xmcbench.redact import redact

SOURCE_HELP = "pass --source URL|DIR|hf://ORG/REPO"


def parse_source(text: str) -> Source:
    """A ``Source`` from what a user typed after ``--source``.

    ``https://host/x.tar.gz`` / ``http://..`` -> url (archive judged by the name);
    ``https://drive.google.com/file/d/ID/..`` or ``gdrive:ID`` -> gdrive;
    ``hf://ORG/REPO[/subdir]`` -> Hugging Face Hub dataset repo; an existing directory or file
    (``file://`` allowed) -> local.
    """
    raw = text.strip()
    low = raw.lower()
    if low.startswith("gdrive:"):
        file_id = raw[len("gdrive:") :].strip()
        if not re.fullmatch(r"[A-Za-z0-9_-]{10,}", file_id):
            raise DownloadError(
                f"--source {text!r}: a Google Drive id looks like gdrive:1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E"
            )
        return Source(kind="gdrive", ref=file_id)
    if low.startswith(("http://", "https://")):
        drive_id = google_drive_id(raw)
        if drive_id:
            return Source(kind="gdrive", ref=drive_id)
        name = PurePosixPath(urllib.parse.unquote(urllib.parse.urlsplit(raw).path)).name or "download"
        return Source(kind="url", ref=raw, filename=name, archive=is_archive_name(name))
    if low.startswith("hf://"):
        parts = [p for p in raw[len("hf://") :].split("/") if p]
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


def google_drive_id(url: str) -> str | None:
    parts = urllib.parse.urlsplit(url)
    if parts.hostname not in ("drive.google.com", "docs.google.com", "drive.usercontent.google.com"):
        return None
    match = re.search(r"/d/([A-Za-z0-9_-]{10,})", parts.path)
    if match:
        return match.group(1)
    ids = urllib.parse.parse_qs(parts.query).get("id")
    return ids[0] if ids else None


def describe_source(source: Source) -> str:
    """How a source is written in messages and in the manifest (no credentials)."""
    if source.kind == "gdrive":
        return f"gdrive:{source.ref}"
    if source.kind == "hf":
        return f"hf://{source.ref}" + (f"/{source.subdir}" if source.subdir else "")
    if source.kind == "synthetic":
        return "synthetic"
    return redact(source.ref)


def default_sources(spec: DatasetSpec) -> list[Source]:
    """What a plain download fetches (``DatasetSpec.default_sources``); none for a dataset made
    locally (synthetic). A ``manual`` source raises DownloadError saying where to get the files."""
    if not spec.sources:
        return []
    chosen = [s for s in spec.default_sources() if s.kind != "synthetic"]
    manual = next((s for s in chosen if s.kind == "manual"), None)
    if manual is not None:  # nothing to fetch: say where the files are before any download starts
        folder = f" (its {manual.subdir} folder)" if manual.subdir else ""
        raise DownloadError(
            f"{spec.name} cannot be downloaded automatically: get {', '.join(spec.files)} by hand from "
            f"{redact(manual.ref)}{folder}, then run `xmcbench datasets download {spec.name} --source DIR` "
            "with DIR the folder that holds them"
        )
    return chosen
