"""``xmcbench ingest``: index run directories into the results database."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from xmcbench.cli._common import console, err_console, handle_errors


@handle_errors
def ingest(
    directory: Annotated[Path, typer.Argument(help="A run directory, or a folder of them (e.g. $XMCBENCH_HOME/runs).")],
    db: Annotated[Optional[Path], typer.Option(help="DuckDB results database (default: $XMCBENCH_HOME/xmcbench.duckdb).")] = None,
) -> None:
    """Index run records (record.json) into the database; rebuilds a lost or damaged database.

    Unchanged runs are skipped; damaged records are reported and the rest ingested. Exits with
    status 1 when any record was bad.
    """
    from xmcbench.store import Store

    with Store.open(db) as store:
        report = store.ingest_dir(directory)
        path = store.path
    for run_dir, reason in report.bad:
        err_console.print(f"[red]bad[/] {escape(f'{run_dir}: {reason}')}", highlight=False, soft_wrap=True)
    console.print(escape(f"{report.summary()} → {path}"), highlight=False)
    if report.bad:
        raise typer.Exit(1)
