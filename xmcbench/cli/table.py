"""``xmcbench table``: reproduced runs next to published results for one dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from xmcbench.cli._common import err_console, handle_errors, heal_finished_runs
from xmcbench.errors import UsageError, XmcbenchError


def canonical_dataset(name: str) -> str:
    """The registry's spelling of a dataset name (case-insensitive); the name as given if unknown."""
    from xmcbench.data.catalog import get_spec

    try:
        return get_spec(name).name
    except XmcbenchError:
        return name  # e.g. runs of a dataset spec that is not registered on this machine


def parse_metrics(text: str | None) -> list[str] | None:
    """'p@1, PSP@5' -> ['P@1', 'PSP@5'] (families matched case-insensitively); None for none given."""
    from xmcbench.metrics.names import FAMILIES, is_metric_name

    by_lower = {family.lower(): family for family in FAMILIES}
    names, bad = [], []
    for given in (part for part in (text or "").replace(" ", "").split(",") if part):
        family, _, k = given.partition("@")
        name = f"{by_lower.get(family.lower(), family)}@{k}"
        (names if is_metric_name(name) else bad).append(name if is_metric_name(name) else given)
    if bad:
        raise XmcbenchError(
            f"--metrics: {', '.join(map(repr, bad))} is not a metric name; give FAMILY@k with FAMILY one of "
            f"{', '.join(FAMILIES)}, e.g. P@1,nDCG@5,PSP@3"
        )
    return names or None


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
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            "-d",
            help="Dataset name (case-insensitive), e.g. LF-AmazonTitles-131K. Without it: an overview of every dataset (best P@1 per method).",
        ),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated metric columns, e.g. P@1,P@5,PSP@5 (default: P@1,P@3,P@5,PSP@1,PSP@3,PSP@5, those present). The first one picks each method's best run."
        ),
    ] = None,
    format: Annotated[
        str, typer.Option("--format", "-f", help="rich (terminal), markdown, csv, json or html.")
    ] = "rich",
    all_runs: Annotated[
        bool, typer.Option("--all-runs", help="Every finished run, not only the best one per method.")
    ] = False,
    latest: Annotated[
        bool, typer.Option("--latest", help="Each method's newest finished run instead of its best.")
    ] = False,
    split: Annotated[str | None, typer.Option(help="Only runs evaluated on this split.")] = None,
    dataset_version: Annotated[
        str | None,
        typer.Option(help="Only runs on this dataset version (a prefix is enough); needed when runs span several."),
    ] = None,
    propensity: Annotated[
        str | None, typer.Option(help="Only runs scored with these propensity parameters, as A,B (e.g. 0.6,2.6).")
    ] = None,
    setting: Annotated[
        str | None,
        typer.Option("--setting", "-s", help="Only this setting: full, few-shot (or few-shot-1%), zero-shot."),
    ] = None,
    paper: Annotated[
        str | None,
        typer.Option("--paper", help="Only published rows of this paper: prime, unidec, dexml, maclr, lmtx."),
    ] = None,
    method: Annotated[
        str | None,
        typer.Option(
            "--method",
            "-m",
            help="Only this method (case-insensitive; published rows match the method or the printed name).",
        ),
    ] = None,
    all_published: Annotated[
        bool,
        typer.Option(
            "--all-published",
            help="Every published row (ablations, variants, duplicates across papers), in the papers' order.",
        ),
    ] = False,
    sweep: Annotated[
        str | None,
        typer.Option(
            "--sweep",
            help="Exactly the finished runs of sweep SWEEP_ID ('latest': the last one), each named by its place in it.",
        ),
    ] = None,
    db: Annotated[
        Path | None, typer.Option(help="DuckDB results database (default: $XMCBENCH_HOME/xmcbench.duckdb).")
    ] = None,
    results: Annotated[
        str | None,
        typer.Option(
            "--results",
            help="Also show the runs shared in a Hub dataset repo, hf://datasets/ORG/NAME (add @REV for a revision; "
            "de-duplicated by run id).",
        ),
    ] = None,
) -> None:
    """Show reproduced runs next to the papers' published numbers, with Δ and the best value per metric.

    By default a curated table: each paper's main-table rows, one per method and setting, in
    sections per setting sorted by the first metric, each reproduced run beside the published row
    it is compared with (Δ and its 95% interval). Without --dataset: every dataset at once, best
    P@1 per method. In a terminal the table fits its width (metric columns are dropped from the
    right, and named, before names are squeezed); piped, it is printed in full as plain text.

    Runs on different dataset versions or propensity settings are never mixed in one table: if a
    dataset's runs span several, the command lists them and asks for --dataset-version / --propensity.

    Examples:

      xmcbench table                                  # every dataset: best P@1 per method
      xmcbench table -d LF-AmazonTitles-131K -f markdown
      xmcbench table --sweep latest                   # the runs of the last sweep
    """
    from xmcbench.report import FORMATS, build_overview, build_table

    if format not in FORMATS:
        raise XmcbenchError(f"unknown table format {format!r}; choose one of {', '.join(FORMATS)}")
    if paper is not None and paper.lower() not in ("prime", "unidec", "dexml", "maclr", "lmtx"):
        raise XmcbenchError(f"unknown --paper {paper!r}; choose one of prime, unidec, dexml, maclr, lmtx")
    if setting is not None and not _known_setting(setting):
        raise XmcbenchError(
            f"unknown --setting {setting!r}; choose full, few-shot (or one fraction, e.g. few-shot-1%) or zero-shot"
        )
    if latest and all_runs:
        raise UsageError("--latest picks one run per method and --all-runs shows every run; give one of them")
    if sweep is not None and (latest or all_runs):
        raise XmcbenchError("--sweep shows every finished run of the sweep; drop --latest / --all-runs")
    metric_names = parse_metrics(metrics)

    # reading only: no database, lock file or migration is made. Published numbers need no
    # database, so with none at the default place they are shown alone; a --db given that is not
    # there is a mistake to report.
    with _open_store(db, results) as store:
        if not store.exists:
            err_console.print(
                f"[yellow]note:[/] no results database at {escape(str(store.path))} yet: published results only "
                f"(run a recipe or `xmcbench ingest DIR` to add yours)",
                highlight=False,
                soft_wrap=True,
            )
        note = store.schema_note()
        if note:
            err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
        if store.exists and results is None:  # a run killed between its record and its index counts
            heal_finished_runs(store, store.runs())  # reads only unfinished runs' records
        filters = dict(
            metrics=metric_names,
            split=split,
            dataset_version=dataset_version,
            propensity=parse_propensity(propensity),
            curated=not all_published,
            setting=setting,
            paper=paper,
            method=method,
        )
        if sweep is not None:
            labels = _sweep_labels(store, sweep)
            names = sorted({r["dataset"] for r in store.runs(status="finished") if r["run_id"] in labels})
            if dataset is not None:
                names = [n for n in names if n.lower() == canonical_dataset(dataset).lower()]
            if not names:
                raise XmcbenchError(
                    f"sweep {sweep} has no finished runs in {store.path}"
                    + (f" on {dataset}" if dataset else "")
                    + f"; see `xmcbench sweep --status {sweep}`"
                )
            results = [build_table(store, name, runs_only=labels, **filters) for name in names]
        elif dataset is None:
            results = [
                build_overview(
                    store,
                    metric=(metric_names or ["P@1"])[0],
                    setting=setting,
                    paper=paper,
                    method=method,
                    curated=not all_published,
                )
            ]
        else:
            pick = "latest" if latest else "best"
            results = [build_table(store, canonical_dataset(dataset), all_runs=all_runs, pick=pick, **filters)]
    if store.reference_problem:
        err_console.print(
            f"[yellow]warning:[/] published results not shown: {store.reference_problem}",
            highlight=False,
            soft_wrap=True,
        )
    for result in results:
        if format in ("json", "csv"):  # those carry no notes: say it where a person running the script sees it
            for warning in result.warnings:
                err_console.print(f"[yellow]note:[/] {escape(warning)}", highlight=False, soft_wrap=True)
        print_table(result, format)


def print_table(result, format: str) -> None:
    """rich: fitted to the terminal's width, or the whole table as plain text when stdout is not a terminal."""
    from rich.console import Console

    from xmcbench.report import render, to_rich, to_text

    if format != "rich":
        typer.echo(render(result, format), nl=False)
        return
    out = Console()
    if out.is_terminal:
        out.print(to_rich(result, width=out.width))
    else:
        typer.echo(to_text(result, width=None), nl=False)


def _known_setting(setting: str) -> bool:
    """A setting, or the start of one, that some row can have (the table matches settings by prefix)."""
    from xmcbench.report.table import SECTIONS

    wanted = setting.lower().replace("_", "-")
    return bool(wanted) and any(s.startswith(wanted) or wanted.startswith(s) for s in SECTIONS)


def _sweep_labels(store, sweep_id: str) -> dict[str, str]:
    """run id -> run key of a sweep: from the database's sweeps table, else from the sweep record."""
    from xmcbench.sweep import SweepRecord
    from xmcbench.sweep.record import resolve_sweep_id

    sweep_id = resolve_sweep_id(sweep_id)
    rows = store.sweep_runs(sweep_id)
    if rows:
        return {r["run_id"]: r["run_key"] for r in rows}

    record = SweepRecord.load(sweep_id)  # says which sweeps exist when there is no such sweep
    return {e["run_id"]: e["key"] for e in record.entries if e.get("run_id")}


def _open_store(db: Path | None, results: str | None):
    """The local database, or (with --results) a temporary one that adds the shared runs."""
    from xmcbench.store import Store

    if results is None:
        return Store.open(db, read_only=True, missing_ok=db is None)
    from xmcbench.hub import fetch_results, merged_store

    return merged_store(db, fetch_results(results))
