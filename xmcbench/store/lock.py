"""Serialising writers to one DuckDB file, and retrying readers.

DuckDB lets one process at a time open a database file read-write (others get "Conflicting lock
is held"), and read-only opens fail while a writer has it. Several ``xmcbench run`` processes
finishing together must all be recorded, so every write goes through the same short protocol:

1. take the exclusive lock on ``<db>.lock`` (``xmcbench.fsutil.file_lock``, i.e. ``filelock``),
2. open the database read-write (retrying while a reader holds it briefly),
3. write in one transaction, close,
4. release the lock.

Readers take no lock file (so they work where they may not write): they open read-only for the
duration of one query and retry on a lock conflict, so they never hold a writer up for longer
than a query. Whoever has to wait says so once through a ``notify`` callback rather than hanging
silently.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TypeVar

import duckdb

from xmcbench.errors import XmcbenchError
from xmcbench.faults import duckdb_conflict
from xmcbench.fsutil import file_lock

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 120.0  # a write holds the lock for milliseconds; minutes means something is stuck
_POLL_S = (0.005, 0.2)  # first and largest sleep between tries (doubles in between)


class DatabaseLockTimeout(XmcbenchError):
    """The results database stayed locked by another process for longer than the timeout."""


def lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


def busy_message(db_path: Path) -> str:
    return f"the results database {db_path} is busy (another xmcbench process); waiting …"


def _sleeps(timeout_s: float) -> Iterator[None]:
    """Yield once per try until ``timeout_s`` has passed, sleeping with capped exponential backoff."""
    deadline = time.monotonic() + timeout_s
    pause = _POLL_S[0]
    while True:
        yield
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, _POLL_S[1])


@contextmanager
def write_lock(
    db_path: Path, timeout_s: float = DEFAULT_TIMEOUT_S, notify: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Hold the exclusive lock on ``<db>.lock`` (across processes, and across threads of one).

    ``notify`` is told once, before waiting, when another process holds it.
    """
    path = lock_path(db_path)
    with ExitStack() as stack:
        try:
            stack.enter_context(
                file_lock(
                    path, timeout=timeout_s, on_wait=(lambda _: notify(busy_message(db_path))) if notify else None
                )
            )
        except XmcbenchError:  # file_lock's own timeout: say which database and what to do
            raise DatabaseLockTimeout(
                f"{path}: could not lock the results database within {timeout_s:.0f} s; another "
                f"xmcbench process is writing to it (or hung while doing so). Wait and retry, or "
                f"stop the stuck process; the lock is released automatically when it exits"
            ) from None
        yield


def is_lock_conflict(exc: BaseException) -> bool:
    """DuckDB's error when another process has the file open in a conflicting mode.

    Matched on DuckDB's own wording (``faults.duckdb_conflict``): a looser test ("lock" anywhere)
    also matches damage reports such as "checksum ... in block at location", which must not be
    retried for minutes.
    """
    return duckdb_conflict(exc)


def retry_on_conflict(
    action: Callable[[], T],
    what: str,
    db_path: Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    notify: Callable[[str], None] | None = None,
) -> T:
    """Run ``action`` (which opens the database), retrying while another process holds it.

    ``notify`` is told once, at the first conflict, that this process is waiting.
    """
    last: BaseException | None = None
    for _ in _sleeps(timeout_s):
        try:
            return action()
        except duckdb.Error as exc:
            if not is_lock_conflict(exc):
                raise
            if last is None and notify is not None:
                notify(busy_message(db_path))
            last = exc
    raise DatabaseLockTimeout(
        f"{db_path}: could not {what} within {timeout_s:.0f} s because another process kept the "
        f"database open ({last}). Wait and retry, or stop that process"
    )
