"""Progress bars for long work (rich), on stderr so stdout stays data; ``enabled=False`` / ``--quiet`` silences them."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import partialmethod
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

T = TypeVar("T")
_ENABLED = {"bars": True}


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


@contextmanager
def task(description: str, total: float | None, enabled: bool = True):
    """A bar advanced by hand: ``with task("encode", n) as advance: advance(batch)``."""
    if not bars_enabled(enabled):
        yield lambda n=1: None
        return
    with make_progress(transient=True) as progress:
        tid = progress.add_task(description, total=total)
        yield lambda n=1: progress.advance(tid, n)
