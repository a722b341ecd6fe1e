"""Progress bars for long work (rich, on stderr so stdout stays clean), silenced with ``enabled=False`` / ``--quiet``."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

T = TypeVar("T")


def make_progress(transient: bool = False) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        transient=transient,
        console=Console(stderr=True),
    )


def track(items: Iterable[T], description: str, total: int | None = None, enabled: bool = True) -> Iterator[T]:
    """Iterate with a progress bar when enabled (and the output is a terminal or forced)."""
    if not enabled:
        yield from items
        return
    with make_progress(transient=True) as progress:
        yield from progress.track(items, total=total, description=description)


@contextmanager
def task(description: str, total: float | None, enabled: bool = True):
    """A bar advanced by hand: ``with task("encode", n) as advance: advance(batch)``."""
    if not enabled:
        yield lambda n=1: None
        return
    with make_progress(transient=True) as progress:
        tid = progress.add_task(description, total=total)
        yield lambda n=1: progress.advance(tid, n)
