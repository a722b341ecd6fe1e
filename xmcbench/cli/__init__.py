"""The ``xmcbench`` command line: a thin Typer layer over the library.

One module per command group; each exposes either a ``typer.Typer`` named ``app`` (a group)
or a command function. Heavy imports (torch, transformers) happen inside commands so that
``xmcbench --help`` stays fast.
"""

from __future__ import annotations

import logging
import sys

import typer

from xmcbench import __version__
from xmcbench.cli import compare, datasets, evaluate, ingest, judge, run, runs, smoke, table

app = typer.Typer(
    name="xmcbench",
    help="Benchmarks and leaderboards for extreme multi-label classification (XMC).",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"xmcbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Benchmarks and leaderboards for extreme multi-label classification (XMC).

    Data, runs and the results database live under $XMCBENCH_HOME (default: ~/.cache/xmcbench).
    """
    # Library warnings (a busy database, a lost heartbeat) go to stderr, one line each.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s", stream=sys.stderr)


app.command("run")(run.run)
app.command("validate")(run.validate)
app.command("smoke")(smoke.smoke)
app.command("table")(table.table)
app.add_typer(runs.app, name="runs")
app.command("compare")(compare.compare)
app.command("ingest")(ingest.ingest)
app.add_typer(datasets.app, name="datasets")
app.command("evaluate")(evaluate.evaluate)
app.add_typer(judge.app, name="judge")


def main() -> None:
    app()
