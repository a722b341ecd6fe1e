"""``xmcbench compare RUN_A RUN_B``: is run A really better than run B on the same queries?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

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
from xmcbench.recipe.schema import MIN_BOOTSTRAP


@handle_errors
def compare(
    run_a: Annotated[str, typer.Argument(help="First run (id or unique prefix).")],
    run_b: Annotated[str, typer.Argument(help="Second run (id or unique prefix).")],
    db: Annotated[
        Path | None, typer.Option(help="DuckDB results database (default: $XMCBENCH_HOME/xmcbench.duckdb).")
    ] = None,
    n_boot: Annotated[
        int,
        typer.Option(
            "--n-boot", min=MIN_BOOTSTRAP, max=100_000, help=f"Bootstrap replicates (at least {MIN_BOOTSTRAP})."
        ),
    ] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap resampling.")] = 0,
    format: Annotated[str, typer.Option("--format", "-f", help=FormatHelp)] = "rich",
) -> None:
    """Paired bootstrap of A − B per metric over the same test queries, with 95% intervals.

    Recomputes every metric both runs report from their saved predictions; a difference whose
    interval excludes 0 is marked with *. Refuses runs on different datasets, splits, dataset
    versions, propensity settings or filter files.
    """
    from xmcbench.report.compare import compare_runs
    from xmcbench.store import Store

    check_format(format)
    with Store.open(db, read_only=True) as store:
        result = compare_runs(store, run_a, run_b, n_boot=n_boot, seed=seed)
    if result.one_sided:
        err_console.print(
            f"[yellow]note:[/] not compared, reported by one run only: {escape(', '.join(result.one_sided))}",
            highlight=False,
            soft_wrap=True,
        )
    rows = [
        {
            "metric": r.name,
            "a": r.value_a,
            "b": r.value_b,
            "diff": r.diff,
            "lo": r.lo,
            "hi": r.hi,
            "significant": bool(r.significant),
        }
        for r in result.rows
    ]
    if format == "json":
        typer.echo(
            strict_json(
                {
                    "run_a": result.run_a,
                    "run_b": result.run_b,
                    "dataset": result.dataset,
                    "split": result.split,
                    "n_queries": result.n_queries,
                    "n_boot": result.n_boot,
                    "rows": rows,
                },
                indent=2,
                ensure_ascii=False,
            )
        )
        return
    if format != "rich":
        emit_rows(rows, format)
        return
    table = Table(
        title=f"A − B on {escape(result.dataset)} {escape(str(result.split))} ({result.n_queries:,} queries, {result.n_boot:,} paired resamples)",
        caption="* the 95% interval excludes 0",
    )
    for header in ("metric", "A", "B", "A − B", "95% interval", ""):
        table.add_column(header, justify="left" if header == "metric" else "right")
    for row in result.rows:
        colour = "green" if row.diff > 0 else "red"
        mark = f"[bold {colour}]*[/]" if row.significant else ""
        diff = f"[{colour}]{row.diff:+.2f}[/]" if row.significant else f"{row.diff:+.2f}"
        table.add_row(
            escape(row.name), f"{row.value_a:.2f}", f"{row.value_b:.2f}", diff, f"[{row.lo:+.2f}, {row.hi:+.2f}]", mark
        )
    console.print(f"A = {escape(result.run_a)}\nB = {escape(result.run_b)}", highlight=False, soft_wrap=True)
    print_rich(table)
