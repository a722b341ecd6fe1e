"""Helpers shared by the CLI modules: consoles, error handling, small parsers."""

from __future__ import annotations

import functools
import json
import math
from typing import Any, Callable, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from xmcbench.errors import XmcbenchError

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable)


def handle_errors(fn: F) -> F:
    """Turn an XmcbenchError into one red line on stderr and exit status 1 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except XmcbenchError as exc:
            # Messages quote paths and names the user chose: "[" in them must print, not style.
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def strict_json(value: Any, **kwargs) -> str:
    """JSON that every parser accepts: NaN/±inf (no JSON spelling) become null instead of bare NaN."""
    return json.dumps(_finite(value), allow_nan=False, **kwargs)


def parse_int_list(text: str, what: str = "k") -> tuple[int, ...]:
    """'1,3,5' -> (1, 3, 5), with a clear error for anything else."""
    try:
        values = tuple(int(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError:
        raise XmcbenchError(f"--{what} expects comma-separated positive integers like 1,3,5; got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise XmcbenchError(f"--{what} expects comma-separated positive integers like 1,3,5; got {text!r}")
    return values
