"""Helpers shared by the CLI modules: consoles, error handling, small parsers."""

from __future__ import annotations

import errno
import functools
import io
import json
import logging
import math
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from xmcbench import paths
from xmcbench.errors import UsageError, XmcbenchError
from xmcbench.faults import DISK_FULL_ERRNOS, NOT_WRITABLE_ERRNOS, cannot_write
from xmcbench.redact import redact

# Lines that carry a path, a run id or a command are printed with soft_wrap=True: the terminal folds
# them, rich never breaks them with a newline, so they copy back whole. Tables and live displays
# keep rich's wrapping (a live display must know how many lines it drew).
console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable)
log = logging.getLogger("xmcbench.cli")


def handle_errors(fn: F) -> F:
    """Turn an XmcbenchError into one red line on stderr and exit status 1 (no traceback).

    A full or read-only disk, a permission denied, running out of memory, the network and a path
    the user gave are the machine's state or the user's input, not bugs: they get one line too,
    saying what to do. Any other OSError (a file xmcbench itself should have made, say) is a bug
    that only looks like the user's: its line says so and how to report it. The traceback is
    logged at debug level in both cases, for ``-v``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UsageError as exc:
            _error_line(f"{exc} (see `{_command_path()} --help`)", code=2)
        except XmcbenchError as exc:
            _error_line(str(exc))
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]")
            raise typer.Exit(130) from None
        except MemoryError:
            log.debug("out of memory", exc_info=True)
            _error_line(
                "out of memory: the data (or the sizes asked for) do not fit in this machine's memory; "
                "use smaller sizes or a machine with more memory"
            )
        except BrokenPipeError:
            raise  # the reader of stdout went away (`| head`): nothing is wrong with the work
        except OSError as exc:
            log.debug("%s", exc, exc_info=True)
            if expected_os_error(exc, given_paths(args, kwargs)):
                _error_line(os_error_line(exc))
            _error_line(unexpected_os_error_line(exc))

    return wrapper  # type: ignore[return-value]


def _error_line(message: str, code: int = 1) -> None:
    # Messages quote paths and names the user chose: "[" in them must print, not style. They may
    # quote a URL or a value given with its credentials too, and stderr often goes to a log file.
    err_console.print(f"[bold red]error:[/] {escape(redact(message))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code) from None


def _command_path() -> str:
    """``xmcbench run``: the command being run, as its --help is asked for."""
    import importlib

    # click as this typer uses it: the click package, or the copy newer typers carry inside
    package = typer.BadParameter.__module__.rsplit(".", 1)[0]
    ctx = importlib.import_module(f"{package}.globals").get_current_context(silent=True)
    return ctx.command_path if ctx is not None else "xmcbench"


# The machine's state whatever the path: the disk, the permissions, the kernel's limits, the network.
_MACHINE_ERRNOS = frozenset(
    DISK_FULL_ERRNOS
    + NOT_WRITABLE_ERRNOS
    + (errno.EIO, errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENAMETOOLONG, errno.ETXTBSY, errno.EBUSY)
    + (errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT)
    + (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN)
)
# HTTP clients raise OSErrors for a server's answer (401, 404) or a broken connection: the
# network's or the user's (a repo name, a token), never a bug of the file system's kind.
_NETWORK_MODULES = ("requests", "urllib3", "httpx", "httpx2", "huggingface_hub")


def given_paths(args: tuple, kwargs: dict) -> list[str]:
    """The values a command was called with that can name a file (strings and paths, alone or in lists)."""
    found: list[str] = []
    for value in (*args, *kwargs.values()):
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, (str, os.PathLike)) and str(item):
                found.append(str(item))
                # a --set KEY=VALUE gives a path by its value (--set encoder.name=./my-model)
                key, equals, value = str(item).partition("=")
                if equals and key and value.strip().strip("'\""):
                    found.append(value.strip().strip("'\""))
    return found


def _absolute(path: str | os.PathLike) -> Path:
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def _forms(path: str | os.PathLike) -> set[Path]:
    """A path as given and as its symbolic links lead (a library may name a file by its real path)."""
    absolute = _absolute(path)
    return {absolute, Path(os.path.realpath(absolute))}


def _related(filename: Path, given: Path) -> bool:
    """The same path, one inside the other: a file in a folder the user gave, or a folder on the way to it."""
    return any(f.is_relative_to(g) or g.is_relative_to(f) for f in _forms(filename) for g in _forms(given))


def expected_os_error(exc: OSError, given: list[str]) -> bool:
    """True when ``exc`` is the machine's state or the user's input rather than a bug in xmcbench.

    By errno: a full or read-only disk, permissions, I/O errors, the kernel's limits and the network
    are the machine's wherever they happen. By type: HTTP clients' errors and connection errors
    (a server's answer, a lost network). By path: any other error (a missing file, a folder where
    a file was expected) is the user's only when it names a path the command was given (a ``--set``
    value too; through symbolic links or not), a file in a folder it was given, or $XMCBENCH_HOME
    (which the user set) or a folder above it. An error with neither an errno nor a file name is a
    library's own words about its input, shown as they are. A missing file inside the home that no
    option named is one xmcbench should have made: a bug.
    """
    if exc.errno in _MACHINE_ERRNOS:
        return True
    if isinstance(exc, (ConnectionError, TimeoutError, socket.gaierror, socket.herror)):
        return True
    if any(cls.__module__.split(".")[0] in _NETWORK_MODULES for cls in type(exc).__mro__):
        return True
    if exc.errno is None and cannot_write(exc):  # a writer's own words for the disk (DuckDB, safetensors)
        return True
    named = [
        _absolute(os.fsdecode(f))
        for f in (exc.filename, exc.filename2)
        if isinstance(f, (str, bytes, os.PathLike)) and f
    ]
    if not named:
        # no errno and no file: a library's own words, most often about its input (transformers: "the
        # config file at '...' is not a valid JSON file" for a model folder named in a recipe), shown as
        # they are; an errno without a file (a bad descriptor) is xmcbench's
        return exc.errno is None
    if exc.errno == errno.ENOTDIR:  # the file in the way is what the error is about, not the path asked for
        named = [_file_in_the_way(f) for f in named]
    homes = _forms(paths.home())
    for filename in named:
        if any(_related(filename, _absolute(g)) for g in given):
            return True
        if any(h.is_relative_to(f) for h in homes for f in _forms(filename)):  # the home or a folder above it
            return True
    return False


def _file_in_the_way(path: Path) -> Path:
    """The folder of ``path`` (or ``path`` itself) that is a file, where one was expected; else ``path``."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return path if candidate.is_dir() else candidate
    return path


def unexpected_os_error_line(exc: OSError) -> str:
    """One line for an OSError that is not the user's or the machine's doing: say it is a bug."""
    return (
        f"unexpected {type(exc).__name__} inside xmcbench (most likely a bug; it names no path you gave): "
        f"{_what(exc)}; please report it with the traceback that the same command prints with -v "
        "(xmcbench -v COMMAND ...)"
    )


def _what(exc: OSError) -> str:
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def os_error_line(exc: OSError) -> str:
    """'<what the system said>: <path>[; <what to do>]': a full or read-only disk, a permission
    denied, a path that is not there are the machine's state, not bugs (``-v`` logs the traceback)."""
    line = _what(exc)
    if exc.errno == errno.ENOTDIR and isinstance(exc.filename, str):
        in_the_way = _file_in_the_way(_absolute(exc.filename))
        if in_the_way != _absolute(exc.filename):
            return f"{line}; {in_the_way} is a file where a folder is needed: move it, or give another path"
    if exc.errno in DISK_FULL_ERRNOS:
        return f"{line}; free some space or set XMCBENCH_HOME to a larger disk"
    if exc.errno in NOT_WRITABLE_ERRNOS:
        home = paths.home()
        if not exc.filename or Path(os.path.abspath(exc.filename)).is_relative_to(os.path.abspath(home)):
            return f"{line}; make $XMCBENCH_HOME ({home}) writable or set XMCBENCH_HOME elsewhere"
        return f"{line}; check that path's permissions, or give another"
    return line


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
    try:  # an empty item ("1,,5") is a typo, not a value to skip: maybe 1,3,5 was meant
        values = tuple(int(part) for part in text.replace(" ", "").split(","))
    except ValueError:
        raise XmcbenchError(f"--{what} expects comma-separated positive integers like 1,3,5; got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise XmcbenchError(f"--{what} expects comma-separated positive integers like 1,3,5; got {text!r}")
    return values


# -- listing formats ---------------------------------------------------------------------------

LIST_FORMATS = ("rich", "markdown", "csv", "json")
FormatHelp = "rich (terminal table), markdown, csv or json (stable keys: see README 'Machine-readable output')."


def check_format(fmt: str, allowed: tuple[str, ...] = LIST_FORMATS) -> str:
    if fmt not in allowed:
        raise XmcbenchError(f"unknown --format {fmt!r}; choose one of {', '.join(allowed)}")
    return fmt


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".") if math.isfinite(value) else ""
    if isinstance(value, (list, tuple)):
        return ";".join(_cell(v) for v in value)
    return str(value)


def emit_rows(rows: list[dict[str, Any]], fmt: str, columns: list[str] | None = None) -> None:
    """Print dict rows as markdown, csv or json (a list of objects; json keeps every key)."""
    import csv
    import io

    if fmt == "json":
        typer.echo(strict_json(rows, indent=2, ensure_ascii=False, default=str))
        return
    columns = columns or list(dict.fromkeys(key for row in rows for key in row))
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(row.get(c)) for c in columns])
        typer.echo(buffer.getvalue(), nl=False)
        return
    if fmt == "markdown":

        def esc(text: str) -> str:
            return text.replace("|", "\\|")

        lines = ["| " + " | ".join(esc(c) for c in columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(esc(_cell(row.get(c))) for c in columns) + " |" for row in rows]
        typer.echo("\n".join(lines))
        return
    raise XmcbenchError(f"unknown --format {fmt!r}; choose one of {', '.join(LIST_FORMATS)}")


def print_rich(renderable: Any) -> None:
    """A rich renderable on stdout: fitted to a terminal, or at full width (no colours) when piped.

    A table too wide for the terminal never cuts a cell to "…" (rich's way of fitting it, which
    turned scores into "40.…"): its text columns wrap, and where even its unwrappable cells do not
    fit, it is printed at its own width and the terminal folds the lines.
    """
    if console.is_terminal:
        width = _keep_cells_whole(renderable) if isinstance(renderable, Table) else 0
        out = console
        if width > console.width:  # rich would cut cells to fit: wider lines, which the terminal folds
            out = Console(width=width, file=console.file, force_terminal=True, color_system=console.color_system)
        out.print(renderable, highlight=False)  # ids stay one colour (and copy as one word)
        return
    width = max(400, _keep_cells_whole(renderable) if isinstance(renderable, Table) else 0)
    plain = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    plain.print(renderable)
    typer.echo("\n".join(line.rstrip() for line in plain.export_text().splitlines()))


def _keep_cells_whole(table: Table) -> int:
    """Set ``table``'s columns so that no cell is cut: its unwrappable (``no_wrap``) columns as wide as
    their widest cell, its other columns folding a word too long for them; returns the narrowest
    width the table then fits in."""
    for column in table.columns:
        if column.no_wrap:
            widest = max(console.measure(cell).maximum for cell in (column.header, *column.cells))
            column.min_width = max(column.min_width or 0, widest)
        elif column.overflow == "ellipsis":
            column.overflow = "fold"
    unbounded = console.options.update(width=1 << 16)  # the default options cap a measure at the terminal's width
    return console.measure(table, options=unbounded).minimum


def heal_finished_runs(store, runs: list[dict[str, Any]]) -> bool:
    """Index the runs whose record says finished while the database does not
    (``xmcbench.store.heal``), saying so on stderr; True when any was indexed (read them again)."""
    from xmcbench.store.heal import index_finished

    healed = index_finished(store, runs)
    for run in healed:
        said = (
            "indexed it now"
            if run.problem is None
            else f"could not index it now ({run.problem}); `xmcbench ingest {run.folder}` will"
        )
        err_console.print(
            f"[yellow]note:[/] run {escape(run.run_id)} finished (its record.json says so) but the database had "
            f"not learnt it; {escape(said)}",
            highlight=False,
            soft_wrap=True,
        )
    return any(run.problem is None for run in healed)
