"""Download a dataset's raw files: resumable, atomic, checksummed, safely extracted.

``download_dataset("LF-AmazonTitles-131K")`` fetches the raw group's files from the catalogue's
default source (or one given as ``source=``, see ``sources.parse_source``), extracts archives,
finds the expected files (archives nest them in folders), moves them into
``paths.dataset_raw_dir(spec.raw_group)`` and records them in ``manifest.json`` there (see
``xmcbench.data.raw``).

One transport per source kind: ``http`` (urllib3, HTTP Range resume, retries), ``gdrive``
(gdown), ``hf`` (huggingface_hub); a local folder or archive is copied. ``extract`` unpacks
archives safely.

Guarantees: a file only ever gets its final name once complete and verified (an interrupted
download keeps only its ``.part`` file, which the next call resumes); work happens in hidden
folders inside the raw folder (``.downloads/``, a pid-named staging folder) that are cleaned up,
also when a killed process left them; one process at a time downloads into a raw folder; every
failure is one ``DownloadError`` line saying what failed, where, and what to do. Credentials in
URLs and Hugging Face tokens are never printed or written to the manifest.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import shutil
import zlib
from pathlib import Path, PurePosixPath

from xmcbench import fsutil, paths
from xmcbench.data.catalog import DatasetSpec, Source, resolve_spec
from xmcbench.data.fetch.common import NoSpaceError, byte_bar, copy_file, say_for, walk
from xmcbench.data.fetch.extract import archive_kind, extract_archive, is_archive_name
from xmcbench.data.fetch.gdrive import fetch_gdrive
from xmcbench.data.fetch.hf import fetch_hf
from xmcbench.data.fetch.http import fetch_url
from xmcbench.data.fetch.sources import SOURCE_HELP, default_sources, describe_source, parse_source
from xmcbench.data.raw import (
    MANIFEST_NAME,
    FileCheck,
    VerifyReport,
    raw_status,
    read_manifest,
    record_manifest,
    save_manifest,
    twins,
    verify_dataset,
)
from xmcbench.data.synth import materialize
from xmcbench.errors import DownloadError
from xmcbench.redact import redact

__all__ = [
    "MANIFEST_NAME",
    "FileCheck",
    "VerifyReport",
    "describe_source",
    "download_dataset",
    "fetch_url",
    "parse_source",
    "raw_lock",
    "raw_status",
    "read_manifest",
    "record_manifest",
    "verify_dataset",
]

_DOWNLOADS = ".downloads"  # fetched archives/files and their .part files, inside the raw folder


def raw_lock(spec: DatasetSpec, progress: bool = True):
    """The lock held while a raw folder is written (shared by a raw group's variants)."""
    return fsutil.file_lock(
        paths.locks_dir() / f"raw-{spec.raw_group.lower()}.lock",
        on_wait=lambda msg: say_for(progress)(msg, highlight=False),
        what=f"the raw files of {spec.raw_group}",
    )


def download_dataset(
    name_or_spec: str | DatasetSpec, source: str | None = None, progress: bool = True, force: bool = False
) -> Path:
    """Download, extract and verify a dataset's raw files; returns the raw folder.

    ``source`` overrides the catalogue's default (see ``parse_source``). When the raw files are
    already present and match their manifest this is a no-op (it says so when ``progress``, and
    always when ``source`` is not where they came from, since it then goes unused); ``force``
    downloads them again, and files that differ from the manifest are refused as in any download.
    """
    spec = resolve_spec(name_or_spec)
    raw_dir = paths.dataset_raw_dir(spec.raw_group)
    say = say_for(progress)
    with raw_lock(spec, progress):
        raw_dir.mkdir(parents=True, exist_ok=True)
        fsutil.remove_stale_temps(raw_dir)
        report = verify_dataset(spec)
        if report.ok and not force:
            recorded = sorted({str(e.get("source")) for e in read_manifest(raw_dir).values()})
            if source and recorded != [_described(source)]:
                say_for(True)(
                    f"{spec.raw_group}: raw files already downloaded and verified in {raw_dir} "
                    f"(from {', '.join(recorded)}); --source was not used: add --force to download them again from it",
                    style="yellow",
                )
            else:
                say(f"{spec.raw_group}: raw files already downloaded and verified in {raw_dir}", highlight=False)
            return raw_dir
        manifest = read_manifest(raw_dir)
        if manifest and any(f.status == "changed" for f in report.files):
            say(f"{spec.raw_group}: local files differ from {MANIFEST_NAME}; downloading again", style="yellow")
        if not source and spec.synthetic is not None:  # "downloading" a synthetic dataset regenerates it
            materialize(spec, raw_dir)
            say(f"{spec.raw_group}: synthetic raw files regenerated in {raw_dir}", highlight=False)
            return raw_dir
        sources = [parse_source(source)] if source else default_sources(spec)
        if not sources:
            raise DownloadError(f"{spec.name} has no download source (its files were made locally); {SOURCE_HELP}")
        _download_into(spec, sources, raw_dir, manifest, say, progress)
    return raw_dir


def _described(source: str) -> str:
    """``source`` as the manifest records it (a local folder since removed: as typed, redacted)."""
    try:
        return describe_source(parse_source(source))
    except DownloadError:
        return redact(source)


def _download_into(
    spec: DatasetSpec, sources: list[Source], raw_dir: Path, manifest: dict, say, progress: bool
) -> None:
    downloads = raw_dir / _DOWNLOADS
    staging = fsutil.temp_path(raw_dir / "staging")
    staging.mkdir()
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
                copy_file(path, dest)
            placed[name] = dest
        entries = {}
        now = fsutil.utc_now()
        stale = []  # the other form (gzipped / plain) of a file placed now: the readers would pick either
        for name, path in placed.items():
            digest = fsutil.sha256_file(path)
            prev, twin = manifest.get(name), twins(name)[1]
            if prev and prev["sha256"] != digest:
                _refuse_changed(name, where, digest, prev, raw_dir)
            if not prev and twin in manifest and (raw_dir / twin).is_file():
                # trn.json now where trn.json.gz was recorded (or the reverse): the same texts, or refused
                recorded, fetched_now = _content_sha256(raw_dir / twin), _content_sha256(path)
                if recorded != fetched_now:
                    prev_twin = {**manifest[twin], "sha256": recorded}
                    _refuse_changed(
                        f"{name} (content compared with the recorded {twin})", where, fetched_now, prev_twin, raw_dir
                    )
            if (raw_dir / twin).is_file():
                stale.append(twin)
            # the same bytes fetched again (--force, another mirror): they now come from here
            entries[name] = {
                "sha256": digest,
                "size": path.stat().st_size,
                "source": where,
                "downloaded_at": now,
            }
        for name, path in placed.items():
            final = raw_dir / name
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, final)
        for twin in stale:
            (raw_dir / twin).unlink(missing_ok=True)
            say(f"{spec.raw_group}: removed {twin}; {twins(twin)[1]} replaces it", highlight=False)
        save_manifest(raw_dir, entries)
        say(f"{spec.raw_group}: {len(placed)} raw files saved in {raw_dir}", highlight=False)
    except KeyboardInterrupt:
        raise  # keep complete downloads and .part files for the next try
    except NoSpaceError as exc:  # the downloads are fine: keep them, so that the next try needs no download
        kept = [path for path in fetched if path.exists()]
        if not kept:
            raise
        raise NoSpaceError(
            f"{exc}; the complete download ({', '.join(str(p) for p in kept)}) is kept and reused by the next try"
        ) from None
    except BaseException as exc:
        removed = [path for path in fetched if path.exists()]
        for path in removed:  # complete but unusable (corrupt, wrong content): do not reuse it
            _remove(path)
        if removed and isinstance(exc, DownloadError):  # its message may name the copy just deleted
            raise type(exc)(
                f"{exc} (the downloaded copy was deleted: running the same command again downloads it anew)"
            ) from None
        raise
    else:
        for path in fetched:
            _remove(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            downloads.rmdir()  # only when empty: .part files of other sources stay


def _refuse_changed(name: str, where: str, digest: str, prev: dict, raw_dir: Path) -> None:
    raise DownloadError(
        f"{name} from {where} (sha256 {digest[:12]}…) differs from the copy recorded in "
        f"{raw_dir / MANIFEST_NAME} on {prev.get('downloaded_at', '?')} from {prev.get('source', '?')} "
        f"(sha256 {prev['sha256'][:12]}…); the source changed or is a different version — "
        f"delete {MANIFEST_NAME} to accept the new files"
    )


def _content_sha256(path: Path) -> str:
    """sha256 of a file's content, gunzipped when it is a .gz (a damaged one gets a digest of its own)."""
    if not path.name.endswith(".gz"):
        return fsutil.sha256_file(path)
    h = hashlib.sha256()
    try:
        with gzip.open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except (OSError, EOFError, zlib.error):
        return "damaged:" + fsutil.sha256_file(path)
    return h.hexdigest()


def _fetch(spec: DatasetSpec, src: Source, downloads: Path, progress: bool, say) -> Path:
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
        return fetch_hf(spec, src, downloads / f"hf-{tag}", progress)
    name = src.filename or (f"{src.ref}.download" if src.kind == "gdrive" else "download")
    target = downloads / f"{tag}-{name}"
    if target.exists():  # only a complete, verified download ever has this name
        say(f"reusing {target.name} downloaded before", highlight=False)
        return target
    if src.kind == "url":
        return fetch_url(src.ref, target, progress=progress, what=spec.name)
    if src.kind == "gdrive":
        return fetch_gdrive(spec, src, target, progress)
    raise DownloadError(f"{spec.name}: cannot download a source of kind {src.kind!r}")


def _gather(spec: DatasetSpec, src: Source, got: Path, work: Path, progress: bool) -> dict[PurePosixPath, Path]:
    """Files available from one fetched source, by relative path; archives extracted into ``work``."""
    expected = {PurePosixPath(f).name for f in spec.files}
    if got.is_dir():
        files = walk(got)
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
    with byte_bar(progress, f"extracting {archive.name}", archive.stat().st_size) as update:
        extract_archive(archive, dest, on_progress=update)
    return walk(dest)


def _locate(
    spec: DatasetSpec, sources: list[Source], candidates: dict[PurePosixPath, Path], where: str
) -> dict[str, Path]:
    """For each expected file, the candidate whose path ends with it (a subdir given in the source
    is preferred; otherwise the shallowest match)."""
    subdirs = [s.subdir.strip("/") for s in sources if s.subdir]
    found, missing = {}, []
    for name in spec.files:
        exact = PurePosixPath(name)
        # Some mirrors ship trn.json for trn.json.gz (or the reverse); the readers accept both.
        wanted = [exact.with_name(t) for t in twins(exact.name)]
        matches = [rel for rel in candidates if any(rel.parts[-len(w.parts) :] == w.parts for w in wanted)]
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
        raise DownloadError(f"{spec.name}: {', '.join(missing)} not found in {where}; found: {shown or 'nothing'}")
    return found


def _inside(path: Path, folder: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
