"""``xmcbench table``: reproduced runs next to published results for one dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from xmcbench.cli._common import console, err_console, handle_errors
from xmcbench.errors import XmcbenchError


def canonical_dataset(name: str) -> str:
    """The registry's spelling of a dataset name (case-insensitive); the name as given if unknown."""
    from xmcbench.data.catalog import get_spec

    try:
        return get_spec(name).name
    except XmcbenchError:
        return name  # e.g. runs of a dataset spec that is not registered on this machine


def parse_propensity(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        a, b = (float(part) for part in text.split(","))
    except ValueError:
        raise XmcbenchError(f"--propensity expects A,B like 0.6,2.6; got {text!r}") from None
    return a, b


@handle_errors
def table(
    dataset: Annotated[str, typer.Option("--dataset", "-d", help="Dataset name (case-insensitive), e.g. LF-AmazonTitles-131K.")],
    metrics: Annotated[Optional[str], typer.Option(help="Comma-separated metric columns, e.g. P@1,P@5,PSP@5 (default: P@1,P@3,P@5,PSP@1,PSP@3,PSP@5, those present). The first one picks each method's best run.")] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="rich (terminal), markdown, csv, json or html.")] = "rich",
    all_runs: Annotated[bool, typer.Option("--all-runs", help="Every finished run, not only the best one per method.")] = False,
    latest: Annotated[bool, typer.Option("--latest", help="Each method's newest finished run instead of its best.")] = False,
    split: Annotated[Optional[str], typer.Option(help="Only runs evaluated on this split.")] = None,
    dataset_version: Annotated[Optional[str], typer.Option(help="Only runs on this dataset version (a prefix is enough); needed when runs span several.")] = None,
    propensity: Annotated[Optional[str], typer.Option(help="Only runs scored with these propensity parameters, as A,B (e.g. 0.6,2.6).")] = None,
    db: Annotated[Optional[Path], typer.Option(help="DuckDB results database (default: $XMCBENCH_HOME/xmcbench.duckdb).")] = None,
    results: Annotated[Optional[str], typer.Option("--results", help="Also show the runs shared in a Hub dataset repo, hf://datasets/ORG/NAME[@REV] (de-duplicated by run id).")] = None,
) -> None:
    """Show reproduced runs next to the papers' published numbers, with Δ and the best value per metric.

    Runs on different dataset versions or propensity settings are never mixed in one table: if a
    dataset's runs span several, the command lists them and asks for --dataset-version / --propensity.
    """
    from xmcbench.report import build_table, render, to_rich

    # reading only: no database, lock file or migration is made. Published numbers need no
    # database, so with none at the default place they are shown alone; a --db given that is not
    # there is a mistake to report.
    with _open_store(db, results) as store:
        if not store.exists:
            err_console.print(
                f"[yellow]note:[/] no results database at {escape(str(store.path))} yet: published results only "
                f"(run a recipe or `xmcbench ingest DIR` to add yours)",
                highlight=False, soft_wrap=True,
            )
        note = store.schema_note()
        if note:
            err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
        result = build_table(
            store,
            canonical_dataset(dataset),
            metrics=[m for m in metrics.replace(" ", "").split(",") if m] if metrics else None,
            all_runs=all_runs,
            pick="latest" if latest else "best",
            split=split,
            dataset_version=dataset_version,
            propensity=parse_propensity(propensity),
        )
    if store.reference_problem:
        err_console.print(f"[yellow]warning:[/] published results not shown: {store.reference_problem}", highlight=False, soft_wrap=True)
    if format == "rich":
        console.print(to_rich(result))
    else:
        typer.echo(render(result, format), nl=False)


def _open_store(db: Path | None, results: str | None):
    """The local database, or (with --results) a temporary one that adds the shared runs."""
    from xmcbench.store import Store

    if results is None:
        return Store.open(db, read_only=True, missing_ok=db is None)
    from xmcbench.hub import fetch_results, merged_store

    return merged_store(db, fetch_results(results))
