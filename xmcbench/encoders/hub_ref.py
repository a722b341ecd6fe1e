"""``hf://ORG/NAME[@REVISION]`` encoder names: a published checkpoint downloaded from the Hub.

Lives beside the encoder (not in ``xmcbench.hub``) because every method builds its encoder
here, below the method layer; ``xmcbench.hub`` re-exports it. Downloads go through
``snapshot_download`` into ``$XMCBENCH_HOME/hub`` (so a run's home holds everything it used) and
resolve a branch or tag to the commit actually fetched, which is what a run should record.
The endpoint is read from ``HF_ENDPOINT`` at call time (huggingface_hub reads it once, at
import), and the token the way huggingface_hub takes it (``HF_TOKEN``, the stored login).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from xmcbench import paths
from xmcbench.errors import XmcbenchError
from xmcbench.faults import network_failure
from xmcbench.redact import redact

HF_SCHEME = "hf://"
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class HubRef:
    repo_id: str
    revision: str | None = None

    def __str__(self) -> str:
        return HF_SCHEME + self.repo_id + (f"@{self.revision}" if self.revision else "")


def is_hub_ref(name: str | None) -> bool:
    return isinstance(name, str) and name.lower().startswith(HF_SCHEME)


def parse_hub_ref(name: str, revision: str | None = None) -> HubRef:
    """``hf://ORG/NAME[@REV]`` -> HubRef; ``revision`` (the recipe's encoder.revision) fills in a missing @REV."""
    body = name[len(HF_SCHEME) :]
    repo_id, sep, rev = body.partition("@")
    if not _REPO.match(repo_id) or ".." in repo_id or (sep and not rev):
        raise XmcbenchError(f"encoder {name!r}: a Hub checkpoint is written hf://ORG/NAME or hf://ORG/NAME@REVISION")
    if rev and revision and rev != revision:
        raise XmcbenchError(f"encoder {name!r} names revision {rev!r} but encoder.revision is {revision!r}; give one")
    return HubRef(repo_id, rev or revision)


def hub_endpoint() -> str | None:
    value = os.environ.get("HF_ENDPOINT", "").strip().rstrip("/")
    return value or None


def hub_cache_dir() -> Path:
    return paths.home() / "hub"


@dataclass(frozen=True)
class ResolvedCheckpoint:
    ref: HubRef
    path: Path  # the snapshot folder
    commit: str  # the commit fetched (a branch or tag resolved)


def download_checkpoint(
    name: str, revision: str | None = None, repo_type: str = "model", allow_patterns: list[str] | None = None
) -> ResolvedCheckpoint:
    """Download (or find in the cache) the snapshot of ``hf://ORG/NAME[@REV]``."""
    from huggingface_hub import snapshot_download

    ref = parse_hub_ref(name, revision)
    try:
        folder = Path(
            snapshot_download(
                ref.repo_id,
                repo_type=repo_type,
                revision=ref.revision,
                cache_dir=str(hub_cache_dir()),
                endpoint=hub_endpoint(),
                allow_patterns=allow_patterns,
            )
        )
    except Exception as exc:  # huggingface_hub raises many kinds; all mean "not downloaded"
        raise XmcbenchError(hub_error_message(exc, f"download {ref}")) from None
    return ResolvedCheckpoint(ref, folder, folder.name)


def hub_error_message(exc: BaseException, action: str, retry: str = "try again") -> str:
    """One line for the terminal: what failed and what to do, never a token.

    ``retry`` is the advice for a failure of the Hub or the network (not of the user's token or repo
    name): a push says how to finish what it started.
    """
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    outer = exc
    exc, status = http_cause(exc)
    uploading = re.match(r"Error while uploading '([^']+)'", str(outer))
    if uploading and status is not None:
        # an LFS object's upload (to the Hub's storage, not its API): the file, not the token, is the news
        hint = f"the upload of {uploading.group(1)} failed (HTTP {status}); {retry}"
    elif isinstance(exc, RevisionNotFoundError):
        hint = "that revision does not exist in the repo"
    elif isinstance(exc, GatedRepoError):
        hint = "the repo is gated: accept its conditions on the Hub with this account"
    elif status == 401 and not isinstance(exc, RepositoryNotFoundError):
        hint = "the Hub refused the token (401): set a valid HF_TOKEN or log in with `hf auth login`"
    elif isinstance(exc, RepositoryNotFoundError):
        hint = "repo not found, or private and the token cannot see it (set HF_TOKEN or `hf auth login`)"
    elif status == 403:
        hint = "the token has no write access to this repo (403): use a token with write permission"
    elif type(exc).__name__ == "IncompleteSnapshotError" and os.environ.get("HF_HUB_OFFLINE") == "1":
        hint = (
            "HF_HUB_OFFLINE=1 is set and the cached snapshot lacks files (`xmcbench plan` fetches only an "
            "encoder's config and tokenizer, not its weights); run it once with the Hub reachable"
        )
    elif isinstance(exc, (OfflineModeIsEnabled, LocalEntryNotFoundError)) and os.environ.get("HF_HUB_OFFLINE") == "1":
        hint = "HF_HUB_OFFLINE=1 is set (and nothing usable is cached); unset it to reach the Hub"
    elif isinstance(exc, HfHubHTTPError) and status is not None:
        hint = f"the Hub answered {status}; {retry}"
    elif (
        isinstance(exc, (ConnectionError, TimeoutError, LocalEntryNotFoundError))
        or "connect" in type(exc).__name__.lower()
    ):
        hint = (
            f"cannot reach the Hub at {hub_endpoint() or 'https://huggingface.co'}; check the network or HF_ENDPOINT, "
            f"then {retry}"
        )
    elif (broken := network_failure(outer)) is not None:
        # a read timeout or a connection dropped mid-download: the network's fault, not the user's
        hint = f"the connection to the Hub failed ({type(broken).__name__}: {broken}); {retry}"
    else:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        hint = f"{type(exc).__name__}: {first}"
    return redact(f"cannot {action}: {hint}")


def http_cause(exc: BaseException) -> tuple[BaseException, int | None]:
    """The HTTP error behind ``exc`` and its status: huggingface_hub wraps some (an LFS upload's) in a RuntimeError."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        status = getattr(getattr(cur, "response", None), "status_code", None)
        if status is not None:
            return cur, status
        cur = cur.__cause__ or cur.__context__
    return exc, None


def resolved_revision(name: str | None, revision: str | None = None) -> str | None:
    """The commit an ``hf://`` encoder resolves to (downloading it if needed); ``revision`` for any other name.

    What a run should record as ``model.encoder_revision``: a branch or tag moves, the commit does not.
    """
    if name is None or not is_hub_ref(name):
        return revision
    return download_checkpoint(name, revision).commit
