"""Shared results: finished runs' records in a Hub dataset repo, one file per run.

``push_results`` uploads ``runs/<run_id>.json`` for every finished run the database indexes (the
record as the run wrote it, secrets masked; no models), in one commit; unchanged files are
skipped by the client, so pushing again only adds what is new. ``fetch_results`` downloads them
back; ``merged_store`` gives a throw-away database with the local runs and the fetched ones
(de-duplicated by run id, the local copy winning) so ``xmcbench table --results`` shows both next
to the papers without touching the local database.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from xmcbench import paths
from xmcbench.encoders.hub_ref import download_checkpoint, hub_endpoint
from xmcbench.errors import XmcbenchError
from xmcbench.fsutil import check_name, to_json
from xmcbench.hub.folder import PushFolder, building_out_dir
from xmcbench.hub.push import PushResult, check_repo_id, hub_timeout, hub_timeouts, hub_url, push_error, require_token
from xmcbench.redact import publishable
from xmcbench.store import Store, record_rows

RESULTS_DIR = "runs"
DATASETS_PREFIX = "hf://datasets/"


def parse_results_repo(text: str) -> tuple[str, str | None]:
    """``hf://datasets/ORG/NAME[@REV]`` or ``ORG/NAME`` -> (repo id, revision)."""
    body = text[len(DATASETS_PREFIX) :] if text.lower().startswith(DATASETS_PREFIX) else text
    if text.lower().startswith("hf://") and not text.lower().startswith(DATASETS_PREFIX):
        raise XmcbenchError(f"--results {text!r}: shared results live in a dataset repo, hf://datasets/ORG/NAME")
    repo, _, rev = body.partition("@")
    return check_repo_id(repo, "--results"), rev or None


def push_results(
    repo: str,
    *,
    db: str | os.PathLike | None = None,
    private: bool = False,
    dry_run: bool = False,
    out: str | os.PathLike | None = None,
) -> PushResult:
    """Upload the database's finished runs to the Hub dataset repo ``repo`` (ORG/NAME), one JSON file per run."""
    repo_id = check_repo_id(repo)
    # read-only: sharing must not create a database (or its folder) where a typo in --db points
    with Store.open(db, read_only=True, missing_ok=True) as store:
        if not store.exists:
            raise XmcbenchError(f"no results database at {store.path}; run something or `xmcbench ingest DIR` first")
        records = [store.get_run(run["run_id"])["record"] for run in store.runs(status="finished")]
    if not records:
        raise XmcbenchError("no finished runs in the database to share; run something or `xmcbench ingest DIR` first")
    if not dry_run:
        require_token()
        hub_timeout()
    target = Path(out).expanduser() if out else paths.home() / "hub" / "results" / repo_id.replace("/", "--")
    with building_out_dir(target, owned=_built_results_folder) as folder:
        (folder / RESULTS_DIR).mkdir()
        for record in records:
            run_id = check_name(record["run_id"], "run id")
            text = to_json(publishable(record)) + "\n"
            (folder / RESULTS_DIR / f"{run_id}.json").write_text(text, encoding="utf-8")
        (folder / "README.md").write_text(_dataset_card(repo_id, len(records)), encoding="utf-8")
    target = target.absolute()
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    result = PushResult(
        repo_id,
        hub_url(repo_id, "dataset"),
        PushFolder(target, files),
        dry_run=dry_run,
        repo_type="dataset",
        extra={"runs": len(records)},
    )
    if dry_run:
        return result

    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub_endpoint())
    try:
        with hub_timeouts():
            api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
            info = api.upload_folder(
                folder_path=str(target),
                repo_id=repo_id,
                repo_type="dataset",
                commit_message=f"xmcbench: {len(records)} finished runs",
            )
    except Exception as exc:
        retry = "nothing was committed; run push-results again (files that already arrived are not sent again)"
        raise XmcbenchError(push_error(exc, f"push results to {repo_id}", retry)) from None
    result.commit = info.oid
    return result


def fetch_results(results: str) -> list[dict]:
    """The run records in a shared results repo (``hf://datasets/ORG/NAME[@REV]`` or ``ORG/NAME``)."""
    repo_id, revision = parse_results_repo(results)
    ckpt = download_checkpoint(
        f"hf://{repo_id}", revision, repo_type="dataset", allow_patterns=[f"{RESULTS_DIR}/*.json"]
    )
    records = []
    for path in sorted((ckpt.path / RESULTS_DIR).glob("*.json")) if (ckpt.path / RESULTS_DIR).is_dir() else []:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            record_rows(record, None, where=f"{results}/{RESULTS_DIR}/{path.name}")  # checked like a local record
        except (ValueError, XmcbenchError):
            continue  # one bad file must not hide the others; the table is still honest about what it shows
        if record.get("status") == "finished":
            records.append(record)
    return records


@contextmanager
def merged_store(db: str | os.PathLike | None, remote: list[dict]) -> Iterator[Store]:
    """A temporary database holding the local runs plus ``remote`` records whose run id is not local."""
    tmp = Path(tempfile.mkdtemp(prefix="xmcbench-results-"))
    try:
        local_ids = set()
        local = []
        with Store.open(db, read_only=True, missing_ok=True) as store:  # a read command writes nothing
            for run in store.runs() if store.exists else []:
                local_ids.add(run["run_id"])
                local.append((store.get_run(run["run_id"])["record"], run.get("run_dir")))
        with Store.open(tmp / "merged.duckdb") as merged:
            for record, run_dir in local:
                merged.ingest_record(record, run_dir)
            for record in remote:
                if record["run_id"] not in local_ids:
                    merged.ingest_record(record, None)
                    local_ids.add(record["run_id"])
            yield merged
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _dataset_card(repo_id: str, n: int) -> str:
    return (
        "---\ntags:\n- xmcbench\n- extreme-multi-label\n- benchmark-results\npretty_name: xmcbench shared results\n---\n\n"
        f"# {repo_id.split('/')[-1]}\n\n{n} finished xmcbench runs, one record per file under `{RESULTS_DIR}/` "
        "(scores with 95% bootstrap intervals, compute, label-pool accounting, provenance; no models).\n\n"
        f"```bash\nxmcbench table --dataset DATASET --results hf://datasets/{repo_id}\n```\n"
    )


def _built_results_folder(folder: Path) -> bool:
    """A folder ``push_results`` made: its dataset card and one JSON file per run, nothing else (a
    project folder that happens to hold a README and a runs/ folder is not one)."""
    card = folder / "README.md"
    try:
        if "xmcbench" not in card.read_text(encoding="utf-8"):
            return False
    except (OSError, UnicodeDecodeError):
        return False
    for entry in folder.rglob("*"):
        name = entry.relative_to(folder)
        if entry.is_dir() and name == Path(RESULTS_DIR):
            continue
        if not (name == Path("README.md") or (name.parent == Path(RESULTS_DIR) and name.suffix == ".json")):
            return False
    return True
