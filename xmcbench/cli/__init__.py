"""The ``xmcbench`` command line: a thin Typer layer over the library.

One module per command group; each exposes either a ``typer.Typer`` named ``app`` (a group)
or a command function. Heavy imports (torch, transformers) happen inside commands so that
``xmcbench --help`` stays fast.
"""

from __future__ import annotations

import inspect
import logging
import sys

import typer
import typer.core

from xmcbench import __version__
from xmcbench.cli import (
    compare,
    datasets,
    evaluate,
    hub,
    ingest,
    judge,
    plan,
    recipes,
    run,
    runs,
    site,
    smoke,
    sweep,
    table,
)

# click's error types, wherever this typer takes them from (newer releases carry their own copy of click)
_CLICK_ERRORS = {c.__name__: c for c in typer.BadParameter.__mro__}
_ClickException, _UsageError = _CLICK_ERRORS["ClickException"], _CLICK_ERRORS["UsageError"]


class _OneLineErrors(typer.core.TyperGroup):
    """The root command: a mistyped command, option or value is one line on stderr, like xmcbench's own
    errors (what is wrong, and the --help that shows the right spelling), with click's exit status 2."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except _ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # the help is printed already
                sys.exit(exc.exit_code)
            sys.exit(_usage_line(exc))
        except typer.Abort:
            typer.echo("Aborted.", err=True)
            sys.exit(1)
        # a command's return value is not an exit status; typer.Exit's code comes back as an int
        sys.exit(code if isinstance(code, int) else 0)


def _usage_line(exc) -> int:
    from rich.markup import escape

    from xmcbench.cli._common import err_console

    message = " ".join(exc.format_message().split())  # click folds long messages over lines
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, _UsageError) and ctx is not None:
        message = f"{message.rstrip('.')} (see `{ctx.command_path} --help`)"
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return exc.exit_code


app = typer.Typer(
    cls=_OneLineErrors,
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
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only warnings and errors on stderr; no progress bars."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug lines too (and the model libraries' own info)."),
) -> None:
    """Benchmarks and leaderboards for extreme multi-label classification (XMC).

    Data, runs and the results database live under $XMCBENCH_HOME (default: ~/.cache/xmcbench).
    Runs log phases, epochs and evaluation to stderr (one line each, fit for a log file);
    --quiet keeps warnings only, --verbose adds debug lines.
    """
    configure_logging(quiet=quiet, verbose=verbose)


def configure_logging(quiet: bool = False, verbose: bool = False) -> None:
    """xmcbench's log lines on stderr: INFO by default, WARNING with --quiet, DEBUG with --verbose.

    Progress bars appear only when stderr is a terminal (and not with --quiet); otherwise the
    model libraries' own bars are switched off too, so a log file holds lines, not bar redraws.
    """
    from xmcbench import progress

    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    package = logging.getLogger("xmcbench")
    package.handlers[:] = [handler]
    package.setLevel(level)
    package.propagate = False
    # other libraries: warnings only (their info lines are noise at a run's rate), unless --verbose
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    bars = not quiet and sys.stderr.isatty()
    progress.set_enabled(bars)
    if not bars:
        progress.silence_library_bars()


app.command("run")(run.run)
app.command("validate")(run.validate)
app.command("smoke")(smoke.smoke)
app.command("sweep")(sweep.sweep)
app.command("table")(table.table)
app.add_typer(runs.app, name="runs")
app.command("compare")(compare.compare)
app.command("ingest")(ingest.ingest)
app.add_typer(datasets.app, name="datasets")
app.command("evaluate")(evaluate.evaluate)
app.command("push")(hub.push)
app.command("push-results")(hub.push_results)
app.command("site")(site.site)
app.add_typer(recipes.app, name="recipes")
app.command("plan")(plan.plan)
app.add_typer(judge.app, name="judge")


def reflow(text: str | None) -> str | None:
    """A docstring as --help should show it: lines of one paragraph joined (the terminal wraps them).

    Paragraphs (blank-line separated) stay apart, and so do lines that start a list item ("- ")
    or are indented (examples).
    """
    if not text:
        return text
    paragraphs = []
    for block in inspect.cleandoc(text).split("\n\n"):
        lines: list[str] = []
        for line in block.splitlines():
            if lines and line.strip() and not line.startswith((" ", "-", "*")) and not lines[-1].startswith(" "):
                lines[-1] = lines[-1].rstrip() + " " + line.strip()
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def _reflow_help(typer_app: typer.Typer) -> None:
    for info in typer_app.registered_commands:
        if info.help is None and info.callback is not None:
            info.help = reflow(info.callback.__doc__)
    for group in typer_app.registered_groups:
        _reflow_help(group.typer_instance)


_reflow_help(app)


def main() -> None:
    app()
