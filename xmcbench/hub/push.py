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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from xmcbench import paths
from xmcbench.encoders.hub_ref import http_cause, hub_endpoint, hub_error_message
from xmcbench.errors import XmcbenchError
from xmcbench.faults import network_failure
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
    """Seconds to wait for the Hub to answer a request (``XMCBENCH_HUB_TIMEOUT``, default 60)."""
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
    """huggingface_hub's client waits forever for an answer: a Hub that stalls must end a push with an
    error, not hang it. Its client factory gets a timeout for the push and is put back afterwards."""
    import huggingface_hub
    from huggingface_hub.utils import _http

    seconds = hub_timeout()
    previous = getattr(_http, "_GLOBAL_CLIENT_FACTORY", _http.default_client_factory)

    def factory():
        client = previous()
        client.timeout = seconds
        return client

    huggingface_hub.set_client_factory(factory)
    try:
        yield seconds
    finally:
        huggingface_hub.set_client_factory(previous)


def push_error(exc: BaseException, action: str, retry: str) -> str:
    """One line for a failed upload; a broken or silent connection is the network's fault, so say to rerun."""
    import httpx2

    broken = network_failure(exc)
    if isinstance(broken, httpx2.TimeoutException):
        return redact(
            f"cannot {action}: the Hub did not answer within {hub_timeout():g} s "
            f"(set {TIMEOUT_ENV} to wait longer); {retry}"
        )
    if broken is not None:
        return redact(
            f"cannot {action}: the connection to the Hub broke off ({type(broken).__name__}: {broken}); {retry}"
        )
    http, status = http_cause(exc)
    # 409 and 412: another commit landed first, which a rerun gets past
    if status is not None and 400 <= status < 500 and status not in (401, 403, 404, 408, 409, 412, 429):
        # the Hub refused what was sent (a card's metadata, a file too large): sending it again fails the same way
        said = getattr(http, "server_message", None) or str(exc)
        first = next((line.strip() for line in str(said).splitlines() if line.strip()), "")
        return redact(f"cannot {action}: the Hub refused it ({status}): {first[:300]}; nothing was committed")
    return hub_error_message(exc, action, retry=retry)


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
