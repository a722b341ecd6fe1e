"""``xmcbench push`` and ``xmcbench push-results``: thin wrappers over ``xmcbench.hub``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xmcbench.cli._common import console, handle_errors


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _report(result, what: str) -> None:
    # soft_wrap: a URL, commit or path is never broken across lines (users copy them)
    folder = result.folder
    if result.dry_run:
        console.print(
            f"[bold]dry run[/]: would upload {len(folder.files)} files ({_human(folder.size())}) "
            f"to {result.url}" + (f" (branch {result.revision})" if result.revision else ""),
            highlight=False,
            soft_wrap=True,
        )
        for name in folder.files:
            console.print(f"  {name}  {_human((folder.path / name).stat().st_size)}", highlight=False, soft_wrap=True)
        console.print(f"folder written to {folder.path}", highlight=False, soft_wrap=True)
    else:
        console.print(f"pushed {what} to {result.url} (commit {result.commit})", highlight=False, soft_wrap=True)


@handle_errors
def push(
    run_id: Annotated[str, typer.Argument(help="Run id (a unique prefix is enough) or run folder.")],
    repo: Annotated[str, typer.Option("--repo", help="Hub model repo, ORG/NAME.")],
    private: Annotated[bool, typer.Option("--private", help="Create the repo private.")] = False,
    revision: Annotated[
        str | None, typer.Option("--revision", help="Branch to push to (created from main if new).")
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Write the folder and card locally and list what would be uploaded; upload nothing."
        ),
    ] = False,
    license: Annotated[
        str, typer.Option("--license", help="License id for the card's metadata (e.g. apache-2.0, mit).")
    ] = "other",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Where to build the upload folder (default: $XMCBENCH_HOME/hub/push/RUN_ID); "
            "a new or empty folder, or one an earlier push built.",
        ),
    ] = None,
) -> None:
    """Push a finished run's trained model (sentence-transformers folder + method parts), model card, record and recipe.

    The token is taken like huggingface_hub takes it: HF_TOKEN, or the login stored by `hf auth login`.
    A Hub that gives no usable answer for XMCBENCH_HUB_TIMEOUT seconds (default 60), retries included,
    ends the push with an error instead of hanging (at most 8 s later, a pause between tries); run the
    same push again to finish it.
    """
    from xmcbench.hub import push_run

    result = push_run(run_id, repo, private=private, revision=revision, dry_run=dry_run, out=out, license=license)
    _report(result, "the model")


@handle_errors
def push_results(
    repo: Annotated[str, typer.Option("--repo", help="Hub dataset repo, ORG/NAME.")],
    private: Annotated[bool, typer.Option("--private", help="Create the repo private.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Write the files locally and list them; upload nothing.")
    ] = False,
    db: Annotated[
        Path | None, typer.Option(help="DuckDB results database (default: $XMCBENCH_HOME/xmcbench.duckdb).")
    ] = None,
) -> None:
    """Share the database's finished runs (records, not models) in a Hub dataset repo, one file per run."""
    from xmcbench.hub import push_results as push_records

    result = push_records(repo, db=db, private=private, dry_run=dry_run)
    _report(result, f"{result.extra.get('runs')} run records")
