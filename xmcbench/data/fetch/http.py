"""The http(s) transport: resumable downloads with urllib3.

``fetch_url(url, target)`` writes into ``target.part`` and renames it to ``target`` only when the
received size matches the announced one and the content is not an HTML page (a share link that
answers with a quota or sign-in page). An existing ``.part`` is resumed with ``Range`` when the
server answers 206 and restarted when it answers 200 (or 416: the part is too long).

A file can change on the server between an interrupted download and its resume; joining the old
bytes to the new would make a file that is neither. So the server's validator (its ``ETag``, else
``Last-Modified``) and the file's size are saved beside the part in ``target.part.validator``; a
resume sends it as ``If-Range`` (the server then answers 200 with the whole new file) and starts
over when a 206 still names another ETag, Last-Modified or size (a server that ignores
``If-Range``). A ``.part`` without a readable validator file is not resumed.

Retries (``urllib3.util.Retry``): failed connects and 429/5xx answers are retried with
exponential backoff, honouring ``Retry-After``; a connection that drops mid-body is resumed from
the bytes already on disk up to ``resumes`` times, after which the ``.part`` is kept for the next
call. Environment proxies (``HTTPS_PROXY``, ``NO_PROXY``) are honoured.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import urllib.request
from pathlib import Path

import urllib3
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import MaxRetryError, NewConnectionError
from urllib3.util import Retry

from xmcbench import __version__
from xmcbench.data.fetch.common import (
    CHUNK,
    TIMEOUT_S,
    Update,
    byte_bar,
    check_space,
    disk_full,
    html_head,
    page_reason,
    say_for,
)
from xmcbench.data.fetch.sources import SOURCE_HELP
from xmcbench.errors import DownloadError
from xmcbench.redact import redact

RESUMES = 3  # automatic resumes after a dropped connection, per file
RETRIES = 4  # retries of a failed connect or a 429/5xx answer, per request
BACKOFF_FACTOR = 0.5  # seconds; doubled on each retry (0, 1, 2, 4 … at most BACKOFF_MAX)
BACKOFF_MAX = 30.0
RETRY_STATUSES = (429, 500, 502, 503, 504)
_CHANGED = "{label}: the file changed on the server since the partial download; downloading it again from the start"
_URLLIB3_LOGGERS = ("urllib3.connectionpool", "urllib3.poolmanager", "urllib3.util.retry")  # they log URLs


class _Dropped(Exception):
    """The connection ended before the announced size arrived (resumable)."""


def _retry() -> Retry:
    return Retry(
        total=RETRIES,
        connect=RETRIES,
        read=RETRIES,
        status=RETRIES,
        redirect=10,
        backoff_factor=BACKOFF_FACTOR,
        backoff_max=BACKOFF_MAX,
        status_forcelist=RETRY_STATUSES,
        allowed_methods=frozenset({"GET"}),
        respect_retry_after_header=True,
        raise_on_status=False,
    )


def _pool(url: str) -> urllib3.PoolManager:
    """A pool manager for ``url``, through the environment's proxy when one applies."""
    parts = urllib3.util.parse_url(url)
    proxy = urllib.request.getproxies().get(parts.scheme or "http")
    if proxy and not urllib.request.proxy_bypass(parts.host or ""):
        return urllib3.ProxyManager(proxy)
    return urllib3.PoolManager()


def fetch_url(
    url: str, target: str | os.PathLike, *, progress: bool = True, what: str | None = None, resumes: int = RESUMES
) -> Path:
    """Download ``url`` to ``target`` through ``target.part``, resuming with HTTP Range; returns ``target``."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    label = what or target.name
    pool = _pool(url)
    say = say_for(progress)
    with _redacted_library_logs(url), byte_bar(progress, label, None) as update:
        for attempt in range(resumes + 1):
            try:
                _fetch_once(pool, url, part, label, update, say)
                break
            except _Dropped as exc:
                if attempt == resumes:
                    raise DownloadError(
                        f"cannot download {label}: {exc}; the partial download is kept in {part} — "
                        "run the same command again to resume"
                    ) from None
    page = None if target.name.lower().endswith((".htm", ".html")) else html_head(part)
    if page is not None:
        _discard(part)
        reason = page_reason(page) or "not the file"
        raise DownloadError(
            f"cannot download {label}: {redact(url)} returned a web page instead of the file ({reason}); "
            f"{SOURCE_HELP} with a direct link"
        )
    os.replace(part, target)
    _validator_path(part).unlink(missing_ok=True)
    return target


class _RedactUrl(logging.Filter):
    """Rewrite a log record so the URL's credentials and secret query values do not show.

    urllib3 logs retries and redirects with the request target alone (``/x.zip?token=…``), which
    ``redact`` does not recognise as a URL: each form of the URL is replaced by its redacted twin.
    """

    def __init__(self, url: str):
        super().__init__()
        safe = redact(url)
        parts, safe_parts = urllib3.util.parse_url(url), urllib3.util.parse_url(safe)
        self._pairs = [(url, safe), (parts.request_uri, safe_parts.request_uri)]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        for secret, safe in self._pairs:
            message = message.replace(secret, safe)
        record.msg, record.args = redact(message), None
        return True


@contextlib.contextmanager
def _redacted_library_logs(url: str):
    """While ``url`` is fetched, urllib3's log lines (retries, redirects) name it redacted."""
    loggers = [logging.getLogger(name) for name in _URLLIB3_LOGGERS]
    redactor = _RedactUrl(url)
    for logger in loggers:
        logger.addFilter(redactor)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(redactor)


def _fetch_once(pool: urllib3.PoolManager, url: str, part: Path, label: str, update: Update, say) -> None:
    offset = part.stat().st_size if part.exists() else 0
    known = _read_validator(part) if offset else None
    if offset and known is None:  # nothing says which version of the file these bytes are from
        _discard(part)
        offset = 0
    response = _open(pool, url, offset, label, if_range=_if_range(known))
    if offset and response.status == 416:  # the .part is already as long as the file (or longer)
        response.close()
        _discard(part)
        offset = 0
        response = _open(pool, url, 0, label)
    try:
        if offset and response.status == 206:
            start, total = _content_range(response, url, label)
            if _changed(known, response, total):  # a server that ignored If-Range
                response.close()
                _discard(part)
                say(_CHANGED.format(label=label))
                offset = 0
                response = _open(pool, url, 0, label)
        if offset and response.status == 206:
            if start != offset:
                raise DownloadError(f"cannot download {label}: {redact(url)} resumed at byte {start:,}, not {offset:,}")
            mode = "ab"
        elif response.status == 200:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            if offset and _changed(known, response, total):
                say(_CHANGED.format(label=label))
            offset, mode = 0, "wb"  # the server ignored Range, or the file changed (If-Range): start over
        else:
            status = " ".join(str(x) for x in (response.status, response.reason) if x)
            raise DownloadError(f"cannot download {label}: HTTP {status} from {redact(url)}")
        if total is not None:
            check_space(part.parent, total - offset, f"downloading {label}")
        done = offset
        update(done, total)
        try:
            if mode == "wb":  # old bytes never sit beside the new version's validator, even for a moment
                _discard(part)
                _save_validator(part, response, total)
            with open(part, mode) as out:
                while True:
                    try:
                        block = response.read(CHUNK, decode_content=False)
                    except (Urllib3Error, OSError) as exc:
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
                _discard(part)
                need = f"{total - offset:,} bytes" if total is not None else "more space"
                raise disk_full(
                    f"downloading {label}", part.parent, need, after="; the partial file was deleted"
                ) from None
            raise
    finally:
        response.close()
    if total is not None and done < total:
        raise _Dropped(f"connection to {redact(url)} dropped after {done:,} of {total:,} bytes")
    if total is not None and done > total:
        _discard(part)
        raise DownloadError(
            f"cannot download {label}: {redact(url)} sent {done:,} bytes, more than the announced {total:,}"
        )


def _write_chunk(out, block: bytes) -> None:
    out.write(block)


def _validator_path(part: Path) -> Path:
    return part.with_name(part.name + ".validator")


def _discard(part: Path) -> None:
    part.unlink(missing_ok=True)
    _validator_path(part).unlink(missing_ok=True)


def _save_validator(part: Path, response, total: int | None) -> None:
    """Record which version of the file the bytes in ``part`` are (written before the first byte)."""
    validator = {
        "etag": response.headers.get("ETag"),
        "last_modified": response.headers.get("Last-Modified"),
        "size": total,
    }
    _validator_path(part).write_text(json.dumps(validator) + "\n")


def _read_validator(part: Path) -> dict | None:
    """The saved validator of ``part``; None when it is missing or unreadable."""
    try:
        validator = json.loads(_validator_path(part).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(validator, dict) or not all(
        isinstance(validator.get(key), str | None) for key in ("etag", "last_modified")
    ):
        return None
    size = validator.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool)):
        return None
    return validator


def _if_range(known: dict | None) -> str | None:
    """The If-Range value for a resume: a strong ETag, else Last-Modified (RFC 9110 refuses weak ETags)."""
    if not known:
        return None
    etag = known.get("etag")
    if etag and not etag.startswith("W/"):
        return etag
    return known.get("last_modified")


def _changed(known: dict | None, response, total: int | None) -> bool:
    """Whether ``response`` is for another version of the file than the one ``known`` describes."""
    if not known:
        return False
    for key, header in (("etag", "ETag"), ("last_modified", "Last-Modified")):
        now = response.headers.get(header)
        if known.get(key) and now and now != known[key]:
            return True
    return known.get("size") is not None and total is not None and total != known["size"]


def _open(
    pool: urllib3.PoolManager, url: str, offset: int, label: str, if_range: str | None = None
) -> urllib3.BaseHTTPResponse:
    headers = {"User-Agent": f"xmcbench/{__version__}", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        if if_range:
            headers["If-Range"] = if_range
    try:
        return pool.request(
            "GET",
            url,
            headers=headers,
            preload_content=False,
            retries=_retry(),
            timeout=urllib3.Timeout(connect=TIMEOUT_S, read=TIMEOUT_S),
        )
    except MaxRetryError as exc:
        reason = exc.reason
        if isinstance(reason, NewConnectionError) and "refused" in str(reason).lower():
            why = "connection refused"
        else:
            why = f"{type(reason).__name__}: {redact(str(reason))}" if reason else "too many retries"
        raise DownloadError(f"cannot download {label}: {redact(url)} is unreachable ({why})") from None
    except (Urllib3Error, OSError) as exc:
        raise DownloadError(
            f"cannot download {label}: {redact(url)} failed ({type(exc).__name__}: {redact(str(exc))})"
        ) from None


def _content_range(response, url: str, label: str) -> tuple[int, int | None]:
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", (response.headers.get("Content-Range") or "").strip())
    if not match:
        raise DownloadError(f"cannot download {label}: {redact(url)} answered 206 without a valid Content-Range")
    total = match.group(3)
    return int(match.group(1)), (int(total) if total != "*" else None)
