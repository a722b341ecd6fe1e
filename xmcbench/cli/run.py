"""``xmcbench run`` and ``xmcbench validate``."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from xmcbench.cli._common import console, err_console, handle_errors, print_rich
from xmcbench.errors import UsageError, XmcbenchError
from xmcbench.run import check_recipe, load_recipe


def print_scores(record: dict) -> None:
    # The run id on a line of its own: as a table title it wrapped mid-id at the table's width.
    console.print(f"run {escape(record['run_id'])}  {escape(str(record['status']))}", highlight=False, soft_wrap=True)
    table = Table()
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% CI", justify="right")
    for s in record["scores"]:
        ci = f"{s['ci_lo']:.2f} – {s['ci_hi']:.2f}" if s.get("ci_lo") is not None else ""
        table.add_row(escape(s["name"]), f"{s['value']:.2f}", ci)
    print_rich(table)


@handle_errors
def run(
    recipe: Annotated[
        str | None,
        typer.Argument(
            help="Recipe YAML file, or a shipped recipe's name such as smoke/tfidf (see `xmcbench recipes list`; not needed with --resume)."
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Override a recipe key: --set training.epochs=3 (repeatable; value parsed as YAML)."
        ),
    ] = None,
    db: Annotated[
        Path | None, typer.Option(help="DuckDB results database (default: $XMCBENCH_HOME/xmcbench.duckdb).")
    ] = None,
    runs_dir: Annotated[
        Path | None, typer.Option(help="Where run directories go (default: $XMCBENCH_HOME/runs).")
    ] = None,
    resume: Annotated[
        str | None, typer.Option(help="Continue an interrupted or failed run (run id or its prefix).")
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id", help="Name of the new run folder (default: time-method-dataset-random; sweeps set it)."
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars; logs only.")] = False,
) -> None:
    """Run a recipe end to end: prepare the dataset, fit, predict top-k, evaluate, record and ingest.

    The run directory (record.json, recipe.yaml, predictions.npz, checkpoints/) is written as the
    run goes; Ctrl-C leaves it 'interrupted' and `--resume RUN_ID` continues from the last phase done.

    Examples:

      xmcbench run smoke/tfidf                      # a shipped recipe by name (about 15 s on a CPU)
      xmcbench run recipes/dexml.yaml --set training.epochs=3
      xmcbench run --resume RUN_ID
    """
    from xmcbench.run import run_recipe
    from xmcbench.run.shipped import resolve_recipe
    from xmcbench.train import destroy_distributed, exit_rank, is_distributed

    if recipe is None and resume is None:
        raise UsageError("give a recipe file (or a shipped recipe's name such as smoke/tfidf), or --resume RUN_ID")
    if recipe is not None and resume is not None:
        raise UsageError("give a recipe file or --resume RUN_ID, not both: a resumed run keeps its recorded recipe")
    if run_id is not None and resume is not None:
        raise UsageError("--run-id names a new run; --resume continues an existing one (give one of them)")
    # The runner checks these places too, but names them by the recipe's keys (output.db), which
    # would send the user to the recipe for what they typed here.
    if db is not None and db.expanduser().is_dir():
        raise XmcbenchError(f"--db {db} is a folder; give the path of a database file (e.g. {db}/xmcbench.duckdb)")
    if runs_dir is not None and runs_dir.expanduser().exists() and not runs_dir.expanduser().is_dir():
        raise XmcbenchError(f"--runs-dir {runs_dir} is a file; give a folder for the run folders")
    recipe = resolve_recipe(recipe) if recipe is not None else None
    loaded = load_recipe(recipe, set_ or []) if recipe is not None else None
    command = "xmcbench " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    try:
        result = run_recipe(
            loaded,
            recipe_path=str(recipe) if recipe else None,
            runs_dir=runs_dir,
            db=db,
            resume=resume,
            progress=not quiet,
            command=command,
            run_id=run_id,
        )
    except KeyboardInterrupt as exc:
        interrupted = getattr(exc, "run_id", None)  # None: stopped before the run folder was made
        if interrupted:
            err_console.print(
                f"[yellow]interrupted[/]: run {escape(interrupted)} is recorded as interrupted; resume it with "
                f"`xmcbench run --resume {escape(interrupted)}`",
                highlight=False,
                soft_wrap=True,
            )
        else:
            err_console.print(
                "[yellow]interrupted[/]: `xmcbench runs list` shows the run if it had begun; "
                "resume it with `xmcbench run --resume RUN_ID`"
            )
        raise typer.Exit(130) from None
    multi_rank = is_distributed()
    destroy_distributed()  # under torchrun: every rank leaves the process group together
    exit_code = 0
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, rank 0 reports
        print_scores(result.record)
        console.print(f"run directory: {escape(str(result.run_dir))}", highlight=False, soft_wrap=True)
        if result.index_error:
            err_console.print(f"[yellow]warning:[/] {escape(result.index_error)}", highlight=False, soft_wrap=True)
            exit_code = 1
    if multi_rank:
        exit_rank(exit_code)  # see exit_rank: a normal exit can abort a finished gloo rank
    if exit_code:
        raise typer.Exit(exit_code)


@handle_errors
def validate(
    recipes: Annotated[
        list[Path], typer.Argument(help="Recipe files, or shipped recipes' names such as smoke/tfidf, to check.")
    ],
    set_: Annotated[list[str] | None, typer.Option("--set", help="Overrides to check as well (a.b=c).")] = None,
) -> None:
    """Check recipes without running them; report every problem at once (file, key, hint).

    A file with neither name nor method is an include fragment (like recipes/base/*.yaml): its
    sections are checked, but not the keys that the recipes including it give.
    """
    from xmcbench.run.check import check_fragment
    from xmcbench.run.shipped import resolve_recipe

    bad = 0
    for given in recipes:
        try:  # a shipped recipe's name (smoke/tfidf) works here as it does for `xmcbench run`
            path = given if given.exists() else resolve_recipe(given)
        except XmcbenchError as exc:
            pattern = any(c in str(given) for c in "*?[")
            hint = " (a pattern that matched no file reaches xmcbench as is)" if pattern else ""
            err_console.print(f"[red]✗[/] {escape(str(exc))}{hint}", highlight=False, soft_wrap=True)
            bad += 1
            continue
        if path.is_dir():
            err_console.print(
                f"[red]✗[/] {escape(str(path))}: a folder; give recipe files (e.g. {escape(str(path))}/*.yaml)",
                highlight=False,
                soft_wrap=True,
            )
            bad += 1
            continue
        # Decided by what the file holds, not by its folder's name: a recipe in a user's base/
        # folder is checked as a recipe.
        problems = check_fragment(path, set_ or [])
        fragment = problems is not None
        if not fragment:
            _, problems = check_recipe(path, set_ or [])
        if problems:
            bad += 1
            for p in problems:
                err_console.print(f"[red]✗[/] {escape(str(p))}", highlight=False, soft_wrap=True)
        elif fragment:
            console.print(
                f"[green]✓[/] {escape(str(path))} [dim](include fragment: no name or method; "
                "the recipes that include it give them)[/]",
                highlight=False,
                soft_wrap=True,
            )
        else:
            console.print(f"[green]✓[/] {escape(str(path))}", highlight=False, soft_wrap=True)
    if bad:
        raise typer.Exit(1)
