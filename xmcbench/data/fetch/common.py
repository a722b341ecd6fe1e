"""What the transports share: the byte progress bar, error-page detection, disk-space messages."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from rich.console import Console
from rich.filesize import decimal as human_size
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from xmcbench.errors import DownloadError

CHUNK = 1 << 20  # 1 MiB reads: fast, and a smooth progress bar
TIMEOUT_S = 60  # seconds without a byte before a connection counts as dropped
LARGER_DISK = "free some space or set XMCBENCH_HOME to a larger disk"

console = Console(stderr=True)  # messages and bars never go to stdout

Update = Callable[[int, "int | None"], None]


class NoSpaceError(DownloadError):
    """The disk is too full for a download or an extraction: nothing is wrong with the files, so a
    complete download is kept for the next try."""


def say_for(progress: bool) -> Callable[..., None]:
    """``console.print`` when ``progress``, else a no-op. Messages print as written: a "[" in a path
    is not rich markup, and a long path is not broken at the terminal's width (it copies back whole)."""
    if not progress:
        return lambda *a, **k: None

    def say(message, **kwargs) -> None:
        console.print(message, **{"markup": False, "highlight": False, "soft_wrap": True, **kwargs})

    return say


@contextlib.contextmanager
def byte_bar(enabled: bool, description: str, total: int | None) -> Iterator[Update]:
    """A rich progress bar (bytes, speed, ETA) on stderr, or a no-op when disabled."""
    if not enabled:
        yield lambda done, total=None: None
        return
    with Progress(
        TextColumn("{task.description}", markup=False),  # a file name's "[" is not markup
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
    ) as bar:
        task = bar.add_task(description, total=total)

        def update(done: int, total: int | None = None) -> None:
            bar.update(task, completed=done, **({"total": total} if total is not None else {}))

        yield update


_PAGE_REASONS = [
    (
        re.compile(r"too many users|quota|download limit", re.I),
        "its download quota is exceeded (too many users downloaded it recently)",
    ),
    (re.compile(r"virus", re.I), "Drive answered with its virus-scan warning page instead of the file"),
    (
        re.compile(r"permission|request access|you need access|sign in|servicelogin|not shared|public link", re.I),
        "the file is not shared publicly (permission denied)",
    ),
]


def page_reason(text: str) -> str | None:
    """Why a web page came instead of a file (quota, virus scan, permission), when it says so."""
    return next((why for pattern, why in _PAGE_REASONS if pattern.search(text)), None)


def html_head(path: Path) -> str | None:
    """The start of ``path`` when it is an HTML page (an error page where a file was expected)."""
    with open(path, "rb") as fh:
        head = fh.read(64 * 1024)
    if re.match(rb"\s*(<!doctype html|<html)", head, re.I):
        return head.decode("utf-8", "replace")
    return None


def check_space(folder: Path, needed: int, what: str) -> None:
    """DownloadError when ``folder``'s disk has less than ``needed`` bytes free."""
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise NoSpaceError(
            f"not enough disk space for {what} in {folder}: needed {needed:,} bytes "
            f"({human_size(needed)}), {free:,} free ({human_size(free)}); {LARGER_DISK}"
        )


def disk_full(what: str, folder: Path, needed: str = "", after: str = "") -> NoSpaceError:
    free = shutil.disk_usage(folder).free
    need = f"needed {needed}, " if needed else ""
    return NoSpaceError(f"disk full while {what} into {folder}: {need}{free:,} bytes free{after}; {LARGER_DISK}")


def copy_file(src: Path, dest: Path) -> None:
    try:
        shutil.copyfile(src, dest)
    except OSError as exc:
        dest.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise disk_full(f"copying {src}", dest.parent, f"{src.stat().st_size:,} bytes") from None
        raise DownloadError(f"cannot copy {src} to {dest.parent}: {exc.strerror or exc}") from None


def walk(root: Path) -> dict[PurePosixPath, Path]:
    """Every regular file under ``root`` by relative path, hidden folders (working areas: ours,
    Hugging Face's ``.cache``) left out."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for fname in filenames:
            path = Path(dirpath) / fname
            if path.is_file():
                out[PurePosixPath(path.relative_to(root).as_posix())] = path
    return out
