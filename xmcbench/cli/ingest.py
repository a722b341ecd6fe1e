"""``xmcbench ingest``: index run directories into the results database."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from xmcbench.cli._common import console, err_console, handle_errors


@handle_errors
def ingest(
    directory: Annotated[Path, typer.Argument(help="A run directory, or a folder of them (e.g. $XMCBENCH_HOME/runs).")],
    db: Annotated[
        Path | None, typer.Option(help="DuckDB results database (default: $XMCBENCH_HOME/xmcbench.duckdb).")
    ] = None,
) -> None:
    """Index run records (record.json) into the database; rebuilds a lost or damaged database.

    A damaged database file is moved aside (kept as <db>.damaged-<UTC time>) and a fresh one is
    built from DIRECTORY. An older database is migrated.

    Unchanged runs are skipped; damaged records are reported and the rest ingested. Exits with
    status 1 when any record was bad.
    """
    from xmcbench import paths
    from xmcbench.errors import XmcbenchError
    from xmcbench.store import Store

    if not directory.is_dir():  # before opening: a mistyped folder must not create a database
        what = "is a file, not a folder" if directory.exists() else "no such directory"
        if directory.name == "record.json" and directory.is_file():
            what += f" (give the run directory that holds it: {directory.parent})"
        raise XmcbenchError(f"{directory}: {what}; give a run directory or a folder of them (e.g. {paths.runs_dir()})")
    with Store.open(db, repair=True, runs_from=directory) as store:
        report = store.ingest_dir(directory)
        path = store.path
        try:  # keeps the published numbers in the database current for SQL users; tables read the files anyway
            store.refresh_reference_results()
        except XmcbenchError as exc:
            err_console.print(
                f"[yellow]warning:[/] published results not loaded: {exc}", highlight=False, soft_wrap=True
            )
    if store.moved_aside is not None:
        err_console.print(
            f"[yellow]rebuilt[/] {path} from {directory} (the damaged file is kept at {store.moved_aside}); "
            f"ingest any other folders of runs the same way",
            highlight=False,
            soft_wrap=True,
        )
    if report.interrupted:
        err_console.print(
            f"{len(report.interrupted)} run(s) recorded as running whose process is gone were indexed as interrupted",
            highlight=False,
        )
    for run_dir, reason in report.bad:
        err_console.print(f"[red]bad[/] {escape(f'{run_dir}: {reason}')}", highlight=False, soft_wrap=True)
    console.print(escape(f"{report.summary()} → {path}"), highlight=False, soft_wrap=True)
    if not report.ingested and not report.bad:
        deeper = _folders_of_runs(directory)
        if deeper:  # e.g. $XMCBENCH_HOME given for $XMCBENCH_HOME/runs
            err_console.print(
                f"[yellow]note:[/] no run directories directly in {escape(str(directory))}, but "
                f"{escape(', '.join(str(d) for d in deeper[:3]))} hold(s) some: "
                f"`xmcbench ingest {escape(str(deeper[0]))}`",
                highlight=False,
                soft_wrap=True,
            )
    if report.bad:
        raise typer.Exit(1)


def _folders_of_runs(directory: Path) -> list[Path]:
    """Sub-folders of ``directory`` that hold run directories, when ``directory`` itself holds none."""
    from xmcbench.store.record import RECORD_FILE

    def holds_runs(folder: Path) -> bool:
        try:
            return any((child / RECORD_FILE).is_file() for child in folder.iterdir() if child.is_dir())
        except OSError:
            return False

    if (directory / RECORD_FILE).exists() or holds_runs(directory):
        return []
    try:
        return sorted(child for child in directory.iterdir() if child.is_dir() and holds_runs(child))
    except OSError:
        return []
