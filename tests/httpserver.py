"""A small local HTTP file server for tests, with switches that simulate misbehaving servers.

It listens on 127.0.0.1 on a free port chosen by the OS, answers each request on its own daemon
thread, honours ``Range: bytes=N-`` (206 + Content-Range) like a real file server, and stops when
the ``with`` block (or fixture) ends. Every request is recorded so tests can check what the client
asked for.

Like a real file server it sends an ``ETag`` (from the content) and a ``Last-Modified`` (a new
time each time a path is served again), and honours ``If-Range``: a Range request whose If-Range
names neither answers 200 with the whole file. ``etag=False`` / ``last_modified=False`` leave a
header out. Faults per file:

* ``"404"`` / ``"500"``    - answer with that status;
* ``"503"``                - answer 503 with ``Retry-After: 0`` for the first ``drops`` requests of
                             that file (later requests work), like an overloaded server;
* ``"ignore-range"``       - always send the whole file with 200, whatever Range says;
* ``"ignore-if-range"``    - honour Range but not If-Range (206 with the new content's tail);
* ``"drop"``               - announce the full length but close the connection half-way, for the
                             first ``drops`` requests of that file (later requests work);
* ``"html"``               - send ``html`` (by default a Google Drive "quota exceeded" page) with
                             200 and text/html instead of the file.

Usage::

    with FileServer() as server:
        url = server.serve("x.tar.gz", data, fault="drop")
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

QUOTA_PAGE = (
    b'<!DOCTYPE html><html><head><meta charset="utf-8"><title>Google Drive - Quota exceeded</title></head>'
    b'<body><div class="uc-main"><p class="uc-error-caption">Sorry, you can\'t view or download this file '
    b'at this time.</p><p class="uc-error-subcaption">Too many users have viewed or downloaded this file '
    b"recently. Please try accessing the file again later. If the file you are trying to access is particularly "
    b"large or is shared with many people, it may take up to 24 hours to be able to view or download the file."
    b"</p></div></body></html>\n"
)

PERMISSION_PAGE = (
    b"<!doctype html><html><head><title>Google Drive: Sign-in</title></head><body>"
    b"<h1>You need access</h1><p>Request access, or switch to an account with permission.</p></body></html>\n"
)


@dataclass
class _Served:
    data: bytes
    fault: str | None
    drops_left: int
    html: bytes
    etag: str | None
    last_modified: str | None


class FileServer:
    """Serve in-memory files over HTTP on 127.0.0.1 (see the module docstring)."""

    def __init__(self) -> None:
        self._files: dict[str, _Served] = {}
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str | None, int]] = []  # (path, Range header, status sent)
        self.if_ranges: list[tuple[str, str | None]] = []  # (path, If-Range header) of each request
        self._versions = 0  # each serve() gets a later Last-Modified
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10  # seconds: a stuck client cannot hold a thread for long

            def log_message(self, *args) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server naming)
                server._handle(self)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread: threading.Thread | None = None

    # -- set-up ---------------------------------------------------------------------------------
    def serve(
        self,
        path: str,
        data: bytes,
        *,
        fault: str | None = None,
        drops: int = 1,
        html: bytes = QUOTA_PAGE,
        etag: bool = True,
        last_modified: bool = True,
    ) -> str:
        """Publish ``data`` at ``/path`` and return its URL."""
        assert fault in (None, "404", "500", "503", "ignore-range", "ignore-if-range", "drop", "html"), fault
        with self._lock:
            self._versions += 1
            served = _Served(
                data,
                fault,
                drops,
                html,
                etag=f'"{hashlib.sha256(data).hexdigest()[:16]}"' if etag else None,
                last_modified=formatdate(1_700_000_000 + 60 * self._versions, usegmt=True) if last_modified else None,
            )
            self._files[path.lstrip("/")] = served
        return self.url(path)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def start(self) -> FileServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True, name=f"test-http-{self.port}"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FileServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def statuses(self, path: str) -> list[tuple[str | None, int]]:
        """(Range header, status) of each request for ``path``, in order."""
        return [(rng, status) for p, rng, status in self.requests if p == path.lstrip("/")]

    def if_range_headers(self, path: str) -> list[str | None]:
        """The If-Range header of each request for ``path``, in order."""
        return [value for p, value in self.if_ranges if p == path.lstrip("/")]

    # -- serving --------------------------------------------------------------------------------
    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        path = req.path.split("?", 1)[0].lstrip("/")
        rng = req.headers.get("Range")
        if_range = req.headers.get("If-Range")
        with self._lock:
            self.if_ranges.append((path, if_range))
            served = self._files.get(path)
            drop = bool(served and served.fault in ("drop", "503") and served.drops_left > 0)
            if drop:
                served.drops_left -= 1

        def record(status: int) -> None:
            with self._lock:
                self.requests.append((path, rng, status))

        if served is None or served.fault == "404":
            record(404)
            req.send_error(404, "Not Found")
            return
        if served.fault == "500":
            record(500)
            req.send_error(500, "Internal Server Error")
            return
        if served.fault == "503" and drop:
            record(503)
            self._send(req, 503, b"busy", {"Retry-After": "0", "Content-Type": "text/plain"})
            return
        if served.fault == "html":
            record(200)
            self._send(req, 200, served.html, {"Content-Type": "text/html; charset=utf-8"})
            return

        data = served.data
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
        current = if_range is None or if_range in (served.etag, served.last_modified)
        if served.fault == "ignore-if-range":
            current = True
        if match and served.fault != "ignore-range" and current:
            start = int(match.group(1))
            end = int(match.group(2)) if match.group(2) else len(data) - 1
            if start >= len(data):
                record(416)
                self._send(req, 416, b"", {"Content-Range": f"bytes */{len(data)}"})
                return
            end = min(end, len(data) - 1)
            body = data[start : end + 1]
            headers = {"Content-Range": f"bytes {start}-{end}/{len(data)}"}
            status = 206
        else:
            body, headers, status = data, {}, 200
        headers["Content-Type"] = "application/octet-stream"
        headers["Accept-Ranges"] = "bytes"
        if served.etag:
            headers["ETag"] = served.etag
        if served.last_modified:
            headers["Last-Modified"] = served.last_modified
        record(status)
        if drop and served.fault == "drop":  # announce everything, deliver half, hang up
            self._send(req, status, body, headers, deliver=max(1, len(body) // 2))
        else:
            self._send(req, status, body, headers)

    @staticmethod
    def _send(
        req: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str], deliver: int | None = None
    ) -> None:
        req.send_response(status)
        for key, value in headers.items():
            req.send_header(key, value)
        req.send_header("Content-Length", str(len(body)))
        req.send_header("Connection", "close")
        req.end_headers()
        try:
            req.wfile.write(body if deliver is None else body[:deliver])
            req.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away; nothing to do
        req.close_connection = True
