"""``xmcbench datasets``: list, download, prepare, inspect, verify and synthesise XMC datasets.

Thin commands over ``xmcbench.data``: the catalogue (``list_specs``/``get_spec``), the downloader
(``download_dataset``/``verify_dataset``) and ``load_dataset``, which alone decides how a dataset
gets ready (synthesise, download, prepare). Raw files and caches live under $XMCBENCH_HOME/datasets/.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from xmcbench import paths
from xmcbench.cli._common import (
    FormatHelp,
    check_format,
    console,
    emit_rows,
    err_console,
    handle_errors,
    print_rich,
    strict_json,
)
from xmcbench.errors import XmcbenchError

app = typer.Typer(
    help="Find, download, verify and inspect XMC datasets (raw files and prepared caches under $XMCBENCH_HOME).",
    no_args_is_help=True,
    rich_markup_mode="rich",
)


NameArg = Annotated[str, typer.Argument(help="Dataset name, case-insensitive (see `xmcbench datasets list`).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]


def _count(value: int | None) -> str:
    return f"{value:,}" if value is not None else "-"


@app.command("list")
@handle_errors
def list_datasets(
    format: Annotated[str, typer.Option("--format", "-f", help=FormatHelp)] = "rich",
) -> None:
    """Every known dataset: sizes (paper / here), query text, propensity A/B, and what is on this machine."""
    from xmcbench.data import dataset_status, list_specs, load_prepared

    check_format(format)
    if format != "rich":
        rows = []
        for spec in list_specs():
            state = dataset_status(spec)
            here = load_prepared(paths.dataset_prepared_dir(spec.name)).meta["counts"] if state == "prepared" else {}
            rows.append(
                {
                    "name": spec.name,
                    "synthetic": bool(spec.synthetic),
                    **{split: spec.paper_counts.get(split) for split in ("train", "test", "labels")},
                    **{f"{split}_here": here.get(split) for split in ("train", "test", "labels")},
                    "query_text": spec.query_text,
                    "propensity_a": spec.propensity_a,
                    "propensity_b": spec.propensity_b,
                    "status": state,
                }
            )
        emit_rows(rows, format)
        return

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("dataset", no_wrap=True)
    for column in ("train", "test", "labels"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("query text")
    table.add_column("A/B", no_wrap=True)
    table.add_column("here", no_wrap=True)
    for spec in list_specs():
        here: dict[str, int] = {}
        state = dataset_status(spec)
        if state == "prepared":
            here = load_prepared(paths.dataset_prepared_dir(spec.name)).meta["counts"]
        status = {
            "prepared": "[green]prepared[/]",
            "complete": "[yellow]raw[/]",
            "partial": "[red]partial raw[/]",
            "missing": "[dim]missing[/]",
        }[state]
        cells = []
        for split in ("train", "test", "labels"):
            paper = spec.paper_counts.get(split)
            cell = _count(paper)
            if split in here and here[split] != paper:  # show what the files really hold
                cell = f"{here[split]:,}" + (f" [dim](paper {paper:,})[/]" if paper is not None else "")
            cells.append(cell)
        name = escape(spec.name) + (" [dim](synthetic)[/]" if spec.synthetic else "")
        table.add_row(name, *cells, escape(spec.query_text), f"{spec.propensity_a:g}/{spec.propensity_b:g}", status)
    print_rich(table)
    console.print(f"[dim]data folder: {escape(str(paths.datasets_dir()))}[/]", highlight=False, soft_wrap=True)


@app.command("download")
@handle_errors
def download(
    name: NameArg,
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            "-s",
            metavar="URL|DIR|hf://ORG/REPO",
            help="Fetch from here instead of the registry's default: an http(s) URL (archive or file), a local "
            "directory or archive, hf://ORG/REPO or hf://ORG/REPO/SUBDIR (a Hugging Face dataset repo) or gdrive:ID.",
        ),
    ] = None,
    no_prepare: Annotated[
        bool, typer.Option("--no-prepare", help="Only download the raw files; do not build the prepared cache.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Download again even when the raw files are here and verified (e.g. from another --source); "
            "files that differ from the recorded checksums are still refused.",
        ),
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """Download a dataset's raw files (resumable, checksummed), then prepare the cache.

    Re-running after an interruption resumes; running it for a dataset already here only verifies it
    (--force downloads it again).
    """
    from xmcbench.data import download_dataset, load_dataset

    try:
        raw_dir = download_dataset(name, source=source, progress=not quiet, force=force)
    except KeyboardInterrupt:
        err_console.print(
            "[yellow]interrupted[/]: run the same command again to resume the download",
            highlight=False,
        )
        raise typer.Exit(130) from None
    console.print(f"raw files: {raw_dir}", highlight=False, markup=False, soft_wrap=True)
    if not no_prepare:
        try:
            ds = load_dataset(name, progress=not quiet)
        except KeyboardInterrupt:
            err_console.print(
                "[yellow]interrupted[/] while preparing: the raw files are downloaded; run the same command again "
                f"(or `xmcbench datasets prepare {escape(name)}`) to prepare them",
                highlight=False,
            )
            raise typer.Exit(130) from None
        console.print(
            f"prepared:  {ds.path}  ({_count(ds.n_queries('train'))} train, "
            f"{_count(ds.n_queries('test'))} test, {_count(ds.n_labels)} labels)",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


@app.command("prepare")
@handle_errors
def prepare(
    name: NameArg,
    force: Annotated[bool, typer.Option("--force", help="Rebuild the cache even when it is up to date.")] = False,
    quiet: QuietOpt = False,
) -> None:
    """Build (or rebuild) the prepared cache from raw files already downloaded."""
    from xmcbench.data import dataset_status, get_spec, load_dataset

    spec = get_spec(name)
    if not force and dataset_status(spec) == "prepared":
        console.print(
            f"{spec.name}: prepared cache is up to date in {paths.dataset_prepared_dir(spec.name)}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        return
    ds = load_dataset(spec.name, rebuild=force, progress=not quiet)  # never downloads
    console.print(f"prepared: {ds.path}", highlight=False, markup=False, soft_wrap=True)


@app.command("info")
@handle_errors
def info(
    name: NameArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the statistics as JSON.")] = False,
    quiet: QuietOpt = False,
) -> None:
    """Statistics of a prepared dataset: queries, labels, labels per query, queries per label,
    head/torso/tail label counts, rows without any label."""
    from xmcbench.data import load_dataset
    from xmcbench.data.stats import stats_rows

    ds = load_dataset(name, progress=not quiet)  # prepares from raw files when needed; never downloads
    unlabelled = {split: int(ds.stats[split]["empty_rows"]) for split in ("train", "test")}
    if as_json:  # stdout holds nothing but the JSON (progress and messages go to stderr)
        typer.echo(
            strict_json(
                {"name": ds.name, "counts": ds.meta["counts"], "rows_without_labels": unlabelled, "stats": ds.stats},
                indent=2,
            )
        )
        return
    paper = ds.spec.paper_counts
    console.print(
        f"[bold]{escape(ds.name)}[/]  query text: {escape(ds.query_text)}  ·  propensity A/B: {ds.propensity_a:g} / "
        f"{ds.propensity_b:g}  ·  version {ds.version}",
        highlight=False,
        soft_wrap=True,  # the version id stays on its line, whole, to be copied back
    )
    console.print(f"[dim]{escape(str(ds.path))}[/]", highlight=False, soft_wrap=True)
    console.print(
        f"rows without any label: {unlabelled['test']:,} of {ds.n_queries('test'):,} test, "
        f"{unlabelled['train']:,} of {ds.n_queries('train'):,} train",
        highlight=False,
    )
    table = Table(show_header=True)
    table.add_column("statistic")
    table.add_column("value", justify="right")
    table.add_column("paper", justify="right", style="dim")
    paper_of = {"labels": paper.get("labels"), "train queries": paper.get("train"), "test queries": paper.get("test")}
    for stat, value in stats_rows(ds.stats):
        table.add_row(stat, value, _count(paper_of[stat]) if stat in paper_of else "")
    print_rich(table)


@app.command("verify")
@handle_errors
def verify(name: NameArg) -> None:
    """Recompute the sha256 of every raw file and compare with the manifest written at download.

    Exits with status 1 when a file is missing or changed.
    """
    from xmcbench.data.raw import MANIFEST_NAME, verify_dataset

    report = verify_dataset(name)
    if not report.manifest_found:
        raise XmcbenchError(
            f"{report.dataset}: no {MANIFEST_NAME} in {report.raw_dir}; run `xmcbench datasets download {report.dataset}`"
        )
    table = Table(show_header=True)
    table.add_column("file")
    table.add_column("status")
    table.add_column("detail", style="dim")
    colour = {"ok": "green", "missing": "red", "changed": "red", "unrecorded": "yellow"}
    for check in report.files:
        table.add_row(escape(check.name), f"[{colour[check.status]}]{check.status}[/]", escape(check.detail))
    print_rich(table)
    if not report.ok:
        raise XmcbenchError(
            f"{report.dataset}: {'; '.join(report.problems())}; run `xmcbench datasets download {report.dataset}` "
            "to fetch the files again"
        )
    console.print(
        f"{report.dataset}: all {len(report.files)} raw files match {MANIFEST_NAME}", highlight=False, markup=False
    )


@app.command("synth")
@handle_errors
def synth(
    name: Annotated[str, typer.Argument(help="Name for the new dataset (letters, digits, '.', '_', '-').")],
    labels: Annotated[int, typer.Option("--labels", min=2, help="Number of labels.")],
    train: Annotated[int, typer.Option("--train", min=1, help="Number of training queries.")],
    test: Annotated[int, typer.Option("--test", min=1, help="Number of test queries.")],
    seed: Annotated[int, typer.Option("--seed", help="Random seed (the same seed gives the same files).")] = 0,
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace an existing synthetic dataset of that name made with other parameters."),
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """Generate a synthetic dataset in the exact LF raw format (Zipfian labels, label texts, filter
    files), register it locally, prepare it and print its statistics."""
    from xmcbench.data import load_dataset
    from xmcbench.data.stats import stats_rows

    ds = load_dataset(
        name, synthetic={"labels": labels, "train": train, "test": test, "seed": seed}, force=force, progress=not quiet
    )
    raw_dir = paths.dataset_raw_dir(ds.spec.raw_group)
    console.print(
        f"synthetic dataset {ds.name}: raw files in {raw_dir}, prepared in {ds.path}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    table = Table(show_header=False)
    for stat, value in stats_rows(ds.stats):
        table.add_row(stat, value)
    print_rich(table)
