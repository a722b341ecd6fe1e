"""``xmcbench smoke``: run the smoke suite, print the table, fail on a missed floor."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from xmcbench.cli._common import console, err_console, handle_errors, print_rich


@handle_errors
def smoke(
    recipes_dir: Annotated[
        Path | None, typer.Option(help="Folder of smoke recipes (default: recipes/smoke of this checkout).")
    ] = None,
    only: Annotated[list[str] | None, typer.Option(help="Run only these recipes (file stem, repeatable).")] = None,
    db: Annotated[Path | None, typer.Option(help="Results database (default: $XMCBENCH_HOME/xmcbench.duckdb).")] = None,
    runs_dir: Annotated[
        Path | None, typer.Option(help="Where run directories go (default: $XMCBENCH_HOME/runs).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    jobs: Annotated[
        int,
        typer.Option(
            help="Recipes at once, each in its own process sharing the cores (1: one after another in this "
            "process), longest first. 2 on a 2-core CPU ran the suite in 592 s from an empty home."
        ),
    ] = 1,
) -> None:
    """Run every smoke recipe (synthetic data, CPU, minutes) and check each one's quality floors."""
    from xmcbench.run.smoke import run_smoke

    if jobs != 1:  # several at once (run_smoke_together rejects fewer than one)
        from xmcbench.cli.sweep import _Display
        from xmcbench.sweep.smoke import run_smoke_together

        with _Display(live=console.is_terminal and not quiet) as display:
            outcomes = run_smoke_together(
                recipes_dir, jobs=jobs, db=db, runs_dir=runs_dir, only=only, on_change=display.update
            )
    else:
        outcomes = run_smoke(recipes_dir, db=db, runs_dir=runs_dir, only=only, progress=not quiet)
    datasets = sorted({o.result.record["task"]["dataset"] for o in outcomes if o.result})
    table = Table(title=escape(f"smoke suite on {', '.join(datasets) or '-'}"))
    for col in ("recipe", "P@1", "P@5", "nDCG@5", "PSP@5", "R@100", "wall s", "floors"):
        table.add_column(col, justify="left" if col in ("recipe", "floors") else "right", no_wrap=True)
    for o in outcomes:
        rec = o.result.record if o.result else None
        scores = o.result.scores if o.result else {}
        wall = sum(rec["compute"].get("wall_time_s", {}).values()) if rec else 0.0
        table.add_row(
            escape(o.recipe.stem),
            *[f"{scores[m]:.2f}" if m in scores else "-" for m in ("P@1", "P@5", "nDCG@5", "PSP@5", "R@100")],
            f"{wall:.0f}",
            "[green]ok[/]" if o.ok else "[red]FAIL[/]",
        )
    print_rich(table)
    failed = [o for o in outcomes if not o.ok]
    for o in failed:
        for f in o.failures:
            err_console.print(f"[red]✗[/] {escape(f'{o.recipe.name}: {f}')}", highlight=False)
    if failed:
        raise typer.Exit(1)
    console.print(f"[green]all {len(outcomes)} smoke recipes met their floors[/]")
