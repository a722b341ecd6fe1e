"""Push a finished run's trained model to a Hub model repo: ``push_run``.

Order matters so that nothing half-done is ever claimed: every check (repo name, run finished,
model files present, a token) comes before anything is written; the folder is built locally
(``--dry-run`` stops there); the upload is one commit (``upload_folder``: LFS objects first, then
the commit that makes them visible); only after the commit succeeded does the run folder get a
``hub.json`` entry (repo, revision, commit, time). An upload that dies half-way leaves the repo as
it was and ``hub.json`` unchanged; running the push again re-sends only what the Hub lacks (the
LFS batch answers "already there" for objects that arrived) and then commits.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from xmcbench import paths
from xmcbench.encoders.hub_ref import http_cause, hub_endpoint, hub_error_message
from xmcbench.errors import XmcbenchError
from xmcbench.faults import exception_chain, network_failure
from xmcbench.fsutil import check_name, file_lock, utc_now, write_json
from xmcbench.hub.card import render_card
from xmcbench.hub.folder import PushFolder, build_folder, check_model_files
from xmcbench.redact import redact
from xmcbench.store.record import RECORD_FILE, load_record

HUB_FILE = "hub.json"
# what a push that the Hub or the network broke off should tell the user (see the module docstring)
RERUN = "nothing was committed; run the same push again to finish it (files that already arrived are not sent again)"
RECIPE_FILE = "recipe.yaml"
_BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")
_LICENSE = re.compile(r"^[a-z0-9][a-z0-9.+-]{0,63}$")
TIMEOUT_ENV = "XMCBENCH_HUB_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0


@dataclass
class PushResult:
    repo_id: str
    url: str
    folder: PushFolder
    revision: str | None = None
    commit: str | None = None  # None for a dry run
    dry_run: bool = False
    repo_type: str = "model"
    extra: dict = field(default_factory=dict)


def check_repo_id(repo: str, what: str = "--repo") -> str:
    """``ORG/NAME`` checked with huggingface_hub's own validator, before anything is written."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not isinstance(repo, str) or repo.count("/") != 1:
        raise XmcbenchError(
            f"{what} {repo!r} is not a Hub repo name: write it ORG/NAME (e.g. my-org/dexml-amazontitles)"
        )
    try:
        validate_repo_id(repo)
    except HFValidationError as exc:
        first = str(exc).strip().splitlines()[0]
        raise XmcbenchError(f"{what} {repo!r} is not a valid Hub repo name: {first}") from None
    return repo


def check_revision(revision: str | None) -> str | None:
    if revision is None:
        return None
    if not _BRANCH.match(revision) or ".." in revision or revision.endswith((".lock", "/")):
        raise XmcbenchError(f"--revision {revision!r} is not a valid branch name (letters, digits, . _ - /)")
    return revision


def check_license(license: str) -> str:
    """The Hub takes lower-case license ids (apache-2.0, cc-by-4.0, other); anything else fails its README check."""
    if not isinstance(license, str) or not _LICENSE.match(license):
        raise XmcbenchError(
            f"--license {license!r} is not a Hub license id: write it lower-case, e.g. apache-2.0, mit, cc-by-4.0 "
            "or other"
        )
    return license


def require_token() -> None:
    """A token the way huggingface_hub takes it (HF_TOKEN, the stored login); never printed."""
    from huggingface_hub import get_token

    if not get_token():
        raise XmcbenchError("no Hugging Face token: set HF_TOKEN or log in with `hf auth login` (a write token)")


def hub_timeout() -> float:
    """Seconds the Hub may stay silent, or keep failing, before a push ends (``XMCBENCH_HUB_TIMEOUT``, default 60).

    It bounds each request (no answer within it: the request fails) and each request's retries
    together (see ``hub_timeouts``), so a push whose Hub stops answering ends within it, plus at most
    one of huggingface_hub's pauses between tries (8 s).
    """
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise XmcbenchError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds > 0 (e.g. {TIMEOUT_ENV}=120)")
    return value


@contextmanager
def hub_timeouts() -> Iterator[float]:
    """Bound what a push waits for: huggingface_hub's client waits forever for an answer, and retries a
    request that timed out, lost its connection or got 408/429/5xx five times more with pauses of up to
    8 s (``http_backoff``'s ``max_retries=5``, which has no setting) or as long as a ``Retry-After``
    says; a stalled Hub then cost 6 timeouts and more.

    For the push, the client factory makes clients with the timeout and a transport that stops the
    retries: once one request has had no usable answer for ``hub_timeout()`` seconds (its first try
    timing out is that), it and every later request of the push raise ``HubStalled``, which the
    client does not retry. Xet uploads are switched off (LFS instead): hf_xet's own client has its
    own retries (HF_XET_CLIENT_RETRY_MAX_DURATION, 6 min) that this bound would not reach. Both are
    put back afterwards.
    """
    import huggingface_hub
    import huggingface_hub.constants as hf_constants
    from huggingface_hub.utils import _http

    seconds = hub_timeout()
    guard = _StallGuard(seconds)
    previous = getattr(_http, "_GLOBAL_CLIENT_FACTORY", _http.default_client_factory)

    def factory():
        client = previous()
        client.timeout = seconds
        _guard_transports(client, guard)
        return client

    xet = hf_constants.HF_HUB_DISABLE_XET
    huggingface_hub.set_client_factory(factory)
    hf_constants.HF_HUB_DISABLE_XET = True
    try:
        yield seconds
    finally:
        hf_constants.HF_HUB_DISABLE_XET = xet
        huggingface_hub.set_client_factory(previous)


class HubStalled(Exception):
    """The Hub gave no usable answer for the push's timeout. Not an httpx2 error, so that
    huggingface_hub raises it at once instead of trying again."""

    def __init__(self, origin: str, seconds: float, last: str, wait: float | None = None):
        super().__init__(f"the Hub at {origin} gave no usable answer for {seconds:g} s ({last})")
        self.origin, self.seconds, self.last, self.wait = origin, seconds, last, wait


RETRIED_STATUSES = (408, 429, 500, 502, 503, 504)  # what huggingface_hub's http_backoff tries again


def _origin(url) -> str:
    """scheme://host[:port] of a request: where it went, without credentials, path or (signed) query."""
    host = f"[{url.host}]" if ":" in url.host else url.host  # an IPv6 address
    return f"{url.scheme}://{host}{f':{url.port}' if url.port else ''}"


class _StallGuard:
    """What the requests of one push have seen: since when each request (method, URL) has had no usable
    answer and what the last one was, and whether the push has stalled. Shared by the client's
    transports (uploads run in threads)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._failing: dict[tuple[str, str], tuple[float, str]] = {}
        self._lock = threading.Lock()
        self._stalled: HubStalled | None = None

    def before(self, request) -> None:
        """Refuse a request once the push stalled; no try may wait longer than the timeout, a retry only
        what is left of it."""
        with self._lock:
            if self._stalled is not None:
                # the same words for every request, whichever of them huggingface_hub reports
                raise HubStalled(self._stalled.origin, self.seconds, self._stalled.last, self._stalled.wait)
            since, last = self._failing.get(_key(request), (None, ""))
        left = self.seconds
        if since is not None:
            left -= time.monotonic() - since
            if left <= 0:  # huggingface_hub paused between tries past the timeout
                self._stall(request, last)
        own = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {
            key: left if own.get(key) is None else min(own[key], left) for key in ("connect", "read", "write", "pool")
        }

    def failed(self, request, exc: BaseException) -> None:
        """A try that timed out (silent for its whole timeout) or lost its connection."""
        import httpx2

        if isinstance(exc, httpx2.TimeoutException):
            silent = max((v for v in request.extensions["timeout"].values() if v is not None), default=self.seconds)
            last = "no answer"
        else:
            silent, last = 0.0, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        since = self._failed_since(request, time.monotonic() - silent, last)
        if time.monotonic() - since >= self.seconds * 0.999:  # 0.999: a first try that timed out waited it all
            self._stall(request, last)

    def answered(self, request, response) -> None:
        status = response.status_code
        if status not in RETRIED_STATUSES:
            with self._lock:
                self._failing.pop(_key(request), None)
            return
        now = time.monotonic()
        since = self._failed_since(request, now, f"HTTP {status}")
        wait = _retry_after(response.headers)
        if now - since >= self.seconds * 0.999 or now + (wait or 0.0) - since >= self.seconds:
            response.close()
            # a Retry-After past the timeout: huggingface_hub would sleep it out before trying again
            self._stall(request, f"HTTP {status}", wait if now - since < self.seconds * 0.999 else None)

    def _failed_since(self, request, when: float, last: str) -> float:
        with self._lock:
            since, _ = self._failing.get(_key(request), (when, last))
            self._failing[_key(request)] = (since, last)
        return since

    def _stall(self, request, last: str, wait: float | None = None) -> None:
        stalled = HubStalled(_origin(request.url), self.seconds, last, wait)
        with self._lock:
            self._stalled = self._stalled or stalled
        raise stalled


def _key(request) -> tuple[str, str]:
    return request.method, str(request.url)


def _retry_after(headers) -> float | None:
    """The seconds a 429/503 asks to wait (``Retry-After: 120``); huggingface_hub sleeps that long."""
    text = (headers.get("retry-after") or "").strip()
    return float(text) if text.isdigit() else None


def _guard_transports(client, guard: _StallGuard) -> None:
    """Put ``guard`` between ``client`` and each of its transports (the default one and any proxy's).

    httpx2 takes a transport only when a client is made; the factory before this one (a library
    user's, with their proxy or certificates) made it, so its transports are wrapped in place.
    """
    import httpx2

    class Guarded(httpx2.BaseTransport):
        def __init__(self, inner: httpx2.BaseTransport):
            self.inner = inner

        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            guard.before(request)
            try:
                response = self.inner.handle_request(request)
            except httpx2.TransportError as exc:
                guard.failed(request, exc)
                raise
            guard.answered(request, response)
            response.stream = GuardedBody(response.stream, request)
            return response

        def close(self) -> None:
            self.inner.close()

    class GuardedBody(httpx2.SyncByteStream):
        """An answer that stops half-way counts as a failed try too (huggingface_hub retries it)."""

        def __init__(self, inner, request: httpx2.Request):
            self.inner, self.request = inner, request

        def __iter__(self):
            try:
                yield from self.inner
            except httpx2.TransportError as exc:
                guard.failed(self.request, exc)
                raise

        def close(self) -> None:
            self.inner.close()

    transport = getattr(client, "_transport", None)
    if isinstance(transport, httpx2.BaseTransport):
        client._transport = Guarded(transport)
    mounts = getattr(client, "_mounts", None)
    if isinstance(mounts, dict):
        for pattern, inner in mounts.items():
            if isinstance(inner, httpx2.BaseTransport):
                mounts[pattern] = Guarded(inner)


def push_error(exc: BaseException, action: str, retry: str) -> str:
    """One line for a failed upload; a broken or silent connection is the network's fault, so say to rerun."""
    import httpx2

    stalled = next((e for e in exception_chain(exc) if isinstance(e, HubStalled)), None)
    if stalled is not None:
        if stalled.wait is not None:
            said = (
                f"the Hub at {stalled.origin} answered {stalled.last} and asked to wait {stalled.wait:g} s, "
                f"longer than {TIMEOUT_ENV} ({stalled.seconds:g} s)"
            )
        elif stalled.last == "no answer":
            said = f"the Hub at {stalled.origin} did not answer within {stalled.seconds:g} s"
        else:
            said = f"the Hub at {stalled.origin} kept failing for {stalled.seconds:g} s (last: {stalled.last})"
        return redact(f"cannot {action}: {said} (set {TIMEOUT_ENV} to wait longer); {retry}")
    broken = network_failure(exc)
    origin = _failed_origin(broken)
    if isinstance(broken, httpx2.TimeoutException):
        return redact(
            f"cannot {action}: the Hub at {origin} did not answer within {hub_timeout():g} s "
            f"(set {TIMEOUT_ENV} to wait longer); {retry}"
        )
    if broken is not None:
        return redact(
            f"cannot {action}: the connection to the Hub broke off "
            f"({origin}, {type(broken).__name__}: {broken}); {retry}"
        )
    http, status = http_cause(exc)
    # 409 and 412: another commit landed first, which a rerun gets past
    if status is not None and 400 <= status < 500 and status not in (401, 403, 404, 408, 409, 412, 429):
        # the Hub refused what was sent (a card's metadata, a file too large): sending it again fails the same way
        said = getattr(http, "server_message", None) or str(exc)
        first = next((line.strip() for line in str(said).splitlines() if line.strip()), "")
        return redact(f"cannot {action}: the Hub refused it ({status}): {first[:300]}; nothing was committed")
    return hub_error_message(exc, action, retry=retry)


def _failed_origin(broken: BaseException | None) -> str:
    """Where the request that failed went (scheme://host:port), else the Hub's address."""
    try:
        return _origin(broken.request.url)  # type: ignore[union-attr]
    except (AttributeError, RuntimeError):  # no error, or one raised before it had a request
        return hub_endpoint() or "https://huggingface.co"


def hub_url(repo_id: str, repo_type: str = "model") -> str:
    base = hub_endpoint() or "https://huggingface.co"
    return f"{base}/{'datasets/' if repo_type == 'dataset' else ''}{repo_id}"


def find_run_dir(run: str | os.PathLike, runs_dir: str | os.PathLike | None = None) -> Path:
    """A run folder from its id, a unique prefix of it, or its path."""
    text = str(run)
    given = Path(text).expanduser()
    if os.sep in text or text.startswith("."):
        if (given / RECORD_FILE).is_file():
            return given
        raise XmcbenchError(f"{text} is not a run folder (no {RECORD_FILE} in it)")
    check_name(text, "run id")
    root = Path(runs_dir).expanduser() if runs_dir else paths.runs_dir()
    if (root / text / RECORD_FILE).is_file():
        return root / text
    matches = sorted(p for p in root.glob(f"{text}*") if (p / RECORD_FILE).is_file()) if root.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise XmcbenchError(f"no run {text!r} under {root}; list runs with `xmcbench runs list`")
    raise XmcbenchError(f"{text!r} matches {len(matches)} runs: {', '.join(p.name for p in matches[:5])}")


def push_run(
    run: str | os.PathLike,
    repo: str,
    *,
    private: bool = False,
    revision: str | None = None,
    dry_run: bool = False,
    runs_dir: str | os.PathLike | None = None,
    out: str | os.PathLike | None = None,
    license: str = "other",
) -> PushResult:
    """Upload run ``run``'s model, card, record and recipe to the Hub model repo ``repo`` (ORG/NAME)."""
    repo_id = check_repo_id(repo)
    revision = check_revision(revision)
    license = check_license(license)
    run_dir = find_run_dir(run, runs_dir)
    record = load_record(run_dir)
    run_id = record.get("run_id", run_dir.name)
    if record.get("status") != "finished":
        raise XmcbenchError(
            f"run {run_id} is {record.get('status')}, not finished; only finished runs are pushed "
            f"(continue it with `xmcbench run --resume {run_id}`)"
        )
    for section in ("task", "model"):  # what the card and the folder are made from
        if not isinstance(record.get(section), dict) or (section == "model" and "method" not in record[section]):
            raise XmcbenchError(
                f"{run_dir / RECORD_FILE} has no {section!r} section{' with a method' if section == 'model' else ''}: "
                "the run record is damaged; run the recipe again"
            )
    check_model_files(run_dir / "checkpoints" / "model", record["model"]["method"])
    recipe_path = run_dir / RECIPE_FILE
    if not recipe_path.is_file():
        raise XmcbenchError(f"{recipe_path} is missing; a model is published with the recipe it was trained with")
    if not dry_run:
        require_token()
        hub_timeout()

    url = hub_url(repo_id)
    recipe_text = recipe_path.read_text(encoding="utf-8")
    card = render_card(record, recipe_text, repo_id, repo_url=url, license=license)
    target = Path(out).expanduser() if out else paths.home() / "hub" / "push" / run_id
    folder = build_folder(run_dir, record, recipe_text, target, card)
    result = PushResult(repo_id, url, folder, revision=revision, dry_run=dry_run)
    if dry_run:
        return result

    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub_endpoint())
    try:
        with hub_timeouts():
            api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
            if revision and revision != "main":
                api.create_branch(repo_id, branch=revision, exist_ok=True, repo_type="model")
            info = api.upload_folder(
                folder_path=str(folder.path),
                repo_id=repo_id,
                repo_type="model",
                revision=revision,
                commit_message=f"xmcbench: {record['model']['method']} run {run_id}",
                commit_description=f"Pushed by xmcbench from run {run_id} ({record['task'].get('dataset')}).",
            )
    except Exception as exc:  # anything from the client means: not pushed
        raise XmcbenchError(push_error(exc, f"push run {run_id} to {repo_id}", RERUN)) from None
    result.commit = info.oid
    _remember(
        run_dir,
        {
            "repo": repo_id,
            "repo_type": "model",
            "url": url,
            "revision": revision or "main",
            "commit": info.oid,
            "private": private,
            "files": len(folder.files),
            "pushed_at": utc_now(),
        },
    )
    return result


def _remember(run_dir: Path, push: dict) -> None:
    """Append to ``<run>/hub.json``, after the commit exists (so it never claims an unfinished push)."""
    import json

    path = run_dir / HUB_FILE
    with file_lock(run_dir / ".hub.lock", timeout=30, what=f"{path}"):
        pushes = []
        if path.exists():
            try:
                pushes = list(json.loads(path.read_text(encoding="utf-8")).get("pushes") or [])
            except (ValueError, AttributeError, OSError):
                pushes = []  # damaged: the Hub holds the truth; start the list again
        pushes.append(push)
        write_json(path, {"pushes": pushes})


def pushes(run_dir: str | os.PathLike) -> list[dict]:
    """What ``hub.json`` says was pushed from this run (empty when never)."""
    import json

    path = Path(run_dir) / HUB_FILE
    if not path.exists():
        return []
    return list(json.loads(path.read_text(encoding="utf-8")).get("pushes") or [])
