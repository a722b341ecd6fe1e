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
from dataclasses import dataclass, field
from pathlib import Path

from xmcbench import paths
from xmcbench.encoders.hub_ref import hub_endpoint, hub_error_message
from xmcbench.errors import XmcbenchError
from xmcbench.fsutil import check_name, file_lock, utc_now, write_json
from xmcbench.hub.card import render_card
from xmcbench.hub.folder import PushFolder, build_folder, check_model_files
from xmcbench.store.record import RECORD_FILE, load_record

HUB_FILE = "hub.json"
# what a push that the Hub or the network broke off should tell the user (see the module docstring)
RERUN = "nothing was committed; run the same push again to finish it (files that already arrived are not sent again)"
RECIPE_FILE = "recipe.yaml"
_BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")


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


def require_token() -> None:
    """A token the way huggingface_hub takes it (HF_TOKEN, the stored login); never printed."""
    from huggingface_hub import get_token

    if not get_token():
        raise XmcbenchError("no Hugging Face token: set HF_TOKEN or log in with `hf auth login` (a write token)")


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
        raise XmcbenchError(hub_error_message(exc, f"push run {run_id} to {repo_id}", retry=RERUN)) from None
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
