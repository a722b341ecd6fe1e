"""``xmcbench recipes list``: the recipes shipped with xmcbench, runnable by name."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from xmcbench.cli._common import FormatHelp, check_format, emit_rows, handle_errors, print_rich

app = typer.Typer(help="The recipes shipped with xmcbench (run one with `xmcbench run NAME`).", no_args_is_help=True)


@app.command("list")
@handle_errors
def list_recipes(
    format: Annotated[str, typer.Option("--format", "-f", help=FormatHelp)] = "rich",
) -> None:
    """Every shipped recipe: its name (for `xmcbench run NAME`), method, dataset and description."""
    from xmcbench.recipe import RecipeError, read_recipe
    from xmcbench.run.shipped import list_recipes as shipped
    from xmcbench.run.shipped import recipes_dir

    check_format(format)
    rows = []
    for name, path in shipped().items():
        try:  # with its includes: the smoke recipes take their dataset from base/
            data = read_recipe(path)
            unreadable = None
        except RecipeError as exc:
            data, unreadable = {}, exc.problems[0].message
        method, dataset = (data.get(key) for key in ("method", "dataset"))
        description = data.get("description")
        rows.append(
            {
                "name": name,
                "method": _text(method.get("name") if isinstance(method, dict) else method),
                "dataset": _text(dataset.get("name") if isinstance(dataset, dict) else dataset),
                "description": f"cannot be read: {unreadable}"
                if unreadable
                else (_text(description) or "").strip() or None,
                "path": str(path),
            }
        )
    if format != "rich":
        emit_rows(rows, format)
        return
    table = Table(title=escape(f"{len(rows)} recipes in {recipes_dir()}"))
    table.add_column("name", no_wrap=True)
    table.add_column("method", no_wrap=True)
    table.add_column("dataset", overflow="fold")
    table.add_column("description", overflow="fold")
    for row in rows:
        table.add_row(*(escape(str(row[k] or "–")) for k in ("name", "method", "dataset", "description")))
    print_rich(table)


def _text(value) -> str | None:
    """A recipe value to show: text as is, None as None, anything else (a list, a number) as written."""
    return value if value is None or isinstance(value, str) else str(value)
