"""Progress bars for long work (rich), on stderr so stdout stays data; ``enabled=False`` / ``--quiet`` silences them.

Where stderr is no terminal (a log file, a pipe, a batch job), a bar would be silent for a whole
epoch; ``task`` then logs a line instead, at most every ``XMCBENCH_PROGRESS_SECONDS`` (default 60):
what, how far, how long, and about how long is left."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import partialmethod
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

T = TypeVar("T")
_ENABLED = {"bars": True}
log = logging.getLogger(__name__)
DEFAULT_LINE_SECONDS = 60.0


def set_enabled(enabled: bool) -> None:
    """Switch every progress bar of this process on or off (the CLI: off with --quiet or when stderr is no terminal)."""
    _ENABLED["bars"] = bool(enabled)


def silence_library_bars() -> None:
    """Switch off the model libraries' own bars (huggingface_hub, transformers, plain tqdm) in this process.

    The environment switches are read at import: tqdm applies ``TQDM_*`` when it is imported
    (``tqdm.utils.envwrap``), and whatever imported torch before the CLI ran (``python -m``, a
    caller's own code) has imported tqdm too, so a bar such as transformers' GGUF conversion still
    redrew into log files. An imported tqdm gets the override tqdm itself would have applied. A
    switch the user set (``TQDM_DISABLE=0``) is left alone.
    """
    hub_chosen, tqdm_chosen = "HF_HUB_DISABLE_PROGRESS_BARS" in os.environ, "TQDM_DISABLE" in os.environ
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    if "huggingface_hub" in sys.modules and not hub_chosen:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    std = sys.modules.get("tqdm.std")
    if std is not None and not tqdm_chosen and "_xmcbench_unsilenced" not in vars(std.tqdm):
        std.tqdm._xmcbench_unsilenced = vars(std.tqdm)["__init__"]  # to switch back (tests)
        std.tqdm.__init__ = partialmethod(std.tqdm.__init__, disable=True)


def bars_enabled(enabled: bool = True) -> bool:
    """Whether a bar asked for with ``enabled`` shows: on, globally enabled, and stderr a terminal."""
    return enabled and _ENABLED["bars"] and Console(stderr=True).is_terminal


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
    if not bars_enabled(enabled):
        yield from items
        return
    with make_progress(transient=True) as progress:
        yield from progress.track(items, total=total, description=description)


def line_seconds() -> float:
    """Seconds between progress lines where no bar can show (``XMCBENCH_PROGRESS_SECONDS``)."""
    raw = os.environ.get("XMCBENCH_PROGRESS_SECONDS", "")
    try:
        seconds = float(raw) if raw.strip() else DEFAULT_LINE_SECONDS
    except ValueError:
        seconds = DEFAULT_LINE_SECONDS
    return seconds if seconds > 0 else DEFAULT_LINE_SECONDS


class _Lines:
    """``advance`` for a task with no bar: a log line when ``every`` seconds have passed since the last."""

    def __init__(self, description: str, total: float | None, every: float):
        self.description, self.total, self.every = description, total, every
        self.done = 0.0
        self.start = self.last = time.monotonic()

    def __call__(self, n: float = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        elapsed = now - self.start
        where = f"{self.done:,.0f}"
        if self.total:
            where += f"/{self.total:,.0f} ({100 * self.done / self.total:.0f}%)"
            if 0 < self.done < self.total:
                where += f", ~{duration(elapsed * (self.total - self.done) / self.done)} left"
        log.info("%s: %s, %s so far", self.description, where, duration(elapsed))


def duration(seconds: float) -> str:
    """A span as an epoch line and a progress line write it: ``6m49s``, ``1h02m``."""
    seconds = int(round(seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
    )


@contextmanager
def task(description: str, total: float | None, enabled: bool = True):
    """A bar advanced by hand: ``with task("encode", n) as advance: advance(batch)``; where stderr
    is no terminal, a log line every ``line_seconds()`` instead."""
    if not bars_enabled(enabled):
        yield _Lines(description, total, line_seconds()) if enabled else (lambda n=1: None)
        return
    with make_progress(transient=True) as progress:
        tid = progress.add_task(description, total=total)
        yield lambda n=1: progress.advance(tid, n)
