"""Any OpenAI-compatible chat server as judge (vLLM, llama.cpp's server, TGI), by base URL and model.

Each pair is one ``POST {base_url}/chat/completions`` asking for one token at temperature 0 with
``logprobs: true, top_logprobs: 20``. P(yes) comes from the returned top log-probabilities (the
yes / no variants' mass, renormalised) where the server gives them; otherwise from the answer
text (yes -> 1.0, no -> 0.0). An answer that is neither, with no yes/no in its top tokens, is
an error, never a guess.

Requests run ``concurrency`` at a time; a connection error, a timeout, a reply cut short or not
JSON, HTTP 429 or 5xx is retried ``retries`` times with exponential backoff (``backoff_s``
doubling); other HTTP errors, a reply of the wrong shape and a server that stays unreachable
raise ``JudgeError``. Standard library only.
Documents longer than ``max_doc_chars`` are cut (the question is kept whole) and counted.

``timeout_s`` is each try's deadline as a whole (connect, send, read the whole reply), not only
each socket operation's: a server that trickles a byte every few seconds would pass a per-read
timeout for ever. When it passes, the try's sockets are shut down and it counts as a timeout.

The API key goes in the Authorization header and nowhere else: the base URL may carry no
credentials or query (it becomes the recorded revision and the cache's model key), and error
messages are masked (a server may echo the header back).
"""

from __future__ import annotations

import functools
import http.client
import json
import logging
import math
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from xmcbench.judge.base import JudgeError, JudgeStats, Prompt, answer_word, yes_no_mass
from xmcbench.redact import MASK, redact

log = logging.getLogger(__name__)

_RETRYABLE_HTTP = {408, 429, 500, 502, 503, 504}


def check_base_url(url: str) -> str:
    """``url`` without a trailing slash when it is an http(s) URL with a host and no credentials,
    query or fragment; else a JudgeError that says what to change (the URL itself masked)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise JudgeError(f"judge base_url {redact(url)!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise JudgeError(
            f"judge base_url {redact(url)!r} must be an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1"
        )
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment or ";" in parts.path:
        raise JudgeError(
            f"judge base_url {redact(url)!r} must not carry credentials, parameters (;), a query or a fragment: the URL is "
            "recorded with every judgement; give the key through api_key_env (the name of an environment variable)"
        )
    return url.strip().rstrip("/")


def check_api_key(key: str | None) -> str | None:
    """The key without surrounding whitespace (a key file's newline), or an error naming the problem, never the key."""
    if key is None:
        return None
    key = key.strip()
    if not key:
        return None
    if not key.isprintable() or any(ord(c) > 255 for c in key):
        raise JudgeError(
            "the judge API key contains a control character (a line break?) or a character outside Latin-1; "
            "it cannot go in an HTTP header: check the environment variable api_key_env names"
        )
    return key


class OpenAIJudge:
    backend = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        concurrency: int = 4,
        timeout_s: float = 60.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_doc_chars: int = 3000,
        revision: str = "",
    ):
        self.base_url = check_base_url(base_url)
        self.model_id = model
        self.revision = revision or self.base_url
        self.api_key = check_api_key(api_key)
        self.concurrency = max(1, concurrency)
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_doc_chars = max_doc_chars
        self.answer_settings = f"max_doc_chars={max_doc_chars}"  # part of the judgement cache's key
        self.stats = JudgeStats(backend=self.backend, model_id=model, revision=self.revision)
        self._lock = threading.Lock()

    def _mask(self, text: str) -> str:
        """``text`` with the API key and any other secret masked: a server may echo the header back."""
        if self.api_key:
            text = text.replace(self.api_key, MASK)
        return redact(text)

    def _post(self, body: dict) -> dict:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = f"{self.base_url}/chat/completions"
        last = ""
        out_of_time = False  # the last try ran past its deadline
        asked_wait = 0.0  # a 429 / 503's Retry-After, in seconds
        for attempt in range(self.retries + 1):
            if attempt:
                with self._lock:
                    self.stats.retries += 1
                time.sleep(max(self.backoff_s * 2 ** (attempt - 1), asked_wait))
                asked_wait = 0.0
            deadline = _Deadline(self.timeout_s)
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with deadline:
                    raw = self._send(req, deadline)
                # a reply without a length ends where the deadline shut the socket: it may be a part
                out_of_time = deadline.cut and not deadline.whole
                if out_of_time:
                    continue
                try:
                    return json.loads(raw)
                except ValueError:  # not JSON, or not UTF-8: a proxy's page, a reply cut short
                    last = f"a reply that is not JSON: {raw[:80].decode(errors='replace')!r}"
            except urllib.error.HTTPError as exc:
                out_of_time = False
                last = f"HTTP {exc.code} {exc.reason}"
                asked_wait = _retry_after(exc.headers)
                if exc.code not in _RETRYABLE_HTTP:
                    detail = getattr(exc, "detail", "")
                    raise JudgeError(self._mask(f"judge server {url} answered {last}: {detail}")) from None
            # http.client.HTTPException: a reply cut short (IncompleteRead), a garbled status line
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                out_of_time = deadline.cut  # then the error is only the deadline's shutdown
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
        if out_of_time:
            raise JudgeError(
                self._mask(
                    f"judge server {url} failed {self.retries + 1} times (last: no whole reply within the "
                    f"{self.timeout_s:g} s deadline, timeout_s); is it overloaded? Raise timeout_s or lower "
                    "concurrency"
                )
            )
        raise JudgeError(
            self._mask(
                f"judge server {url} failed {self.retries + 1} times (last: {last}); is it running, "
                f"and is the base URL right (it usually ends in /v1)?"
            )
        )

    def _send(self, req: urllib.request.Request, deadline: _Deadline) -> bytes:
        """The whole reply's body, its sockets watched by ``deadline``. An HTTP error is raised with
        the start of its page as ``detail`` when it will not be retried, read here, under the deadline."""
        opener = urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline))
        try:
            with opener.open(req, timeout=self.timeout_s) as resp:
                delimited = resp.chunked or resp.length is not None
                raw = resp.read()
                # read() raises IncompleteRead on a cut body with a length or chunks: this one is whole,
                # even if the timer fires before the try ends
                deadline.whole = delimited
                return raw
        except urllib.error.HTTPError as exc:
            if exc.code not in _RETRYABLE_HTTP:
                try:
                    exc.detail = exc.read()[:300].decode(errors="replace")
                except (OSError, http.client.HTTPException):  # the error page itself cut short
                    exc.detail = ""
            raise

    def _one(self, text: str) -> float:
        body = {
            "model": self.model_id,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 20,
        }
        reply = self._post(body)
        try:
            return self._read_answer(reply)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise JudgeError(
                self._mask(
                    f"judge server {self.base_url} sent a reply this client cannot read "
                    f"({type(exc).__name__}: {exc}); is it OpenAI-compatible? The reply: {str(reply)[:200]}"
                )
            ) from None

    def _read_answer(self, reply: dict) -> float:
        if not isinstance(reply, dict) or not reply.get("choices"):
            raise JudgeError(self._mask(f"judge server reply has no choices: {str(reply)[:200]}"))
        choice = reply["choices"][0]
        content = ((choice.get("logprobs") or {}).get("content")) or []
        if content and content[0].get("top_logprobs"):
            mass = {"yes": 0.0, "no": 0.0}
            for item in content[0]["top_logprobs"]:
                word = answer_word(item.get("token") or "")
                if word:
                    logprob = float(item["logprob"])
                    if not (logprob <= 0 and (math.isfinite(logprob) or logprob == -math.inf)):  # a probability <= 1
                        raise ValueError(f"log-probability {item['logprob']!r} of {item.get('token')!r}")
                    mass[word] += math.exp(logprob)
            if mass["yes"] + mass["no"] > 0:
                return yes_no_mass(mass["yes"], mass["no"])
        answer = (choice.get("message") or {}).get("content") or ""
        word = answer_word(answer.split()[0] if answer.split() else "")
        if word is None:
            raise JudgeError(
                self._mask(
                    f"judge {self.model_id!r} answered {answer[:40]!r}, neither yes nor no, and gave no "
                    "yes/no among its top log-probabilities"
                )
            )
        return 1.0 if word == "yes" else 0.0

    def p_yes(self, docs: Sequence[str], label_texts: Sequence[str], prompt: Prompt) -> np.ndarray:
        start = time.perf_counter()
        texts = []
        for doc, label in zip(docs, label_texts, strict=False):
            if len(doc) > self.max_doc_chars:
                doc = doc[: self.max_doc_chars]
                self.stats.truncated += 1
            texts.append(prompt.render(doc, label))
        with ThreadPoolExecutor(self.concurrency) as pool:
            out = np.fromiter(pool.map(self._one, texts), dtype=np.float64, count=len(texts))
        self.stats.asked += len(texts)
        self.stats.llm_seconds += time.perf_counter() - start
        return out


class _Deadline:
    """Ends one try when its time is up by shutting down its sockets, which ends a read or write
    under way at once (in any thread) and every later one. ``cut``: it did so. A connection that
    was never made is left to its socket timeout (its error says whether the server is running)."""

    def __init__(self, seconds: float):
        self.expired = False
        self.cut = False
        self.whole = False  # the reply's own framing (length, chunks) said it was read to its end
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()

    def watch(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:  # connected after the time was up
                self.cut = True
                _shut(sock)
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            self.cut = bool(self._sockets)
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:  # the plain socket's method: a TLS socket's own shutdown also drops its state under a reader
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # closed already, or a plain socket since handed over to its TLS wrapper (watched too)
        pass


class _Watched:
    """A connection whose sockets its try's deadline watches: the plain socket as soon as it is
    connected (a TLS handshake can be trickled too), then the TLS socket that takes it over."""

    def __init__(self, *args, deadline: _Deadline, **kwargs):
        super().__init__(*args, **kwargs)
        self._deadline = deadline
        create = self._create_connection
        self._create_connection = lambda *a, **kw: deadline.watch(create(*a, **kw))

    def connect(self) -> None:
        super().connect()
        self._deadline.watch(self.sock)


class _WatchedHTTP(_Watched, http.client.HTTPConnection):
    pass


class _WatchedHTTPS(_Watched, http.client.HTTPSConnection):
    pass


class _DeadlineHandler:
    """urllib's handler (proxies, TLS set-up as before) opening a watched connection."""

    def __init__(self, deadline: _Deadline):
        super().__init__()
        self._deadline = deadline

    def do_open(self, http_class, req, **kwargs):
        watched = _WatchedHTTPS if issubclass(http_class, http.client.HTTPSConnection) else _WatchedHTTP
        return super().do_open(functools.partial(watched, deadline=self._deadline), req, **kwargs)


class _HTTPHandler(_DeadlineHandler, urllib.request.HTTPHandler):
    pass


class _HTTPSHandler(_DeadlineHandler, urllib.request.HTTPSHandler):
    pass


_MAX_RETRY_AFTER_S = 60.0


def _retry_after(headers) -> float:
    """Seconds a busy server asked us to wait (``Retry-After: 5``), capped at a minute so a
    misconfigured server cannot stall a run for hours; 0 when it asked nothing readable (the HTTP
    date form is rare from inference servers and falls back to the plain backoff)."""
    value = (headers or {}).get("Retry-After") if headers is not None else None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return 0.0
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER_S) if math.isfinite(seconds) else 0.0
