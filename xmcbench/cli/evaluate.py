"""``xmcbench evaluate``: score a predictions file against ground truth (P, nDCG, PSP, PSnDCG, R @k).

A thin layer over :func:`xmcbench.metrics.evaluate`: it loads the files (sparse text or .npz CSR;
filter files in the "doc_index label_index" pair format), or a prepared dataset's test labels,
filter pairs, training labels and propensity A/B with ``--dataset``, and prints the scores.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from xmcbench.cli._common import handle_errors, parse_int_list, print_rich, strict_json
from xmcbench.errors import UsageError, XmcbenchError
from xmcbench.recipe.schema import MIN_BOOTSTRAP

DEFAULT_A, DEFAULT_B = 0.55, 1.5  # Jain et al.'s defaults, used with --train-truth when --A/--B are not given
MAX_BOOT = 100_000  # time grows with replicates x queries: beyond this nothing changes but the wait


class Format(str, Enum):
    rich = "rich"
    json = "json"
    markdown = "markdown"
    csv = "csv"


@handle_errors
def evaluate(
    predictions: Annotated[
        Path,
        typer.Option(
            "--predictions",
            "-p",
            help="Predicted scores, (queries x labels): sparse text (XC format, may be .gz) or "
            ".npz (scipy.sparse.save_npz). Every stored entry is a prediction.",
        ),
    ],
    truth: Annotated[
        Path | None,
        typer.Option(
            "--truth", "-t", help="Ground truth (queries x labels), sparse text or .npz; stored non-zeros are relevant."
        ),
    ] = None,
    train_truth: Annotated[
        Path | None,
        typer.Option(
            "--train-truth",
            help="Training labels, for the inverse propensities of PSP/PSnDCG (A/B default "
            f"{DEFAULT_A}/{DEFAULT_B} unless --A/--B are given).",
        ),
    ] = None,
    a: Annotated[
        float | None, typer.Option("--A", help="Propensity A (0.55 generic, 0.6 Amazon, 0.5 Wikipedia-500K).")
    ] = None,
    b: Annotated[
        float | None, typer.Option("--B", help="Propensity B (1.5 generic, 2.6 Amazon, 0.4 Wikipedia-500K).")
    ] = None,
    filter: Annotated[
        Path | None,
        typer.Option(
            "--filter", help="Filter file: 'doc_index label_index' pairs removed from the predictions before top-k."
        ),
    ] = None,
    k: Annotated[str, typer.Option("--k", help="Cut-offs, comma-separated.")] = "1,3,5",
    fmt: Annotated[
        Format,
        typer.Option(
            "--format",
            "-f",
            help="rich: a table with two decimals; json: one JSON object metric -> value (4 decimals; "
            "\\[value, lo, hi] with --ci); markdown: a table; csv: metric,value(,lo,hi) rows.",
        ),
    ] = Format.rich,
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="Use this prepared dataset's test labels, filter pairs, training labels and propensity A/B "
            "instead of --truth/--train-truth/--filter.",
        ),
    ] = None,
    ci: Annotated[bool, typer.Option("--ci", help="Add 95% bootstrap intervals over queries.")] = False,
    n_boot: Annotated[
        int,
        typer.Option(
            "--n-boot",
            min=MIN_BOOTSTRAP,
            max=MAX_BOOT,
            help=f"Bootstrap replicates for --ci (at least {MIN_BOOTSTRAP}: a 95% interval's bounds are its "
            "most extreme 2.5%).",
        ),
    ] = 1000,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the bootstrap for --ci.")] = 0,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            min=1,
            help="Rows ranked in this many blocks at once (default: OMP_NUM_THREADS, else the CPUs this "
            "process may use). The scores are the same bit for bit whatever the number.",
        ),
    ] = None,
) -> None:
    """Score predictions against ground truth: P@k, nDCG@k, R@k, and PSP@k / PSnDCG@k when training
    labels (or --dataset) give inverse propensities. Values are percentages.

    Ties in scores go to the lower label index; filter pairs are removed from the predictions
    before top-k; rows with fewer than k predictions count the missing slots as misses.
    """
    from xmcbench.data.formats.xc_sparse import read_filter_file
    from xmcbench.metrics import evaluate as evaluate_scores
    from xmcbench.metrics import evaluate_with_ci, inv_propensity
    from xmcbench.metrics.validate import check_number

    ks = parse_int_list(k, "k")
    a = None if a is None else check_number(a, "--A")
    b = None if b is None else check_number(b, "--B")
    pred = _load(predictions, scores=True)
    title = predictions.name
    if dataset is not None:
        given = [
            name for name, value in (("--truth", truth), ("--train-truth", train_truth), ("--filter", filter)) if value
        ]
        if given:
            raise UsageError(f"--dataset replaces {', '.join(given)}; give one or the other")
        from xmcbench.data import load_dataset

        ds = load_dataset(dataset, progress=False)
        true_labels, filter_pairs, train_labels = ds.labels("test"), ds.filter("test"), ds.labels("train")
        a = ds.propensity_a if a is None else a
        b = ds.propensity_b if b is None else b
        title = f"{predictions.name} on {ds.name} test"
    else:
        if truth is None:
            raise UsageError("give the ground truth with --truth FILE, or a prepared dataset with --dataset NAME")
        true_labels = _load(truth)
        filter_pairs = None if filter is None else read_filter_file(filter, shape=true_labels.shape)
        if train_truth is None and (a is not None or b is not None):
            raise XmcbenchError("--A/--B need training labels (--train-truth FILE) to compute propensities")
        train_labels = None if train_truth is None else _load(train_truth)
        a = DEFAULT_A if a is None else a
        b = DEFAULT_B if b is None else b
    if pred.shape != true_labels.shape:
        raise XmcbenchError(
            f"{predictions} has shape {pred.shape} but the ground truth has shape {true_labels.shape}; "
            "predictions need one row per test query and one column per label"
        )
    if true_labels.shape[0] == 0:
        raise XmcbenchError(f"{predictions} and the ground truth have no rows; there are no queries to evaluate")
    weights = None
    if train_labels is not None:
        if train_labels.shape[1] != true_labels.shape[1]:
            raise XmcbenchError(
                f"training labels have {train_labels.shape[1]} columns but the ground truth has "
                f"{true_labels.shape[1]}; both must use the same label set"
            )
        weights = inv_propensity(train_labels, a, b)

    try:
        if ci:
            scores = evaluate_with_ci(
                pred, true_labels, ks, weights, filter_pairs, n_boot=n_boot, seed=seed, threads=threads
            )
        else:
            scores = evaluate_scores(pred, true_labels, ks, weights, filter_pairs, threads=threads)
            scores = {n: (v,) for n, v in scores.items()}
    except MemoryError:
        raise XmcbenchError(
            f"out of memory evaluating {true_labels.shape[0]:,} queries x {true_labels.shape[1]:,} labels; "
            "check the files' shapes (headers) or use a machine with more memory"
        ) from None

    if fmt == Format.json:
        values = {n: round(v[0], 4) if len(v) == 1 else [round(x, 4) for x in v] for n, v in scores.items()}
        typer.echo(strict_json(values))
        return
    if fmt == Format.csv:
        header = "metric,value" + (",ci_lo,ci_hi" if any(len(v) > 1 for v in scores.values()) else "")
        typer.echo(header)
        for name, v in scores.items():
            typer.echo(",".join([name, *(f"{x:.4f}" for x in v)]))
        return
    note = f"{true_labels.shape[0]:,} queries, {true_labels.shape[1]:,} labels"
    if weights is not None:
        note += f", propensity A={a:g} B={b:g}"
    if filter_pairs is not None:
        note += f", {filter_pairs.nnz:,} filter pairs"
    families, cells = _grid(scores, ks)
    if fmt == Format.markdown:
        typer.echo(f"**{title}** ({note})\n")
        typer.echo("| metric | " + " | ".join(f"@{x}" for x in ks) + " |")
        typer.echo("|---|" + "---:|" * len(ks))
        for family in families:
            typer.echo(f"| {family} | " + " | ".join(cells[family]) + " |")
        return
    table = Table(title=escape(f"{title} ({note})"), box=box.SIMPLE_HEAD)
    table.add_column("metric")
    for x in ks:
        table.add_column(f"@{x}", justify="right")
    for family in families:
        table.add_row(family, *cells[family])
    print_rich(table)


def _load(path: Path, scores: bool = False):
    """A sparse file, checked like an in-memory matrix; errors name the file. Scores may be ±inf, labels not."""
    from xmcbench.data.formats.xc_sparse import load_sparse
    from xmcbench.metrics.ranking import as_predictions
    from xmcbench.metrics.validate import check_sparse

    if path.is_dir():  # the readers would blame the format; the mistake is the path
        raise XmcbenchError(f"{path} is a directory; give the matrix file (.npz or sparse text) inside it")
    try:
        matrix = load_sparse(path)
        # as_predictions also rejects a label scored twice in a row; labels may repeat (they are binarised).
        return as_predictions(matrix, name=str(path)) if scores else check_sparse(matrix, path)
    except MemoryError:
        raise XmcbenchError(
            f"{path}: too large to load into memory; check the header's row and column counts"
        ) from None


def _grid(scores: dict[str, tuple[float, ...]], ks: tuple[int, ...]) -> tuple[list[str], dict[str, list[str]]]:
    """Families in order, and per family one cell per k: "43.21" or "43.21 [42.80, 43.62]"."""
    families: list[str] = []
    for name in scores:
        family = name.split("@")[0]
        if family not in families:
            families.append(family)

    def cell(value: tuple[float, ...] | None) -> str:
        if value is None:
            return ""
        return f"{value[0]:.2f}" if len(value) == 1 else f"{value[0]:.2f} [{value[1]:.2f}, {value[2]:.2f}]"

    return families, {f: [cell(scores.get(f"{f}@{x}")) for x in ks] for f in families}
